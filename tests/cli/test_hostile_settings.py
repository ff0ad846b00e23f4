"""Hostile and careless settings and CLI arguments: each refused at start or by the CLI with one line naming it
(exit 2, no traceback, never echoing a secret), or accepted in its natural forms.

Each table row is one input a red-team pass or a careless operator produced. Add a row to cover a new case; the
test functions below stay as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_support import run_in_process
from tests.hostile_support import SK, edited, env

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
    (tmp_path / "secret.yaml").write_text(yaml.safe_dump(edited(e=env(OPENAI_API_KEY=SK))))
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
