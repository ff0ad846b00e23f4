"""AWS adapters over boto3: reserved capacity (Capacity Blocks, training plans) and artifacts (S3, ECR)."""
