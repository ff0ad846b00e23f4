"""The artifact gate's checks as pure functions over a release tuple and what S3/ECR reported.

The manifest model already refuses tag-only images and short commits at
registration; these checks verify them again on their own, because a stored
tuple may predate a rule and tests build tuples with ``model_construct``. Checks
that need AWS take plain observations (:class:`ObservedObject`,
:class:`BucketPosture`, :class:`ImageScan`) gathered by the adapter, so the
rules are tested without any I/O. A check never echoes a secret value.

One module per family: :mod:`.serving` (image reference, provenance, vLLM's arguments), :mod:`.objects` (the
weights' object list), :mod:`.buckets` (the bucket's protection and policy), :mod:`.registry` (licence, image scan).
"""

from bot.domain.artifact_checks.buckets import (
    BPA_FLAGS,
    READ_ACTIONS,
    BucketPosture,
    bucket_checks,
    bucket_policy_check,
    inference_role_readers,
    public_read_statements,
)
from bot.domain.artifact_checks.objects import ObservedObject, compare_objects, first_few
from bot.domain.artifact_checks.registry import ImageScan, check_licence, image_registry_checks
from bot.domain.artifact_checks.serving import (
    ECR_HOST,
    ImageRef,
    check_image_pinned,
    check_max_model_len,
    check_model_argument,
    check_model_commit,
    check_no_secrets,
    check_provenance,
    check_served_model_name,
    check_tensor_parallel,
    check_trust_remote_code,
    parse_image,
    serving_checks,
)

__all__ = [
    "BPA_FLAGS",
    "ECR_HOST",
    "READ_ACTIONS",
    "BucketPosture",
    "ImageRef",
    "ImageScan",
    "ObservedObject",
    "bucket_checks",
    "bucket_policy_check",
    "check_image_pinned",
    "check_licence",
    "check_max_model_len",
    "check_model_argument",
    "check_model_commit",
    "check_no_secrets",
    "check_provenance",
    "check_served_model_name",
    "check_tensor_parallel",
    "check_trust_remote_code",
    "compare_objects",
    "first_few",
    "image_registry_checks",
    "inference_role_readers",
    "parse_image",
    "public_read_statements",
    "serving_checks",
]
