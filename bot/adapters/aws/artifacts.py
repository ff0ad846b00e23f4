"""S3 and ECR reads behind the artifact gate and ``release build``.

:class:`S3Objects` lists a prefix (paginated), reads an object's full-object
SHA-256 from S3's checksum metadata (``ChecksumMode=ENABLED``) or, when it has
none, streams the object through ``hashlib`` in fixed-size chunks so memory stays
bounded however large the shard; and reports a bucket's protection settings.
:class:`EcrImages` looks a digest up and reads its scan's severity counts.
:class:`S3EcrArtifactVerifier` implements :class:`bot.services.ports.ArtifactVerifier`
by gathering those observations and handing them to the pure rules in
:mod:`bot.domain.artifact_checks`; :class:`RegionalArtifactVerifier` (what the
composition root installs) builds one per release, reading ECR in the image's
own region. Any call that cannot be made becomes an
``error`` check naming the AWS error code, never a ``pass``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from bot.adapters.aws.errors import aws_error_text as aws_error_text  # re-exported: callers import it from here
from bot.domain import artifact_checks as rules
from bot.domain.checks import Check
from bot.domain.governance import ArtifactPolicy, licence_review_check
from bot.domain.release import ReleaseManifest, parse_s3_uri

Progress = Callable[[str, int, int], None]
"""``(key, bytes_done, bytes_total)`` while an object is streamed."""

CHUNK_SIZE = 8 * 1024 * 1024
AWS_ERRORS = (ClientError, BotoCoreError)
_NOT_CONFIGURED = {
    "NoSuchPublicAccessBlockConfiguration",
    "ServerSideEncryptionConfigurationNotFoundError",
    "NoSuchBucketPolicy",
}


def error_code(exc: BaseException) -> str | None:
    return exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None


@dataclass(frozen=True)
class ListedObject:
    key: str
    size: int


def full_object_sha256(head: dict[str, Any]) -> str | None:
    """Hex SHA-256 from ``head_object`` when it covers the whole object (not a multipart composite)."""
    value = head.get("ChecksumSHA256")
    if not value:
        return None
    kind = head.get("ChecksumType")
    # A multipart upload's SHA-256 is a hash of the part hashes ("COMPOSITE"), not the object's SHA-256.
    # Older responses carry no ChecksumType: a multipart ETag ("<md5>-<parts>") or value then means composite.
    multipart = "-" in str(head.get("ETag", "")).strip('"') or "-" in value
    if kind == "COMPOSITE" or (kind != "FULL_OBJECT" and multipart):
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


class S3Objects:
    """Reads objects and bucket settings with one boto3 S3 client."""

    def __init__(self, s3_client: Any, chunk_size: int = CHUNK_SIZE) -> None:
        self.client = s3_client
        self.chunk_size = chunk_size

    def list_prefix(self, bucket: str, prefix: str) -> list[ListedObject]:
        """Every object under ``prefix`` (keys returned relative to it), all pages."""
        out: list[ListedObject] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                key = item["Key"]
                if key.endswith("/") and item["Size"] == 0:  # a console "folder" marker, not weights
                    continue
                out.append(ListedObject(key=key[len(prefix):], size=int(item["Size"])))
        return out

    def head(self, bucket: str, key: str) -> dict[str, Any] | None:
        """``head_object`` with checksums enabled; ``None`` when the object does not exist."""
        try:
            head: dict[str, Any] = self.client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            return head
        except ClientError as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def stream_sha256(self, bucket: str, key: str, progress: Progress | None = None) -> tuple[str, int]:
        """Hex SHA-256 and size of an object, read ``chunk_size`` bytes at a time."""
        response = self.client.get_object(Bucket=bucket, Key=key)
        body, total = response["Body"], int(response.get("ContentLength") or 0)
        digest, done = hashlib.sha256(), 0
        try:
            for chunk in _chunks(body, self.chunk_size):
                digest.update(chunk)
                done += len(chunk)
                if progress:
                    progress(key, done, total or done)
        finally:
            body.close()
        return digest.hexdigest(), done

    def sha256(self, bucket: str, key: str, progress: Progress | None = None, head: dict[str, Any] | None = None) -> str | None:
        """The object's SHA-256: from checksum metadata when it is full-object, else streamed. ``None``: no object."""
        head = head if head is not None else self.head(bucket, key)
        if head is None:
            return None
        return full_object_sha256(head) or self.stream_sha256(bucket, key, progress)[0]

    def read(self, uri: str, max_bytes: int) -> bytes | None:
        """A small object's bytes; ``None`` when it does not exist, ``ValueError`` when it is larger than ``max_bytes``."""
        bucket, key = parse_s3_uri(uri)
        head = self.head(bucket, key)
        if head is None:
            return None
        if int(head.get("ContentLength") or 0) > max_bytes:
            raise ValueError(f"{uri} is larger than {max_bytes:,} bytes")
        body = self.client.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            data: bytes = body.read(max_bytes + 1)
        finally:
            body.close()
        return data

    def sha256_uri(self, uri: str, progress: Progress | None = None) -> str | None:
        bucket, key = parse_s3_uri(uri)
        return self.sha256(bucket, key, progress)

    def posture(self, bucket: str) -> rules.BucketPosture:
        """Versioning, Block Public Access, default encryption, access logging and policy of ``bucket``."""
        versioning = self.client.get_bucket_versioning(Bucket=bucket).get("Status")
        bpa = self._optional(lambda: self.client.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"])
        enc = self._optional(lambda: self.client.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"])
        algorithms = tuple(
            r.get("ApplyServerSideEncryptionByDefault", {}).get("SSEAlgorithm", "")
            for r in (enc or {}).get("Rules", [])
            if r.get("ApplyServerSideEncryptionByDefault")
        )
        logging_conf = self.client.get_bucket_logging(Bucket=bucket).get("LoggingEnabled") or {}
        target = None
        if logging_conf.get("TargetBucket"):
            target = f"s3://{logging_conf['TargetBucket']}/{logging_conf.get('TargetPrefix', '')}"
        policy = self._optional(lambda: self.client.get_bucket_policy(Bucket=bucket)["Policy"])
        return rules.BucketPosture(
            bucket=bucket,
            versioning=versioning,
            public_access_block=bpa,
            encryption=algorithms,
            logging_target=target,
            policy=policy,
        )

    @staticmethod
    def _optional(call: Callable[[], Any]) -> Any:
        """The setting, or ``None`` when S3 says it is simply not configured."""
        try:
            return call()
        except ClientError as exc:
            if error_code(exc) in _NOT_CONFIGURED:
                return None
            raise


def _chunks(body: Any, size: int) -> Iterator[bytes]:
    while True:
        chunk = body.read(size)
        if not chunk:
            return
        yield chunk


class EcrImages:
    """Digest lookups and scan summaries in one region's ECR."""

    def __init__(self, ecr_client: Any) -> None:
        self.client = ecr_client

    @property
    def region(self) -> str:
        return str(self.client.meta.region_name)

    def scan(self, ref: rules.ImageRef) -> rules.ImageScan:
        ids = {"registryId": ref.ecr_account, "repositoryName": ref.ecr_repository, "imageIds": [{"imageDigest": ref.digest}]}
        try:
            self.client.describe_images(**ids)
        except ClientError as exc:
            if error_code(exc) in ("ImageNotFoundException", "RepositoryNotFoundException"):
                return rules.ImageScan(exists=False)
            raise
        try:
            found = self.client.describe_image_scan_findings(
                registryId=ref.ecr_account, repositoryName=ref.ecr_repository, imageId={"imageDigest": ref.digest}, maxResults=1
            )
        except ClientError as exc:
            if error_code(exc) == "ScanNotFoundException":
                return rules.ImageScan(exists=True, severity_counts=None)
            raise
        counts = found.get("imageScanFindings", {}).get("findingSeverityCounts", {})
        status = found.get("imageScanStatus", {}).get("status")
        return rules.ImageScan(exists=True, severity_counts={k: int(v) for k, v in counts.items()}, status=status)


class S3EcrArtifactVerifier:
    """The artifact gate's checks against S3 (weights, bucket, licence) and ECR (image)."""

    def __init__(
        self, s3_client: Any, ecr_client: Any, *, progress: Progress | None = None, chunk_size: int = CHUNK_SIZE
    ) -> None:
        self.s3 = S3Objects(s3_client, chunk_size=chunk_size)
        self.ecr = EcrImages(ecr_client)
        self.progress = progress

    def verify(self, release: ReleaseManifest, policy: ArtifactPolicy | None = None) -> list[Check]:
        policy = policy or ArtifactPolicy()
        checks = [
            rules.check_image_pinned(release.image),
            rules.check_provenance(release.provenance),
            rules.check_model_commit(release.model.commit),
        ]
        checks += self._guarded("image.exists", lambda: self.image_checks(release.image, policy, release.name))
        checks += rules.serving_checks(
            release.serving.args, release.serving.env, release.trust_remote_code_exception, policy, release.name
        )
        checks += self.verify_weights(release)
        checks += self._guarded(
            "bucket.posture",
            lambda: rules.bucket_checks(self.s3.posture(release.weights.bucket), policy.inference_roles),
        )
        checks += self._guarded("licence.sha256", lambda: [self.licence_check(release)])
        checks.append(licence_review_check(policy, release.licence.version))
        return checks

    def verify_weights(self, release: ReleaseManifest) -> list[Check]:
        return self._guarded("weights.objects", lambda: self.weight_checks(release))

    def weight_checks(self, release: ReleaseManifest) -> list[Check]:
        bucket, prefix = release.weights.bucket, release.weights.key_prefix
        listed = {o.key: o for o in self.s3.list_prefix(bucket, prefix)}
        expected = {o.key: o for o in release.weights.objects}
        observed: dict[str, rules.ObservedObject] = {}
        for key, obj in listed.items():
            want = expected.get(key)
            # Only objects of the recorded size are worth hashing; the others already fail.
            sha = self.s3.sha256(bucket, prefix + key, self.progress) if want is not None and want.size == obj.size else None
            observed[key] = rules.ObservedObject(key=key, size=obj.size, sha256=sha)
        return rules.compare_objects(release.weights.objects, observed)

    def licence_check(self, release: ReleaseManifest) -> Check:
        doc = release.licence.document
        actual = self.s3.sha256_uri(doc, self.progress) if doc else None
        return rules.check_licence(release.licence.sha256, actual, doc)

    def image_checks(self, image: str, policy: ArtifactPolicy | None = None, release: str | None = None) -> list[Check]:
        ref = rules.parse_image(image)
        if ref.is_ecr and ref.digest is None:
            return [Check.failed("image.exists", "no digest to look up in ECR; pin the image by digest")]
        if not ref.is_ecr:
            return rules.image_registry_checks(ref, None, policy, release)
        if ref.ecr_region != self.ecr.region:
            return [
                Check.errored(
                    "image.exists", f"image is in ECR region {ref.ecr_region}; this process reads ECR in {self.ecr.region}"
                )
            ]
        return rules.image_registry_checks(ref, self.ecr.scan(ref), policy, release)

    @staticmethod
    def _guarded(name: str, fn: Callable[[], list[Check]]) -> list[Check]:
        try:
            return fn()
        except AWS_ERRORS as exc:
            service = "ECR" if name.startswith("image.") else "S3"
            return [Check.errored(name, f"could not be checked: {aws_error_text(exc, service)}")]


class RegionalArtifactVerifier:
    """An :class:`S3EcrArtifactVerifier` per release: S3 in the configured region, ECR in the image's region.

    Clients are made on first use (``client_factory(service, region)``) and kept,
    so a process that never verifies anything never touches AWS.
    """

    def __init__(
        self, region: str, *, client_factory: Callable[[str, str], Any] | None = None, progress: Progress | None = None
    ) -> None:
        from bot.adapters.aws.session import make_client

        self.region = region
        self._factory = client_factory or (lambda service, region_: make_client(service, region=region_))
        self._clients: dict[tuple[str, str], Any] = {}
        self.progress = progress

    def _client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self._factory(service, region)
        return self._clients[key]

    def with_progress(self, progress: Progress | None) -> RegionalArtifactVerifier:
        """The same verifier (sharing clients) reporting streaming progress to ``progress``."""
        twin = RegionalArtifactVerifier(self.region, client_factory=self._factory, progress=progress)
        twin._clients = self._clients
        return twin

    def for_release(self, release: ReleaseManifest) -> S3EcrArtifactVerifier:
        ecr_region = rules.parse_image(release.image).ecr_region or self.region
        return S3EcrArtifactVerifier(self._client("s3", self.region), self._client("ecr", ecr_region), progress=self.progress)

    def verify(self, release: ReleaseManifest, policy: ArtifactPolicy | None = None) -> list[Check]:
        return self.for_release(release).verify(release, policy)

    def verify_weights(self, release: ReleaseManifest) -> list[Check]:
        return self.for_release(release).verify_weights(release)

    def read_document(self, uri: str, max_bytes: int) -> bytes | None:
        """A small S3 object (the release's evaluation report), read in this verifier's region."""
        try:
            return S3Objects(self._client("s3", self.region)).read(uri, max_bytes)
        except AWS_ERRORS as exc:
            raise RuntimeError(aws_error_text(exc, "S3")) from None
