"""Running the real ``kimi-ops`` console script against the sandbox's stand-ins, for whole-workflow tests.

:class:`CliSandbox` starts :class:`bot.sandbox.stack.Sandbox` (moto, the kmock
cluster with the operator simulator, the capacity stand-in, the OpenAI-compatible
server) and runs ``kimi-ops`` as separate processes aimed at it through
``Sandbox.environment``: same database, same S3/ECR, same cluster, same endpoint.

Reserved capacity reaches the subprocess through the sandbox's SageMaker face
(:mod:`bot.sandbox.capacity_http`), so the infrastructure gate runs there exactly
as in production.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.sandbox.capacity_http import SageMakerFace
from bot.sandbox.stack import ADMIN, APPROVER_1, APPROVER_2, DEPLOYER, SANDBOX_RAMP, SERVER_SPEED, Sandbox
from tests.world_support import wait_until

# Ten times the sandbox node's prefill speed, for the exposure tests' worlds (tests/exposure_support.py and the
# cancel-mid-step world): none of them reads what long context costs. The CLI sandbox keeps the node's own speed.
QUICK_PREFILL = {"prefill_per_token": SERVER_SPEED["prefill_per_token"] / 10}

KIMI_OPS = Path(sys.executable).with_name("kimi-ops")
# No Slack workspace here to read user groups from, so the second approver is listed by user ID.
CLI_ROLES = {"viewer": [], "deployer": [DEPLOYER], "approver": [APPROVER_1, APPROVER_2], "admin": [ADMIN]}
# A sweep that still finds the stand-in's knee (six running, two waiting) in a couple of seconds.
QUICK_SWEEP = {
    "ceiling": 16, "warmup_requests": 0, "steady_requests_per_slot": 1, "steady_seconds": 3, "burst_rounds": 0,
    "refine_steps": 0, "max_requests": 200, "max_seconds": 10, "request_timeout_seconds": 5, "max_tokens": 4,
    "prompt_words": 8, "prefix_modes": ["unique"],
}
# How often a test world's traffic gate reads /metrics while it sweeps: every knee those worlds find is the model
# stand-in's 429s (two waiting at most, far below the queue objective; the KV cache never near full), and no test there
# reads a sweep's peaks. At the adapter's 20 reads a second, the reads cost a fifth of a quick sweep's CPU.
QUICK_SWEEP_METRICS_SECONDS = 0.25
# The sandbox's ramp with one look per step: no CLI test reads what a soak sees (a test that does passes its own).
QUICK_RAMP = {**SANDBOX_RAMP, "soak_seconds": 0.3, "sample_seconds": 0.3}


@dataclass
class CliSandbox:
    """The sandbox, its SageMaker face, and a way to run ``kimi-ops`` against them."""

    sandbox: Sandbox
    face: SageMakerFace
    env: dict[str, str]
    cwd: Path
    runs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    # Run commands through :func:`run_in_process` (the console script's ``main`` in this process, the same
    # environment) instead of a new interpreter each; :meth:`popen` always starts a process.
    in_process: bool = False

    @property
    def ctx(self) -> Any:
        return self.sandbox.ctx

    def command(self, *args: str) -> list[str]:
        return [str(KIMI_OPS), *args]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``kimi-ops ARGS`` to completion (output captured, never a shell; in this process if ``in_process``)."""
        if self.in_process:
            result = run_in_process(list(args), self.env, self.cwd)
        else:
            result = subprocess.run(self.command(*args), capture_output=True, text=True, env=self.env, cwd=self.cwd,
                                    timeout=timeout)
        self.runs.append(result)
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start ``kimi-ops ARGS`` without waiting (the caller ends it)."""
        return subprocess.Popen(self.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env, cwd=self.cwd)

    def ok(self, *args: str) -> str:
        """Run and require success; the stdout, or a failure showing what the operator saw and the CLI's log."""
        result = self.run(*args)
        assert result.returncode == 0, self.explain(result)
        return result.stdout

    def explain(self, result: subprocess.CompletedProcess[str]) -> str:
        log = self.sandbox.data_dir / "kimi-ops.log"
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no kimi-ops.log)"
        return (f"$ {' '.join(map(str, result.args))}\nexit {result.returncode}\n"
                f"{result.stdout}\n{result.stderr}\n--- log ---\n{tail}")


def start_cli_sandbox(tmp_path: Path, database_url: str | None = None, *, endpoint: dict[str, Any] | None = None,
                      **overrides: Any) -> CliSandbox:
    """Start everything (``endpoint``: changes to the endpoint's settings); call :func:`stop_cli_sandbox` after."""
    settings: dict[str, Any] = {"roles": CLI_ROLES, "traffic_sweep": QUICK_SWEEP, **overrides}
    if database_url is not None:
        settings["database_url"] = database_url
    sandbox = Sandbox(tmp_path / "sandbox", settings_overrides=settings,
                      endpoint_overrides={"ramp": QUICK_RAMP, **(endpoint or {})}).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "AWS_", "SLACK_"))}
    env.update(sandbox.environment(tmp_path / "kubeconfig"))
    env.update({
        "KIMI_LOG_LEVEL": "INFO",
        "COLUMNS": "240",  # tables in one line each, whatever the terminal running the tests
        "NO_COLOR": "1",
    })
    return CliSandbox(sandbox=sandbox, face=sandbox.stand_ins["sagemaker"], env=env, cwd=tmp_path)


def stop_cli_sandbox(cli: CliSandbox) -> None:
    cli.sandbox.stop()


def approve_in_process(cli: CliSandbox, deployment_id: int, approvers: tuple[str, ...] = (APPROVER_1, APPROVER_2),
                       until: str = "live") -> Any:
    """Decide a deployment's gates in this process (test setup), alternating ``approvers``, until ``until``."""
    from bot.services.access import Identity
    from bot.services.deployments import decide_gate, get_deployment
    from bot.services.engine import Engine

    engine = Engine(cli.ctx, readiness_pause=0.2)
    view = engine.advance(deployment_id)
    turn = 0
    while not _reached(view, until):
        if view.pending is None:
            # A CLI process that drove it before may still hold the endpoint's lease (its release can fail on a
            # loaded machine, and then the lease lapses instead): the engine then returns the view undriven.
            view = wait_until("lapse of the lease another CLI process held", lambda: _driven(engine, deployment_id, until),
                              timeout=30, poll=0.2)
            if _reached(view, until):
                break
        assert view.pending is not None and view.pending.approvable, view
        if view.pending.gate == "traffic":
            accept_if_above(cli, view)
        decide_gate(cli.ctx, deployment_id, view.pending.gate, "approved", Identity(approvers[turn % len(approvers)]),
                    seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
        turn += 1
        view = engine.advance(deployment_id)
    return get_deployment(cli.ctx, deployment_id)


def _reached(view: Any, until: str) -> bool:
    """At ``until``; at a gate, once its report waits for a decision (a replica may still be running its checks)."""
    return bool(view.state == until and (view.pending is not None or not until.endswith("_gate")))


def _driven(engine: Any, deployment_id: int, until: str) -> Any:
    """The deployment's view once this process could drive it (a gate waits, or it reached ``until``), else None."""
    view = engine.advance(deployment_id)
    return view if view.pending is not None or _reached(view, until) else None


def accept_if_above(cli: CliSandbox, view: Any) -> None:
    """At a traffic gate, accept its proposal (as an approver who did not request it) when the endpoint admits more.

    Approval above the measured safe concurrency is refused without an override, so a scene set up
    by the test follows the procedure: accept, then approve.
    """
    from bot.domain.limits import limits_above, proposed_limits
    from bot.services.access import Identity
    from bot.services.deployments import endpoint_settings
    from bot.services.traffic_gate import accept_proposed_limits

    effective = endpoint_settings(cli.ctx, view.endpoint).effective_request_limits.model_dump(mode="json")
    if limits_above(proposed_limits(view.pending.report), effective) is not None:
        who = APPROVER_2 if view.requested_by != APPROVER_2 else APPROVER_1
        accept_proposed_limits(cli.ctx, None, view.id, Identity(who), seen_report_hash=view.pending.report_hash)


def deploy_in_process(cli: CliSandbox, release: str, until: str = "live") -> Any:
    """Request a deployment of ``release`` as the deployer and approve it in this process up to ``until``."""
    from bot.services.access import Identity
    from bot.services.deployments import request_deploy

    view = request_deploy(cli.ctx, release, None, Identity(DEPLOYER))
    return approve_in_process(cli, view.id, until=until)


def run_in_process(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the console script's ``main`` in this process, as a terminal would run ``kimi-ops ARGV``.

    For tests of what a command says (its words, exit code, that no traceback shows): a new interpreter for each
    costs a second or more of imports, which the suite paid hundreds of times. ``env`` is set for the call only
    (the machine's ``KIMI_``/``SLACK_``/``AWS_`` settings are already cleared for every test); the root logger's
    handlers, which the CLI replaces with its own, are put back after. An exception escaping ``main`` is what a
    process would print as a traceback, and is returned so: exit 1 and the traceback on stderr.
    """
    import logging
    import traceback

    from typer.testing import CliRunner

    from bot.cli.common import close_contexts
    from bot.cli.main import main

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    before = os.getcwd()
    code = 0
    with CliRunner().isolation(env=env) as (out, err, _):
        os.chdir(cwd)
        try:
            main(argv)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except BaseException:
            sys.stderr.write(traceback.format_exc())
            code = 1
        finally:
            close_contexts()  # the endpoint client's kept-alive sockets, the database pool: a process's exit would end them
            os.chdir(before)
            for handler in root.handlers:
                if handler not in handlers:
                    handler.close()
            root.handlers[:], root.level = handlers, level
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")
    return subprocess.CompletedProcess(["kimi-ops", *argv], code, stdout, stderr)
