"""What an endpoint captures of its traffic, and the rule the infrastructure gate applies to it.

The guide: prompts can contain source code, credentials copied into tickets,
customer data and images, so capture metadata (and sampled, redacted payloads)
unless a reviewed business need justifies more. An endpoint declares its
policy (:class:`DataCapture`); by default that is the HyperPod load balancer's
access logs only: request metadata, no payloads. Payload capture needs a
recorded ``payload-capture`` security exception, a sampling rate at most the
configured ceiling, a maximum payload size, a KMS key and a retention period;
the EKS path renders no capture at all and says so.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bot.domain.checks import Check
from bot.domain.governance import ArtifactPolicy, allowed_by

METADATA_FIELDS = ("time", "client", "status", "latency", "request and response sizes", "user agent")
"""What the load balancer's access logs hold: metadata, never a prompt or an answer."""


class DataCapture(BaseModel):
    """An endpoint's capture policy: the guide's list of what must be defined."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    s3_uri: str | None = Field(default=None, pattern=r"^s3://([^/]+)(/[^,=]*)?$", max_length=512,
                               description="Where captured data goes (default on HyperPod: the TLS certificate bucket).")
    payloads: bool = Field(default=False, description="Capture sampled request and response bodies at the model pod.")
    sampling_percent: int = Field(default=0, ge=0, le=100, description="Share of requests whose payloads are captured.")
    max_payload_kb: int = Field(default=0, ge=0, le=10240, description="Largest payload captured, in KB (0: unlimited).")
    kms_key_id: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9:/_-]*$", max_length=2048,
                                   description="KMS key encrypting captured data.")
    access_role: str | None = Field(default=None, description="IAM role allowed to read captured data.")
    retention_days: int | None = Field(default=None, ge=1, le=3650, description="How long captured data is kept.")
    images: bool = Field(default=False, description="Whether image inputs are kept in captured payloads.")
    tool_results: bool = Field(default=False, description="Whether tool results are kept in captured payloads.")
    customer_opt_out: bool = Field(default=True, description="Requests of customers who opted out are never captured.")

    def summary(self) -> dict[str, Any]:
        """The policy as the rendered objects' annotation states it."""
        data: dict[str, Any] = {"metadata": list(METADATA_FIELDS), "payloads": self.payloads,
                                "customer_opt_out": self.customer_opt_out}
        if self.payloads:
            data.update(sampling_percent=self.sampling_percent, max_payload_kb=self.max_payload_kb,
                        retention_days=self.retention_days, images=self.images, tool_results=self.tool_results)
        return data


def hyperpod_data_capture(capture: DataCapture) -> dict[str, Any]:
    """The InferenceEndpointConfig's ``dataCapture``: access logs always, the model pod tier only for payloads."""
    block: dict[str, Any] = {"loadBalancer": {"enabled": True}}
    if capture.s3_uri:
        block["s3Uri"] = capture.s3_uri
    if capture.payloads:
        pod: dict[str, Any] = {
            "enabled": True,
            "initialSamplingPercentage": capture.sampling_percent,
            "captureOptions": [{"captureMode": "Input"}, {"captureMode": "Output"}],
            "payloadConfig": {"maxPayloadSizeKB": capture.max_payload_kb},
        }
        if capture.kms_key_id:
            pod["kmsKeyId"] = capture.kms_key_id
        block["modelPod"] = pod
    return block


def capture_check(capture: DataCapture, kind: str, ceiling: int, policy: ArtifactPolicy) -> Check:
    """The infrastructure gate's ``capture.policy``: metadata by default; payloads only under every safeguard."""
    name = "capture.policy"
    if not capture.payloads:
        if kind == "eks":
            return Check.passed(name, "EKS: kimi-ops renders no request capture; vLLM's /metrics only, no payloads")
        return Check.passed(name, f"load balancer access logs only ({', '.join(METADATA_FIELDS)}); no payloads")
    if kind == "eks":
        return Check.failed(name, "payload capture is rendered only on HyperPod (dataCapture.modelPod); "
                                  "set data_capture.payloads: false or capture in the application layer")
    missing = []
    if not 1 <= capture.sampling_percent <= ceiling:
        missing.append(f"sampling_percent between 1 and the ceiling of {ceiling}% (now {capture.sampling_percent}%)")
    if capture.max_payload_kb < 1:
        missing.append("max_payload_kb (0 captures whole payloads)")
    if not capture.kms_key_id:
        missing.append("kms_key_id")
    if capture.retention_days is None:
        missing.append("retention_days")
    exception, why = policy.exception("payload-capture", None)
    if exception is None:
        missing.append(f"a payload-capture security exception for this endpoint ({why})")
    if missing or exception is None:
        return Check.failed(name, "payload capture needs " + "; ".join(missing))
    kept = [w for w, on in (("images", capture.images), ("tool results", capture.tool_results)) if on]
    return Check.passed(
        name,
        f"payloads of {capture.sampling_percent}% of requests, at most {capture.max_payload_kb} KB, KMS-encrypted, kept "
        f"{capture.retention_days} days{', with ' + ' and '.join(kept) if kept else ''}; allowed by {allowed_by(exception)}",
    )
