"""moto's server as a local S3 + ECR, and a seeded "good" release on it.

moto is a test/sandbox dependency, so it is imported inside :func:`start_moto`
only: importing this package costs nothing in production. Clients made by
:meth:`MotoStandIn.client` are the same boto3 clients production uses, pointed
at ``http://127.0.0.1:<ephemeral port>`` with dummy credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from bot.adapters.aws.session import make_client, new_session
from bot.domain.artifact_checks import parse_image
from bot.domain.release import ReleaseManifest, parse_s3_uri

DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
INFERENCE_ROLE = "arn:aws:iam::123456789012:role/kimi-k3-inference"
"""The role the sandbox's model pods read weights with: the one the weights bucket's policy lets read."""


@dataclass
class MotoStandIn:
    """A running moto server on 127.0.0.1 and a way to make clients for it."""

    server: Any
    url: str
    _clients: dict[tuple[str, str, bool], Any] = field(default_factory=dict, repr=False)
    _http: httpx.Client | None = field(default=None, repr=False)

    def client(self, service: str, region: str = "us-east-1", *, single_attempt: bool = True) -> Any:
        """One client per service, region and retry policy, kept: boto3 clients are thread-safe and hold no state of
        the server's, and a new one (a session reading its service model, an SSL context) costs tens of
        milliseconds of CPU, paid many times over in a sandbox and a test run."""
        key = (service, region, single_attempt)
        if key not in self._clients:
            session = new_session(region_name=region, **DUMMY_CREDENTIALS)
            self._clients[key] = make_client(service, region=region, endpoint_url=self.url,
                                             single_attempt=single_attempt, session=session)
        return self._clients[key]

    def api(self, path: str, **kwargs: Any) -> None:
        """POST to moto's own API (``/moto-api/...``) on one kept HTTP client: a new one per call (``httpx.post``)
        builds an SSL context first, 20 ms of CPU, before each artifact test's reset."""
        if self._http is None:
            self._http = httpx.Client(timeout=10)
        self._http.post(f"{self.url}{path}", **kwargs).raise_for_status()

    def reset(self) -> None:
        """Forget every bucket, object and image (moto keeps its state per process, shared by all its servers)."""
        self.api("/moto-api/reset")

    def stop(self) -> None:
        if self._http is not None:
            self._http.close()
        self.server.stop()


def start_moto() -> MotoStandIn:
    """Start ``ThreadedMotoServer`` on an ephemeral port of 127.0.0.1."""
    from moto.server import ThreadedMotoServer

    # moto serves through werkzeug, which logs every request to stderr; the sandbox's output is the conversation.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return MotoStandIn(server=server, url=f"http://{host}:{port}")


def default_files() -> dict[str, bytes]:
    """Small stand-ins for a Kimi K3 snapshot: config, tokenizer and two shards."""
    return {
        "config.json": json.dumps({"architectures": ["KimiK3ForCausalLM"], "num_hidden_layers": 4}).encode(),
        "tokenizer_config.json": json.dumps({"model_max_length": 262144}).encode(),
        "model-00001-of-00002.safetensors": bytes(range(256)) * 4096,
        "model-00002-of-00002.safetensors": bytes(reversed(range(256))) * 3000,
    }


def _shards_carry_checksums(key: str) -> bool:
    # Shards uploaded with a SHA-256 checksum, small files without: both read paths get used.
    return key.endswith(".safetensors")


def seed_good_release(
    s3: Any,
    ecr: Any,
    template: ReleaseManifest,
    *,
    files: Mapping[str, bytes] | None = None,
    licence: bytes = b"Kimi K3 licence (sandbox copy)\n",
    with_checksum: Callable[[str], bool] = _shards_carry_checksums,
    tag: str = "kimi-k3",
    inference_roles: tuple[str, ...] = (INFERENCE_ROLE,),
) -> ReleaseManifest:
    """Create the template's bucket, objects, licence and ECR image so every artifact check passes.

    Returns the template with its object list and licence checksum replaced by
    those of the bytes actually uploaded (a template's checksums cannot be
    matched by made-up content).
    """
    files = dict(files if files is not None else default_files())
    bucket, prefix = template.weights.bucket, template.weights.key_prefix
    _ensure_bucket(s3, bucket)
    log_bucket = f"{bucket}-access-logs"[:63]
    _ensure_bucket(s3, log_bucket)
    # S3 refuses a logging target the log-delivery group cannot write to.
    s3.put_bucket_acl(Bucket=log_bucket, ACL="log-delivery-write")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            flag: True for flag in ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
        },
    )
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]},
    )
    s3.put_bucket_logging(
        Bucket=bucket, BucketLoggingStatus={"LoggingEnabled": {"TargetBucket": log_bucket, "TargetPrefix": f"{bucket}/"}}
    )
    s3.put_bucket_policy(Bucket=bucket, Policy=inference_read_policy(bucket, inference_roles))
    objects = []
    for key, body in files.items():
        extra = {"ChecksumAlgorithm": "SHA256"} if with_checksum(key) else {}
        s3.put_object(Bucket=bucket, Key=prefix + key, Body=body, **extra)
        objects.append({"key": key, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    licence_uri = template.licence.document or f"s3://{bucket}/licences/{template.licence.version}.txt"
    lic_bucket, lic_key = parse_s3_uri(licence_uri)
    _ensure_bucket(s3, lic_bucket)
    s3.put_object(Bucket=lic_bucket, Key=lic_key, Body=licence)
    seed_image(ecr, template.image, tag)  # one tag per release: moving a tag would untag the other image
    if template.evaluation_report and template.evaluation_report.startswith("s3://"):
        # The evaluation made when the release was built, which the model gate shows beside its own run.
        report_bucket, report_key = parse_s3_uri(template.evaluation_report)
        _ensure_bucket(s3, report_bucket)
        report = {"release": template.name, "summary": {"cases": 15, "passed": 15}}
        s3.put_object(Bucket=report_bucket, Key=report_key, Body=json.dumps(report).encode())
    data = template.model_dump(mode="json")
    data["weights"]["objects"] = objects
    data["licence"].update(document=licence_uri, sha256=hashlib.sha256(licence).hexdigest())
    return ReleaseManifest.model_validate(data)


def inference_read_policy(bucket: str, roles: tuple[str, ...]) -> str:
    """The guide's bucket policy: reads of the weights only by the inference role(s)."""
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "InferenceRoleReadsWeights", "Effect": "Allow", "Principal": {"AWS": list(roles)},
        "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
    }]})


def seed_image(ecr: Any, image: str, tag: str = "kimi-k3", *, scan: bool = True) -> None:
    """Push an image manifest to ECR under the exact digest ``image`` is pinned to."""
    ref = parse_image(image)
    if not ref.is_ecr or not ref.digest:
        raise ValueError(f"{image} is not an ECR image pinned by digest")
    with contextlib.suppress(ecr.exceptions.RepositoryAlreadyExistsException):  # several releases share a repository
        ecr.create_repository(repositoryName=ref.ecr_repository)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "config": {"digest": ref.digest}, "layers": []}
    with contextlib.suppress(ecr.exceptions.ImageAlreadyExistsException):  # seeded again (a second world on one moto)
        ecr.put_image(
            repositoryName=ref.ecr_repository, imageManifest=json.dumps(manifest), imageDigest=ref.digest, imageTag=tag
        )
    if scan:  # the artifact gate wants a completed scan (moto's completes at once, with one HIGH finding)
        ecr.start_image_scan(repositoryName=ref.ecr_repository, imageId={"imageDigest": ref.digest})


def set_scan_findings(stand_in: MotoStandIn, image: str, severity_counts: Mapping[str, int]) -> None:
    """Make ECR report ``severity_counts`` for ``image``'s scan (moto's documented static-result API)."""
    ref = parse_image(image)
    result = {
        "registryId": ref.ecr_account,
        "repositoryName": ref.ecr_repository,
        "imageId": {"imageDigest": ref.digest},
        "imageScanStatus": {"status": "COMPLETE", "description": "The scan was completed successfully."},
        "imageScanFindings": {"findingSeverityCounts": dict(severity_counts), "findings": []},
    }
    stand_in.api("/moto-api/static/ecr/scan-finding-results", json={"results": [result], "region": ref.ecr_region})
    ecr = stand_in.client("ecr", ref.ecr_region or "us-east-1")
    # A seeded image was scanned already, and ECR (moto too) allows one scan per image a day: the next read of the
    # findings returns the result posted above either way.
    with contextlib.suppress(ecr.exceptions.LimitExceededException):
        ecr.start_image_scan(registryId=ref.ecr_account, repositoryName=ref.ecr_repository, imageId={"imageDigest": ref.digest})


def _ensure_bucket(s3: Any, bucket: str) -> None:
    region = s3.meta.region_name
    kwargs: dict[str, Any] = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        s3.create_bucket(Bucket=bucket, **kwargs)  # licence and weights often share a bucket
