"""``kimi-ops gate report N GATE --plot FILE``: the picture the thread shows, drawn from the stored report's numbers.

A terminal without Slack has no notifier to draw gate plots, so the CLI draws one on demand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.domain.checks import Check, GateReport
from bot.services.deployments import request_deploy
from bot.services.transitions import store_gate_report
from tests.cli_support import run_in_process
from tests.workflow_support import REQUESTER, workflow

pytestmark = pytest.mark.sqlite_only

EVALUATION = {"release": "rel-a", "summary": {"kinds": {"coding": {"passed": 2, "total": 3, "pass_rate": 2 / 3}},
                                              "latency_p50_ms": 800.0, "latency_p95_ms": 2400.0}}


def _stored(make_ctx) -> tuple[object, int]:
    ctx, _ = workflow(make_ctx)
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    with ctx.uow() as uow:
        dep = uow.deployments.get(view.id)
        store_gate_report(uow, ctx, dep, GateReport(gate="model", checks=[Check.passed("model.coding", "2/3")],
                                                    attachments={"evaluation": EVALUATION}))
        store_gate_report(uow, ctx, dep, GateReport(gate="traffic", checks=[Check.errored("traffic.sweep", "no answer")]))
        uow.commit()
    return ctx, view.id


def _run(ctx, tmp_path: Path, *argv: str):
    return run_in_process(list(argv), {"KIMI_DATABASE_URL": ctx.settings.effective_database_url,
                                       "KIMI_DATA_DIR": str(ctx.settings.data_dir), "COLUMNS": "200", "NO_COLOR": "1"},
                          tmp_path)


def test_the_model_report_plot_is_drawn_into_the_file_named(make_ctx, tmp_path: Path) -> None:
    ctx, n = _stored(make_ctx)
    target = tmp_path / "model.png"
    done = _run(ctx, tmp_path, "gate", "report", str(n), "model", "--plot", str(target))
    assert done.returncode == 0, done.stderr
    assert "coding" in done.stdout and done.stdout.rstrip().endswith(f"plot written to {target}")
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("gate", "code", "said"), [
    ("artifact", 2, "error: the artifact gate has no plot; the model and traffic gates do"),
    ("traffic", 1, "error: the traffic report of deployment #1 holds no numbers to draw"),
])
def test_a_report_without_a_plot_says_so_in_one_line_and_writes_nothing(make_ctx, tmp_path: Path, gate: str, code: int,
                                                                      said: str) -> None:
    ctx, n = _stored(make_ctx)
    target = tmp_path / "plot.png"
    done = _run(ctx, tmp_path, "gate", "report", str(n), gate, "--plot", str(target))
    assert done.returncode == code
    assert done.stderr.startswith(said) and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not target.exists()
