"""Hostile and careless inputs in release manifests and the files handed to the CLI (serving files included).

Each table row is one input a red-team pass or a careless operator produced, with what must happen: refused
with a line naming where the problem is (and never echoing a secret), or accepted. Add a row to cover a new
case; the test functions below stay as they are. Settings and the CLI's own arguments: ``test_hostile_settings.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.adapters.cluster import render_manifest
from bot.config import EndpointSettings
from bot.domain.release import ReleaseManifest
from bot.domain.secrets import aws_secret_name
from bot.services.context import Context
from bot.services.errors import ValidationFailed
from bot.services.release_build import BuildRequest, build_manifest, load_yaml_file, read_serving_file
from bot.services.releases import get_release, list_releases, parse_manifest, register_release
from tests.hostile_support import BASE, SK, edited, env

AKIA = "AKIAIOSFODNN7EXAMPLE"
XOXB = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GHP = "ghp_" + "a1B2c3D4e5" * 4
ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:kimi/openai-AbCdEf"


def args(*extra: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["serving"]["args"].extend(extra)


def objects(*items: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["weights"].__setitem__("objects", [*d["weights"]["objects"], *items])


def obj(key: str, size: int = 1) -> dict[str, Any]:
    return {"key": key, "size": size, "sha256": "0" * 64}


@dataclass(frozen=True)
class Refused:
    """The manifest is refused; one problem starts with ``where`` and mentions ``says``; ``secret`` is never shown."""

    where: str
    says: str = ""
    secret: str | None = None


REFUSED: list[tuple[str, dict[str, Any], Refused]] = [
    # Secrets: literal values, named by the variable or argument, never echoed.
    ("openai key in env", edited(e=env(OPENAI_API_KEY=SK)), Refused("serving.env.OPENAI_API_KEY", "literal secret", SK)),
    ("aws key id shape under a harmless name", edited(e=env(SOME_SETTING=AKIA)),
     Refused("serving.env.SOME_SETTING", "", AKIA)),
    ("slack bot token shape", edited(e=env(NOTIFY=XOXB)), Refused("serving.env.NOTIFY", "", XOXB)),
    ("github token shape", edited(e=env(GIT_CLONE=GHP)), Refused("serving.env.GIT_CLONE", "", GHP)),
    ("password by name", edited(e=env(DB_PASSWORD="hunter2-but-longer")), Refused("serving.env.DB_PASSWORD", "", "hunter2")),
    ("secret in the middle of a name", edited(e=env(CLIENT_SECRET_VALUE="abc123")),
     Refused("serving.env.CLIENT_SECRET_VALUE")),
    ("--api-key with a literal", edited(a=args("--api-key", SK)), Refused("serving.args --api-key", "$(VAR)", SK)),
    ("--api-key=literal", edited(a=args(f"--api-key={SK}")), Refused("serving.args --api-key", "", SK)),
    ("credential shape as a bare arg", edited(a=args("--hf-overrides", GHP)), Refused("serving.args[", "credential", GHP)),
    ("an ARN as plain text", edited(e=env(HF_TOKEN=ARN)), Refused("serving.env.HF_TOKEN", "{aws_secret: ARN}")),
    ("$(VAR) naming nothing", edited(a=args("--api-key", "$(VLLM_API_KEY)")), Refused("serving.args[", "$(VLLM_API_KEY)")),
    ("reference without key", edited(e=env(HF_TOKEN={"secret": "hf"})), Refused("serving.env: HF_TOKEN", "needs `key`")),
    ("reference to two places", edited(e=env(HF_TOKEN={"secret": "hf", "key": "t", "aws_secret": ARN})),
     Refused("serving.env: HF_TOKEN", "either")),
    ("aws_secret that is no ARN", edited(e=env(HF_TOKEN={"aws_secret": "kimi/openai"})),
     Refused("serving.env: HF_TOKEN", "ARN")),
    ("secret name that Kubernetes refuses", edited(e=env(HF_TOKEN={"secret": "Bad_Name", "key": "t"})),
     Refused("serving.env: HF_TOKEN: secret: String should match pattern")),
    ("a list as a value", edited(e=env(HF_TOKEN=["a"])), Refused("serving.env: HF_TOKEN", "secret reference")),
    # Object keys: relative paths inside the prefix.
    ("key climbing out of the prefix", edited(o=objects(obj("../../../etc/passwd"))),
     Refused("weights.objects.", "inside the weights prefix")),
    ("absolute key", edited(o=objects(obj("/etc/shadow"))), Refused("weights.objects.", "not start with '/'")),
    ("dot part", edited(o=objects(obj("a/./b"))), Refused("weights.objects.", "'..' parts")),
    ("backslash key", edited(o=objects(obj("..\\..\\windows"))), Refused("weights.objects.", "backslash")),
    ("NUL in key", edited(o=objects(obj("a\x00b"))), Refused("weights.objects.", "control character")),
    ("newline in key", edited(o=objects(obj("a\nb"))), Refused("weights.objects.", "control character")),
    ("folder key", edited(o=objects(obj("shards/"))), Refused("weights.objects.", "empty part")),
    ("key longer than S3 allows", edited(o=objects(obj("k" * 1025))), Refused("weights.objects.", "1024 bytes")),
    # Sizes and counts.
    ("size 10**40", edited(o=objects(obj("huge.bin", 10**40))), Refused("weights.objects.", "2 TiB")),
    ("negative size", edited(o=objects(obj("neg.bin", -1))), Refused("weights.objects.", "greater than or equal to 0")),
    ("100,001 objects", edited(o=lambda d: d["weights"].__setitem__("objects", [obj(f"o{i}") for i in range(100_001)])),
     Refused("weights.objects", "at most 100,000")),
    ("20,000 serving args", edited(a=args(*["--x"] * 20_000)), Refused("serving.args", "at most 512")),
    ("one 5 KiB arg", edited(a=args("x" * 5000)), Refused("serving.args", "at most 4,096")),
    ("NUL in an arg", edited(a=args("a\x00b")), Refused("serving.args", "NUL")),
    ("300 env vars", edited(e=env(**{f"V{i}": "1" for i in range(300)})), Refused("serving.env", "at most 256")),
    ("env name with '='", edited(e=env(**{"A=B": "1"})), Refused("serving.env", "not an environment variable name")),
    ("env value of 5 KiB", edited(e=env(BIG="x" * 5000)), Refused("serving.env", "4,096 bytes")),
]

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("kubernetes secret reference", edited(e=env(HF_TOKEN={"secret": "kimi-k3-hf", "key": "token"}))),
    ("secrets manager reference", edited(e=env(OPENAI_API_KEY={"aws_secret": ARN}))),
    ("secrets manager JSON key", edited(e=env(OPENAI_API_KEY={"aws_secret": ARN, "key": "api_key"}))),
    ("--api-key through $(VAR)", edited(e=env(VLLM_API_KEY={"secret": "vllm", "key": "api-key"}),
                                           a=args("--api-key", "$(VLLM_API_KEY)"))),
    ("lookalike names", edited(e=env(VLLM_MAX_TOKENS="4096", HF_TOKEN_PATH="/var/run/secrets/hf/token", EMPTY_SECRET=""),
                                  a=args("--tokenizer", "/opt/ml/model", "--max-num-batched-tokens", "8192"))),
    ("nested keys and 512 args", edited(o=objects(obj("shards/part-1.safetensors", 2 * 1024**4)),
                                           a=lambda d: d["serving"]["args"].extend(["--x"] * (512 - len(d["serving"]["args"]))))),
]


@pytest.mark.parametrize(("data", "expected"), [pytest.param(d, e, id=i) for i, d, e in REFUSED])
def test_hostile_manifest_is_refused_naming_where(data: dict[str, Any], expected: Refused) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_manifest(data)
    problems = caught.value.problems
    assert len(problems) <= 21, problems[:3]  # a screenful at most, whatever the input
    matching = [p for p in problems if p.startswith(expected.where) and expected.says in p]
    assert matching, problems
    if expected.secret is not None:
        assert expected.secret not in json.dumps(problems)
        assert expected.secret[:8] not in json.dumps(problems)


@pytest.mark.parametrize("data", [pytest.param(d, id=i) for i, d in ACCEPTED])
def test_careful_manifest_is_accepted(data: dict[str, Any]) -> None:
    assert parse_manifest(data).name == BASE["name"]


def test_a_refused_secret_stores_nothing_and_audits_nothing(ctx: Context) -> None:
    with pytest.raises(ValidationFailed):
        register_release(ctx, edited(e=env(OPENAI_API_KEY=SK)), "U0DEPLOYER")
    assert list_releases(ctx) == []
    with ctx.uow() as uow:
        assert list(uow.audit.list(limit=10)) == []


def test_secret_references_are_stored_and_read_back_as_references(ctx: Context) -> None:
    data = edited(e=env(HF_TOKEN={"secret": "kimi-k3-hf", "key": "token"}, OPENAI_API_KEY={"aws_secret": ARN}))
    registered = register_release(ctx, data, "U0DEPLOYER")
    stored = get_release(ctx, BASE["name"])
    assert stored.manifest == registered.release.manifest
    assert stored.tuple_hash == registered.release.tuple_hash == parse_manifest(data).tuple_hash()
    assert stored.manifest.serving.secret_env()["HF_TOKEN"].kube_secret() == ("kimi-k3-hf", "token")


def _endpoint(kind: str) -> EndpointSettings:
    return EndpointSettings(name="kimi-prod", kind=kind, namespace="model-serving", region="us-east-1",
                            availability_zone="us-east-1a")


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_references_render_as_value_from_on_both_paths(kind: str) -> None:
    release = parse_manifest(edited(
        e=env(HF_TOKEN={"secret": "kimi-k3-hf", "key": "token"}, OPENAI_API_KEY={"aws_secret": ARN, "key": "api_key"}),
        a=args("--api-key", "$(OPENAI_API_KEY)"),
    ))
    manifest = render_manifest(release, _endpoint(kind), release.tuple_hash())  # validated against the CRD / Kubernetes
    workload = next(o for o in manifest.objects if o["kind"] in ("InferenceEndpointConfig", "Deployment"))
    if kind == "hyperpod":
        variables = workload["spec"]["worker"]["environmentVariables"]
    else:
        variables = workload["spec"]["template"]["spec"]["containers"][0]["env"]
    by_name = {v["name"]: v for v in variables}
    assert by_name["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "kimi-k3-hf", "key": "token"}}}
    synced = aws_secret_name(ARN)
    assert by_name["OPENAI_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": synced, "key": "api_key"}}
    # The secret sync learns which ARN feeds which Secret from the workload's annotation.
    assert json.loads(workload["metadata"]["annotations"]["kimi-ops.io/aws-secrets"]) == {synced: ARN}
    # References come first, so $(VAR) in plain values could read them.
    assert [("valueFrom" in v) for v in variables] == sorted([("valueFrom" in v) for v in variables], reverse=True)


FILES: list[tuple[str, bytes | None, str]] = [
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is a binary file"),
    ("latin-1", "name: caf\u00e9\n".encode("latin-1"), "is not UTF-8 text"),
    ("not yaml", b"name: [unclosed\n", "not valid YAML at line"),
    ("bomb", (b"a: &a [x,x,x,x,x,x,x,x,x]\n" + b"".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n".encode() for i in range(8))), "YAML bomb"),
    ("deep", b"[" * 5000, "nests deeper"),
    ("directory", None, "is a directory"),
]


@pytest.mark.parametrize(("content", "says"), [pytest.param(c, s, id=i) for i, c, s in FILES])
def test_unreadable_manifest_file_is_one_problem_line(tmp_path: Path, content: bytes | None, says: str) -> None:
    path = tmp_path / "release.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    for reader in (load_yaml_file, read_serving_file):
        with pytest.raises(ValidationFailed) as caught:
            reader(path)
        assert len(caught.value.problems) == 1 and says in caught.value.problems[0], caught.value.problems
        assert str(path) in caught.value.problems[0]


def test_release_build_refuses_a_literal_secret_before_reading_anything(tmp_path: Path) -> None:
    serving = tmp_path / "serving.yaml"
    serving.write_text(yaml.safe_dump({"args": list(BASE["serving"]["args"]), "env": {"HF_TOKEN": "hf_" + "q" * 34}}))
    serving_args, serving_env = read_serving_file(serving)
    request = BuildRequest(weights=BASE["weights"]["prefix"], image=BASE["image"], model_repo="moonshotai/Kimi-K3",
                           model_commit=BASE["model"]["commit"], licence_version="v1", licence="s3://acme-model-weights/l.pdf",
                           serving_args=serving_args, serving_env=serving_env,
                           trust_remote_code_exception="SEC-EXC-2026-0142")

    class NoStore:
        def list_prefix(self, bucket: str, prefix: str) -> Any:
            raise AssertionError("nothing is read from S3 for a manifest that cannot be stored")

        def sha256(self, *a: Any, **k: Any) -> Any:
            raise AssertionError("nothing is read from S3 for a manifest that cannot be stored")

    with pytest.raises(ValidationFailed) as caught:
        build_manifest(request, store=NoStore())
    assert caught.value.problems[0].startswith("serving.env.HF_TOKEN: holds a literal secret")
    assert "qqqq" not in caught.value.problems[0]


def test_release_build_keeps_references_from_the_serving_file(tmp_path: Path) -> None:
    serving = tmp_path / "serving.yaml"
    serving.write_text(yaml.safe_dump({"args": ["--api-key", "$(VLLM_API_KEY)"], "env": {"VLLM_API_KEY": {"aws_secret": ARN}}}))
    _, serving_env = read_serving_file(serving)
    assert serving_env == {"VLLM_API_KEY": {"aws_secret": ARN}}
    assert ReleaseManifest.model_validate(edited(e=env(**serving_env))).serving.secret_env()["VLLM_API_KEY"].aws_secret == ARN
