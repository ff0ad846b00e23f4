"""Hostile and careless inputs at the edges that take data in: release manifests, serving files, settings.

Each table row is one input a red-team pass or a careless operator produced, with what must happen: refused
with a line naming where the problem is (and never echoing a secret), or accepted. Add a row to cover a new
case; the test functions below stay as they are.
"""

from __future__ import annotations

import copy
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
from tests.cli_support import run_in_process
from tests.conftest import EXAMPLE_RELEASE

BASE: dict[str, Any] = yaml.safe_load(EXAMPLE_RELEASE.read_text())
SK = "sk-live-7f3a9b2c4d5e6f708192a3b4c5d6e7f8"
AKIA = "AKIAIOSFODNN7EXAMPLE"
XOXB = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GHP = "ghp_" + "a1B2c3D4e5" * 4
ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:kimi/openai-AbCdEf"


def _manifest(**changes: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for change in changes.values():
        change(data)
    return data


def env(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["serving"].setdefault("env", {}).update(values)


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
    ("openai key in env", _manifest(e=env(OPENAI_API_KEY=SK)), Refused("serving.env.OPENAI_API_KEY", "literal secret", SK)),
    ("aws key id shape under a harmless name", _manifest(e=env(SOME_SETTING=AKIA)),
     Refused("serving.env.SOME_SETTING", "", AKIA)),
    ("slack bot token shape", _manifest(e=env(NOTIFY=XOXB)), Refused("serving.env.NOTIFY", "", XOXB)),
    ("github token shape", _manifest(e=env(GIT_CLONE=GHP)), Refused("serving.env.GIT_CLONE", "", GHP)),
    ("password by name", _manifest(e=env(DB_PASSWORD="hunter2-but-longer")), Refused("serving.env.DB_PASSWORD", "", "hunter2")),
    ("secret in the middle of a name", _manifest(e=env(CLIENT_SECRET_VALUE="abc123")),
     Refused("serving.env.CLIENT_SECRET_VALUE")),
    ("--api-key with a literal", _manifest(a=args("--api-key", SK)), Refused("serving.args --api-key", "$(VAR)", SK)),
    ("--api-key=literal", _manifest(a=args(f"--api-key={SK}")), Refused("serving.args --api-key", "", SK)),
    ("credential shape as a bare arg", _manifest(a=args("--hf-overrides", GHP)), Refused("serving.args[", "credential", GHP)),
    ("an ARN as plain text", _manifest(e=env(HF_TOKEN=ARN)), Refused("serving.env.HF_TOKEN", "{aws_secret: ARN}")),
    ("$(VAR) naming nothing", _manifest(a=args("--api-key", "$(VLLM_API_KEY)")), Refused("serving.args[", "$(VLLM_API_KEY)")),
    ("reference without key", _manifest(e=env(HF_TOKEN={"secret": "hf"})), Refused("serving.env: HF_TOKEN", "needs `key`")),
    ("reference to two places", _manifest(e=env(HF_TOKEN={"secret": "hf", "key": "t", "aws_secret": ARN})),
     Refused("serving.env: HF_TOKEN", "either")),
    ("aws_secret that is no ARN", _manifest(e=env(HF_TOKEN={"aws_secret": "kimi/openai"})),
     Refused("serving.env: HF_TOKEN", "ARN")),
    ("secret name that Kubernetes refuses", _manifest(e=env(HF_TOKEN={"secret": "Bad_Name", "key": "t"})),
     Refused("serving.env: HF_TOKEN: secret: String should match pattern")),
    ("a list as a value", _manifest(e=env(HF_TOKEN=["a"])), Refused("serving.env: HF_TOKEN", "secret reference")),
    # Object keys: relative paths inside the prefix.
    ("key climbing out of the prefix", _manifest(o=objects(obj("../../../etc/passwd"))),
     Refused("weights.objects.", "inside the weights prefix")),
    ("absolute key", _manifest(o=objects(obj("/etc/shadow"))), Refused("weights.objects.", "not start with '/'")),
    ("dot part", _manifest(o=objects(obj("a/./b"))), Refused("weights.objects.", "'..' parts")),
    ("backslash key", _manifest(o=objects(obj("..\\..\\windows"))), Refused("weights.objects.", "backslash")),
    ("NUL in key", _manifest(o=objects(obj("a\x00b"))), Refused("weights.objects.", "control character")),
    ("newline in key", _manifest(o=objects(obj("a\nb"))), Refused("weights.objects.", "control character")),
    ("folder key", _manifest(o=objects(obj("shards/"))), Refused("weights.objects.", "empty part")),
    ("key longer than S3 allows", _manifest(o=objects(obj("k" * 1025))), Refused("weights.objects.", "1024 bytes")),
    # Sizes and counts.
    ("size 10**40", _manifest(o=objects(obj("huge.bin", 10**40))), Refused("weights.objects.", "2 TiB")),
    ("negative size", _manifest(o=objects(obj("neg.bin", -1))), Refused("weights.objects.", "greater than or equal to 0")),
    ("100,001 objects", _manifest(o=lambda d: d["weights"].__setitem__("objects", [obj(f"o{i}") for i in range(100_001)])),
     Refused("weights.objects", "at most 100,000")),
    ("20,000 serving args", _manifest(a=args(*["--x"] * 20_000)), Refused("serving.args", "at most 512")),
    ("one 5 KiB arg", _manifest(a=args("x" * 5000)), Refused("serving.args", "at most 4,096")),
    ("NUL in an arg", _manifest(a=args("a\x00b")), Refused("serving.args", "NUL")),
    ("300 env vars", _manifest(e=env(**{f"V{i}": "1" for i in range(300)})), Refused("serving.env", "at most 256")),
    ("env name with '='", _manifest(e=env(**{"A=B": "1"})), Refused("serving.env", "not an environment variable name")),
    ("env value of 5 KiB", _manifest(e=env(BIG="x" * 5000)), Refused("serving.env", "4,096 bytes")),
]

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("kubernetes secret reference", _manifest(e=env(HF_TOKEN={"secret": "kimi-k3-hf", "key": "token"}))),
    ("secrets manager reference", _manifest(e=env(OPENAI_API_KEY={"aws_secret": ARN}))),
    ("secrets manager JSON key", _manifest(e=env(OPENAI_API_KEY={"aws_secret": ARN, "key": "api_key"}))),
    ("--api-key through $(VAR)", _manifest(e=env(VLLM_API_KEY={"secret": "vllm", "key": "api-key"}),
                                           a=args("--api-key", "$(VLLM_API_KEY)"))),
    ("lookalike names", _manifest(e=env(VLLM_MAX_TOKENS="4096", HF_TOKEN_PATH="/var/run/secrets/hf/token", EMPTY_SECRET=""),
                                  a=args("--tokenizer", "/opt/ml/model", "--max-num-batched-tokens", "8192"))),
    ("nested keys and 512 args", _manifest(o=objects(obj("shards/part-1.safetensors", 2 * 1024**4)),
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
        register_release(ctx, _manifest(e=env(OPENAI_API_KEY=SK)), "U0DEPLOYER")
    assert list_releases(ctx) == []
    with ctx.uow() as uow:
        assert list(uow.audit.list(limit=10)) == []


def test_secret_references_are_stored_and_read_back_as_references(ctx: Context) -> None:
    data = _manifest(e=env(HF_TOKEN={"secret": "kimi-k3-hf", "key": "token"}, OPENAI_API_KEY={"aws_secret": ARN}))
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
    release = parse_manifest(_manifest(
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


# --- files handed to the CLI --------------------------------------------------------------------------------

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
    assert ReleaseManifest.model_validate(_manifest(e=env(**serving_env))).serving.secret_env()["VLLM_API_KEY"].aws_secret == ARN


# --- settings -------------------------------------------------------------------------------------------------

BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)

# (environment, files to write under tmp_path first, the one line's start, what it must also say)
STAGING = "endpoints: [{name: kimi-stg, kind: eks, environment: staging, "
BAD_SETTINGS: list[tuple[str, dict[str, str], dict[str, str], str, str]] = [
    ("regions not a region", {"KIMI_AWS_REGIONS": "notjson"}, {}, "KIMI_AWS_REGIONS: 'notjson' is not an AWS region", "e.g."),
    ("regions broken JSON", {"KIMI_AWS_REGIONS": '["us-east-1"'}, {}, "KIMI_AWS_REGIONS: not valid JSON", "us-east-1,us-west-2"),
    ("regions empty", {"KIMI_AWS_REGIONS": "[]"}, {}, "KIMI_AWS_REGIONS: ", "at least 1"),
    ("roles broken JSON", {"KIMI_ROLES": "{bad"}, {}, "KIMI_ROLES: not valid JSON", "e.g. KIMI_ROLES="),
    ("roles unknown role", {"KIMI_ROLES": '{"overlord": ["U1"]}'}, {}, "KIMI_CONFIG roles.overlord", "not permitted"),
    ("thresholds not numbers", {"KIMI_ALERT_THRESHOLDS_HOURS": "abc"}, {}, "KIMI_ALERT_THRESHOLDS_HOURS (item 1): ", "number"),
    ("thresholds negative", {"KIMI_ALERT_THRESHOLDS_HOURS": "[-1]"}, {}, "KIMI_ALERT_THRESHOLDS_HOURS (item 1): ",
     "more than 0"),
    ("thresholds zero in a list", {"KIMI_ALERT_THRESHOLDS_HOURS": "24,0"}, {}, "KIMI_ALERT_THRESHOLDS_HOURS (item 2): ",
     "168,72"),
    ("probe minutes", {"KIMI_READINESS_PROBE_MINUTES": "soon"}, {}, "KIMI_READINESS_PROBE_MINUTES: ", "e.g."),
    ("evaluation set missing", {"KIMI_EVALUATION_SET": "{tmp}/absent.yaml"}, {}, "KIMI_EVALUATION_SET: ", "no such file"),
    ("evaluation set not YAML", {"KIMI_EVALUATION_SET": "{tmp}/eval.yaml"}, {"eval.yaml": "cases: [\n"}, "KIMI_EVALUATION_SET: ",
     "not valid YAML"),
    ("evaluation set wrong shape", {"KIMI_EVALUATION_SET": "{tmp}/eval.yaml"}, {"eval.yaml": "cases: 3\n"},
     "KIMI_EVALUATION_SET: ", "eval.yaml"),
    ("evaluation set bomb", {"KIMI_EVALUATION_SET": "{tmp}/eval.yaml"}, {"eval.yaml": BOMB}, "KIMI_EVALUATION_SET: ",
     "YAML bomb"),
    ("config bomb", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": BOMB}, "KIMI_CONFIG: ", "YAML bomb"),
    ("config oversized", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": "# " + "x" * (1024 * 1024) + "\n"}, "KIMI_CONFIG: ",
     "larger than 1,048,576 bytes"),
    ("config binary", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": "roles: {}\n\x00\x01"}, "KIMI_CONFIG: ", "binary"),
    ("alertmanager url not http", {"KIMI_ALERTMANAGER_URL": "alertmanager:9093"}, {}, "KIMI_ALERTMANAGER_URL: ",
     "e.g. KIMI_ALERTMANAGER_URL=http://"),
    ("webhook token too short", {"KIMI_ALERTMANAGER_WEBHOOK_TOKEN": "hunter2"}, {}, "KIMI_ALERTMANAGER_WEBHOOK_TOKEN: ",
     "e.g. KIMI_ALERTMANAGER_WEBHOOK_TOKEN="),
    ("rule labels broken JSON", {"KIMI_PROMETHEUS_RULE_LABELS": "{release"}, {}, "KIMI_PROMETHEUS_RULE_LABELS: ",
     "e.g. KIMI_PROMETHEUS_RULE_LABELS="),
    ("rule labels a list", {"KIMI_PROMETHEUS_RULE_LABELS": '["release"]'}, {}, "KIMI_PROMETHEUS_RULE_LABELS: ",
     "e.g. KIMI_PROMETHEUS_RULE_LABELS="),
    ("rule label no Kubernetes label name", {"KIMI_PROMETHEUS_RULE_LABELS": '{"my release": "kps"}'}, {},
     "KIMI_PROMETHEUS_RULE_LABELS (my release", "e.g. KIMI_PROMETHEUS_RULE_LABELS="),
    ("rule label value with a space", {"KIMI_PROMETHEUS_RULE_LABELS": '{"release": "kube prometheus"}'}, {},
     "KIMI_PROMETHEUS_RULE_LABELS (release): ", "e.g. KIMI_PROMETHEUS_RULE_LABELS="),
    ("rule label value a number", {"KIMI_PROMETHEUS_RULE_LABELS": '{"release": 5}'}, {},
     "KIMI_PROMETHEUS_RULE_LABELS (release): ", "e.g. KIMI_PROMETHEUS_RULE_LABELS="),
    ("door peer in a bad namespace", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": STAGING + "door: {kimi_ops: "
     "{namespace: Bad_NS, pod_labels: {app: kimi-ops}}}}]\n"}, "KIMI_CONFIG endpoints.0.door.kimi_ops.namespace: ", "e.g."),
    ("door scraper on port 70000", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": STAGING + "door: {metrics_scraper: "
     "{namespace: mon, pod_labels: {app: prom}, ports: [70000]}}}]\n"}, "KIMI_CONFIG endpoints.0.door.metrics_scraper.ports.0: ",
     "at most 65535"),
    ("alerting by grafana", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": STAGING + "slo: {alerting: grafana}}]\n"},
     "KIMI_CONFIG endpoints.0.slo.alerting: ", "'builtin' or 'prometheus'"),
    ("cohort from magic", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": STAGING + "route: {gateway: {name: gw}, "
     "cohort_header: {source: magic}}}]\n"}, "KIMI_CONFIG endpoints.0.route.cohort_header.source: ", "e.g."),
    ("config a list", {"KIMI_CONFIG": "{tmp}/kimi.yaml"}, {"kimi.yaml": "- 1\n"}, "KIMI_CONFIG: ", "mapping"),
]

GOOD_SETTINGS: list[tuple[str, dict[str, str], str, Any]] = [
    ("one region as people write it", {"KIMI_AWS_REGIONS": "us-east-1"}, "aws_regions", ["us-east-1"]),
    ("regions comma-separated", {"KIMI_AWS_REGIONS": "us-east-1, us-gov-west-1"}, "aws_regions", ["us-east-1", "us-gov-west-1"]),
    ("regions as JSON", {"KIMI_AWS_REGIONS": '["eu-west-1"]'}, "aws_regions", ["eu-west-1"]),
    ("thresholds comma-separated", {"KIMI_ALERT_THRESHOLDS_HOURS": "48,12,0.5"}, "alert_thresholds_hours", [48.0, 12.0, 0.5]),
    ("thresholds as JSON", {"KIMI_ALERT_THRESHOLDS_HOURS": "[24]"}, "alert_thresholds_hours", [24.0]),
]


def _settings_env(tmp_path: Path, env_values: dict[str, str], files: dict[str, str]) -> dict[str, str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8", errors="surrogateescape")
    return {k: v.replace("{tmp}", str(tmp_path)) for k, v in env_values.items()}


@pytest.mark.parametrize(("env_values", "files", "starts", "says"),
                         [pytest.param(e, f, s, w, id=i) for i, e, f, s, w in BAD_SETTINGS])
def test_bad_setting_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_values: dict[str, str],
                                           files: dict[str, str], starts: str, says: str) -> None:
    from bot.config import ConfigError, load_settings

    for name, value in _settings_env(tmp_path, env_values, files).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(starts) and says in message, message


@pytest.mark.parametrize(("env_values", "field", "expected"), [pytest.param(e, f, x, id=i) for i, e, f, x in GOOD_SETTINGS])
def test_natural_setting_forms_are_accepted(monkeypatch: pytest.MonkeyPatch, env_values: dict[str, str], field: str,
                                            expected: Any) -> None:
    from bot.config import load_settings

    for name, value in env_values.items():
        monkeypatch.setenv(name, value)
    assert getattr(load_settings(), field) == expected


def _kimi_ops(tmp_path: Path, *argv: str, **env_values: str) -> Any:
    return run_in_process(list(argv), {"KIMI_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200", "NO_COLOR": "1",
                                       **env_values}, tmp_path)


# (argv, environment, the one stderr line's start, what it must say, what it must never show)
CLI_CASES: list[tuple[str, list[str], dict[str, str], str, str, str | None]] = [
    ("regions notjson", ["release", "list"], {"KIMI_AWS_REGIONS": "notjson"}, "error: KIMI_AWS_REGIONS:", "e.g.", None),
    ("roles broken", ["release", "list"], {"KIMI_ROLES": "{bad"}, "error: KIMI_ROLES: not valid JSON", "e.g.", None),
    ("data dir under a file", ["release", "list"], {"KIMI_DATA_DIR": "{tmp}/a-file/data"}, "error: KIMI_DATA_DIR:",
     "cannot be created or written", None),
    ("database down", ["release", "list"], {"KIMI_DATABASE_URL": "postgresql+psycopg://kimi:hunter2pw@127.0.0.1:1/kimi"},
     "error: KIMI_DATABASE_URL: cannot reach the database postgresql+psycopg://kimi:***@127.0.0.1:1/kimi", "e.g.", "hunter2pw"),
    ("serve with a bad threshold", ["serve", "--no-jobs"], {"KIMI_ALERT_THRESHOLDS_HOURS": "[-1]", "SLACK_BOT_TOKEN": "xoxb-x",
     "SLACK_SIGNING_SECRET": "s"}, "error: KIMI_ALERT_THRESHOLDS_HOURS (item 1):", "more than 0", None),
    ("serve with a missing evaluation set", ["serve", "--no-jobs"], {"KIMI_EVALUATION_SET": "{tmp}/nope.yaml",
     "SLACK_BOT_TOKEN": "xoxb-x", "SLACK_SIGNING_SECRET": "s"}, "error: KIMI_EVALUATION_SET:", "no such file", None),
    ("binary manifest", ["release", "register", "{tmp}/a-file"], {"KIMI_AUTO_MIGRATE": "1"}, "error: 1 problem(s)",
     "is a binary file", None),
    ("secret in manifest", ["release", "register", "{tmp}/secret.yaml"], {"KIMI_AUTO_MIGRATE": "1"}, "error: 1 problem(s)",
     "serving.env.OPENAI_API_KEY: holds a literal secret", SK),
]


@pytest.mark.parametrize(("argv", "env_values", "starts", "says", "never"),
                         [pytest.param(a, e, s, w, n, id=i) for i, a, e, s, w, n in CLI_CASES])
def test_cli_answers_bad_input_with_exit_2_and_no_traceback(tmp_path: Path, argv: list[str], env_values: dict[str, str],
                                                             starts: str, says: str, never: str | None) -> None:
    (tmp_path / "a-file").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    (tmp_path / "secret.yaml").write_text(yaml.safe_dump(_manifest(e=env(OPENAI_API_KEY=SK))))
    result = _kimi_ops(tmp_path, *[a.replace("{tmp}", str(tmp_path)) for a in argv],
                       **{k: v.replace("{tmp}", str(tmp_path)) for k, v in env_values.items()})
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(starts), result.stderr
    assert says in result.stderr and "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    if starts != "error: 1 problem(s)":
        assert len(lines) == 1, lines
    if never is not None:
        assert never not in result.stderr + result.stdout


@pytest.mark.parametrize(("route", "where"), [
    ({"fallback": {"name": "kimi-k2", "model_name": "Kimi-K2\r\nX-Kimi-Model: Kimi-K3"}}, "route.fallback.model_name"),
    ({"fallback": {"name": "kimi-k2", "model_name": " Kimi-K2"}}, "route.fallback.model_name"),
    ({"requires_header": {"value": "kimi-k3\n"}}, "route.requires_header.value"),
    ({"requires_header": {"value": "kimi\x00k3"}}, "route.requires_header.value"),
])
def test_a_header_value_no_client_can_send_is_refused_at_start(tmp_path: Path, route: dict[str, Any], where: str) -> None:
    """A CR/LF in x-kimi-model's label splits the answer's headers; a requires-Kimi-K3 value no client can send never
    matches, so those requests would meet the fallback."""
    from bot.config import ConfigError, load_settings

    with pytest.raises(ConfigError) as caught:
        load_settings(data_dir=tmp_path, endpoints=[{"name": "kimi-stg", "kind": "eks", "environment": "staging",
                                                     "route": {"gateway": {"name": "gw"}, **route}}])
    message = str(caught.value)
    assert "\n" not in message and where in message and "cannot be a header value" in message, message
