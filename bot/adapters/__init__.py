"""Adapters: the only code that talks to the database, Kubernetes, AWS, the model endpoint or Slack."""
