"""The artifact gate's checks of what the release tuple says: the image (pinned, in ECR, scanned, with provenance),
the model commit and vLLM's serving arguments, and no secret in args or env. Each passes on a good release and fails
on its own when its one rule is broken.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from bot.domain.governance import SecurityException
from bot.sandbox import set_scan_findings
from bot.sandbox.aws import seed_image
from bot.services.artifact_gate import run_artifact_checks
from tests.artifact_support import NOW, Seeded, by_name, not_passing


def test_tag_only_image_fails_as_ambiguous_rollback(seeded: Seeded) -> None:
    tagged = seeded.release.image.split("@")[0] + ":kimi-k3"
    checks = seeded.verify(seeded.variant(image=tagged))
    assert not_passing(checks) == {"image.pinned": "fail", "image.exists": "fail"}
    assert "a floating tag makes rollback ambiguous" in by_name(checks)["image.pinned"].reason


def test_digest_missing_from_ecr_fails(seeded: Seeded) -> None:
    other = seeded.release.image.split("@sha256:")[0] + "@sha256:" + "ab" * 32
    checks = seeded.verify(seeded.variant(image=other))
    assert not_passing(checks) == {"image.exists": "fail"}
    assert "does not exist in ECR repository vllm-openai" in by_name(checks)["image.exists"].reason


def test_critical_scan_finding_fails(seeded: Seeded) -> None:
    set_scan_findings(seeded.moto, seeded.release.image, {"CRITICAL": 2, "HIGH": 5})
    checks = seeded.verify()
    assert not_passing(checks) == {"image.scan": "fail"}
    assert "2 CRITICAL" in by_name(checks)["image.scan"].reason


def test_scan_without_critical_findings_passes(seeded: Seeded) -> None:
    set_scan_findings(seeded.moto, seeded.release.image, {"HIGH": 1, "MEDIUM": 4})
    checks = seeded.verify()
    assert not_passing(checks) == {}
    assert by_name(checks)["image.scan"].reason == "no CRITICAL scan findings (HIGH 1, MEDIUM 4)"


def test_image_without_recorded_provenance_fails_and_the_gate_shows_it_when_recorded(seeded: Seeded) -> None:
    shown = by_name(seeded.verify())["image.provenance"]
    assert shown.status == "pass" and "CUDA 12.9.1 · driver >=575.57 · vLLM 6b2f8e1d4c7a" in shown.reason
    checks = seeded.verify(seeded.variant(provenance=None))
    assert not_passing(checks) == {"image.provenance": "fail"}
    assert "base_image, cuda, driver and vllm_commit" in by_name(checks)["image.provenance"].reason
    # A tuple registered before provenance was recorded keeps its hash.
    bare = seeded.release.model_copy(update={"provenance": None})
    assert "provenance" not in bare.tuple_dict() and bare.tuple_hash() != seeded.release.tuple_hash()


def test_image_outside_ecr_is_neither_looked_up_nor_scanned(seeded: Seeded) -> None:
    hub = seeded.variant(image="docker.io/vllm/vllm-openai@sha256:" + "cd" * 32)
    checks = seeded.verify(hub)
    assert not_passing(checks) == {"image.exists": "warn", "image.scan": "fail"}
    assert "kimi-ops reads no scan of this image" in by_name(checks)["image.scan"].reason


def test_image_without_a_completed_scan_fails_unless_an_exception_allows_it(seeded: Seeded) -> None:
    unscanned = seeded.release.image.split("@sha256:")[0] + "@sha256:" + "ef" * 32
    seed_image(seeded.ecr, unscanned, "unscanned", scan=False)
    release = seeded.variant(image=unscanned)
    checks = seeded.verify(release)
    assert not_passing(checks) == {"image.scan": "fail"}
    assert "no scan exists for this digest" in by_name(checks)["image.scan"].reason
    exception = SecurityException(
        id="SEC-EXC-IMG-1", kind="unscanned-image", scope="release", target=release.name, reviewer="U0APPROVER1",
        reason="scanner outage; image rebuilt from reviewed inputs", expires_at=NOW + dt.timedelta(days=7), recorded_at=NOW)
    allowed = seeded.verify(release, exceptions=(*seeded.policy().exceptions, exception))
    assert not_passing(allowed) == {}
    assert "allowed by security exception SEC-EXC-IMG-1" in by_name(allowed)["image.scan"].reason
    expired = seeded.verify(release, exceptions=(*seeded.policy().exceptions, exception), now=NOW + dt.timedelta(days=8))
    assert not_passing(expired) == {"image.scan": "fail"} and "expired" in by_name(expired)["image.scan"].reason


def test_short_model_commit_fails(seeded: Seeded) -> None:
    model = seeded.release.model.model_construct(repo="moonshotai/Kimi-K3", commit="3f7c2a9")
    assert not_passing(seeded.verify(seeded.variant(model=model))) == {"model.commit": "fail"}


@pytest.mark.parametrize("size", ["3", "0", "eight", "4", "16"])
def test_tensor_parallel_size_must_be_the_nodes_eight_gpus(seeded: Seeded, size: str) -> None:
    args = list(seeded.release.serving.args)
    args[args.index("--tensor-parallel-size") + 1] = size
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.tensor_parallel": "fail"}


def test_missing_tensor_parallel_size_fails(seeded: Seeded) -> None:
    args = list(seeded.release.serving.args)
    i = args.index("--tensor-parallel-size")
    del args[i : i + 2]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.tensor_parallel": "fail"}
    assert "add --tensor-parallel-size 8" in by_name(checks)["serving.tensor_parallel"].reason


@pytest.mark.parametrize(
    ("head", "fix"),
    [(["--model", "/opt/ml/model"], "positional"), ([], "first serving arg")],
)
def test_model_path_must_be_the_positional_argument(seeded: Seeded, head: list[str], fix: str) -> None:
    args = [*head, *seeded.release.serving.args[1:]]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.model": "fail"}
    assert fix in by_name(checks)["serving.model"].reason


@pytest.mark.parametrize(
    ("value", "ceiling", "status"),
    [(None, 262_144, "fail"), ("300000", 262_144, "fail"), ("1m", 262_144, "fail"), ("128k", 262_144, "pass"),
     ("262144", 262_144, "pass"), ("262144", 131_072, "fail"), ("262144", None, "fail"), ("lots", 262_144, "fail")],
)
def test_max_model_len_is_required_within_the_endpoints_ceiling(
    seeded: Seeded, value: str | None, ceiling: int | None, status: str,
) -> None:
    args = list(seeded.release.serving.args)
    i = args.index("--max-model-len")
    del args[i : i + 2]
    if value is not None:
        args += ["--max-model-len", value]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)), max_model_len=ceiling)
    assert not_passing(checks) == ({} if status == "pass" else {"serving.max_model_len": "fail"})


def test_missing_served_model_name_fails(seeded: Seeded) -> None:
    args = list(seeded.release.serving.args)
    i = args.index("--served-model-name")
    del args[i : i + 2]
    checks = seeded.verify(seeded.variant(serving=seeded.serving(args=args)))
    assert not_passing(checks) == {"serving.served_model_name": "fail"}


def test_trust_remote_code_without_security_exception_fails(seeded: Seeded) -> None:
    checks = seeded.verify(seeded.variant(trust_remote_code_exception=None))
    assert not_passing(checks) == {"serving.trust_remote_code": "fail"}
    assert "trust_remote_code_exception" in by_name(checks)["serving.trust_remote_code"].reason


SECRET = "sk-live-7f3a9b2c4d5e6f708192a3b4c5d6e7f8"


@pytest.mark.parametrize(
    ("extra_args", "env", "where"),
    [
        (["--api-key", SECRET], {}, "args --api-key"),
        (["--hf-token", "hf_" + "r" * 34], {}, "args --hf-token"),
        ([f"--api-key={SECRET}"], {}, "args --api-key"),
        ([], {"HF_TOKEN": "hf_" + "q" * 34}, "env HF_TOKEN"),
        ([], {"DATABASE_PASSWORD": "hunter2-but-longer"}, "env DATABASE_PASSWORD"),
        ([], {"SOME_SETTING": SECRET}, "env SOME_SETTING"),
    ],
)
def test_secret_in_args_or_env_fails_without_echoing_it(
    seeded: Seeded, extra_args: list[str], env: dict[str, str], where: str,
) -> None:
    serving = seeded.serving(args=[*seeded.release.serving.args, *extra_args], env={**seeded.release.serving.env, **env})
    report = run_artifact_checks(seeded.verifier(), seeded.variant(serving=serving), seeded.policy())
    assert not_passing(report.checks) == {"serving.no_secrets": "fail"}
    check = by_name(report.checks)["serving.no_secrets"]
    assert where in check.reason
    dumped = json.dumps(report.model_dump(mode="json"))
    for value in [SECRET, *env.values(), *(a for a in extra_args if not a.startswith("-"))]:
        assert value not in dumped


def test_secret_references_and_lookalike_names_are_not_secrets(seeded: Seeded) -> None:
    env = {
        "HF_TOKEN": "${HF_TOKEN}", "API_KEY": "arn:aws:secretsmanager:us-east-1:123456789012:secret:vllm-key", "EMPTY_SECRET": "",
        "VLLM_MAX_TOKENS": "4096", "HF_TOKEN_PATH": "/var/run/secrets/hf/token",
    }
    args = [*seeded.release.serving.args,
            "--tokenizer", "/opt/ml/model", "--max-num-batched-tokens", "8192", "--task", "generate"]
    serving = seeded.serving(args=args, env={**seeded.release.serving.env, **env})
    checks = seeded.verify(seeded.variant(serving=serving))
    assert not_passing(checks) == {}
