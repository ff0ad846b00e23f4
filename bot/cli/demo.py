"""``kimi-ops demo`` and ``kimi-ops sandbox``: the whole bot on local stand-ins, no Slack or AWS needed.

Both start :class:`bot.sandbox.stack.Sandbox` (moto, the Kubernetes emulator
with the HyperPod operator simulator, the capacity stand-in, a saturating
OpenAI-compatible endpoint, a fresh SQLite database with the two example
releases) with its traffic layer: the Gateway API gateway stand-in in front of
the endpoint and a smaller fallback model, the endpoint's ``route:`` block and a
ramp of a few seconds per step, and background users sending a few requests a
second through the gateway (some as the internal cohort). The Slack bot runs on
it through :class:`bot.cli.shell.Shell`, so every line goes through the same
signed-request dispatch path as Slack.

``sandbox`` hands the console to a person; ``sandbox --headless`` starts the
stand-ins (and a Slack Web API stub) without a console, prints one ``export
NAME=value`` line per setting that aims another ``kimi-ops`` process (``serve``,
the CLI, ``jobs``) at them, and runs until SIGINT or SIGTERM. ``demo`` plays the newcomer's tour
and prints the conversation: the reservation watch's countdown and alert, a
deploy through four gates approved by two people (with a self-approval
refused, and the traffic gate's measured admission limits accepted) while users
are closed out of the candidate and served by the fallback (counted at the
gateway), then let in as the internal cohort, in steps and at last all;
readiness probes; a burn-rate page and its recovery; a pod-deletion drill with its
recovery time; a second release compared with production; a rollback to the
complete previous release; a candidate whose model gate is rejected being
restored automatically; and the endpoint's status. It exits non-zero if any
step does not end where it should.
"""

from __future__ import annotations

import secrets
import shlex
import signal
import tempfile
import threading
from pathlib import Path

import typer

from bot.cli import output
from bot.cli.demo_tour import ScriptFailed, Tour, pair_tour, start_world, tour
from bot.cli.guard import run_guarded


def require_sandbox() -> None:
    """Stop with one line and exit 2 when the optional ``sandbox`` extra is not installed."""
    from bot.sandbox import SandboxNotInstalled, require_extra

    try:
        require_extra()
    except SandboxNotInstalled as exc:
        output.error(str(exc))
        raise typer.Exit(2) from None


def demo(
    pair: bool = typer.Option(False, "--pair", help="The blue/green scenario: a service of two endpoints, a ramp "
                              "between them and a one-click rollback."),
) -> None:
    """Deploy, approve and roll back Kimi K3 on local stand-ins, printing the Slack conversation."""

    require_sandbox()

    def body() -> None:
        with tempfile.TemporaryDirectory(prefix="kimi-ops-demo-") as tmp:
            output.info("starting the sandbox: moto (S3, ECR), Kubernetes emulator + HyperPod operator simulator, "
                        "capacity stand-in, OpenAI-compatible endpoint and fallback behind a Gateway API gateway "
                        "stand-in with background users, Slack stub, SQLite")
            sandbox, console = start_world(Path(tmp), pair=pair)
            try:
                (pair_tour if pair else tour)(Tour(console, typer.echo, sandbox.stand_ins["traffic"].gateway,
                                                   model=sandbox.stand_ins["openai"]))
            except ScriptFailed as exc:
                output.error(f"the demo stopped: {exc}")
                raise typer.Exit(1) from None
            finally:
                console.close()
                sandbox.stop()
        typer.echo("")
        output.info("That was the whole loop. Try it yourself: ./dev run kimi-ops sandbox")

    run_guarded(body)


def sandbox(
    headless: bool = typer.Option(
        False, "--headless", help="No console: print `export NAME=value` lines that aim other kimi-ops processes "
        "(serve, the CLI, jobs) at the stand-ins, then run until interrupted."),
    database_url: str | None = typer.Option(
        None, "--database-url", help="With --headless: an empty PostgreSQL database for the sandbox instead of its "
        "SQLite file, so several `kimi-ops serve` replicas can share it."),
    addresses: bool = typer.Option(
        False, "--addresses", help="Console: also print where each stand-in listens, as the `export` lines --headless "
        "prints (aim `kimi-ops release verify`, curl or boto3 at them)."),
    pair: bool = typer.Option(False, "--pair", help="The console on a service of two endpoints (kimi-blue, "
                              "kimi-green) behind one route: try /kimi deploy RELEASE to kimi, /kimi rollback kimi."),
    prometheus: bool = typer.Option(False, "--prometheus", help="Pages from a real Prometheus and Alertmanager (both "
                                    "on the PATH) scraping the model server with kimi-ops's rules (docs/alerting.md)."),
) -> None:
    """An interactive Slack console on the local stand-ins: deploy, approve and roll back yourself."""
    from bot.cli.shell import repl
    from bot.config import load_settings

    require_sandbox()
    from bot.route_config import DEFAULT_COHORT_HEADER
    from bot.sandbox.stack import APPROVER_1, APPROVER_2, DEPLOYER, ENDPOINT, NAMESPACE, SERVICE, USERS_PER_SECOND

    def body() -> None:
        data_dir = load_settings().data_dir / "sandbox"
        if headless:
            _headless(data_dir, database_url)
            return
        output.info(f"starting the sandbox in {data_dir} (a fresh database each time)")
        if prometheus:  # its own module: the demo's console, its pages from a real Prometheus and Alertmanager
            from bot.cli.sandbox_prometheus import console_with_prometheus

            console_with_prometheus(data_dir, lambda overrides: start_world(data_dir, pair=pair, overrides=overrides))
            return
        stack, console = start_world(data_dir, pair=pair)
        console.start_jobs()  # as serve runs them: the watches and probes read the stand-ins on their own
        typer.echo(f"People: {DEPLOYER} deploys; {APPROVER_1} and {APPROVER_2} approve. "
                   "Try: /kimi help · /kimi deploy kimi-k3-2026-08-01 · /as U0APPROVER1 · a button's number")
        called = SERVICE if pair else ENDPOINT
        typer.echo(f"Users reach {called} through the gateway stand-in at {stack.gateway_url}/v1/chat/completions "
                   f"(background users send {USERS_PER_SECOND:g} a second; the header "
                   f"'{DEFAULT_COHORT_HEADER}' with the token in Secret {NAMESPACE}/{called}-cohort, made anew each "
                   "time the route closes, makes a request the internal cohort's).")
        typer.echo(f"Gate plots are saved in {stack.ctx.settings.data_dir / 'reports'} "
                   "(the console shows each upload as [file NAME, SIZE]).")
        if addresses:
            typer.echo("Stand-ins (the same exports `kimi-ops sandbox --headless` prints):")
            for name, value in stack.environment(data_dir / "kubeconfig").items():
                typer.echo(f"  export {name}={shlex.quote(value)}")
        try:
            repl(console)  # closes the console
        finally:
            stack.stop()

    run_guarded(body)


SANDBOX_BOT_TOKEN = "xoxb-sandbox"  # the Slack stub accepts any token; this one names where it came from


def _headless(data_dir: Path, database_url: str | None) -> None:
    """Start the stand-ins and a Slack stub, print the exports, wait for SIGINT/SIGTERM, stop everything."""
    from bot.sandbox.slack_stub import SlackStub
    from bot.sandbox.stack import DEPLOYER, GROUPS, Sandbox

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    output.stderr.print(f"starting the sandbox in {data_dir} (a fresh database each time)", markup=False)
    stub = SlackStub(groups=GROUPS).start()
    stack = None
    try:
        overrides = {"database_url": database_url} if database_url else {}
        stack = Sandbox(data_dir, settings_overrides=overrides).start()
        exports = {
            **stack.environment(data_dir / "kubeconfig"),
            "KIMI_SLACK_API_URL": stub.api_url,
            "KIMI_CLI_USER": DEPLOYER,
            # Stand-in values for the stub, not credentials: serve needs them set to start.
            "SLACK_BOT_TOKEN": SANDBOX_BOT_TOKEN,
            "SLACK_SIGNING_SECRET": secrets.token_hex(16),
        }
        for name, value in exports.items():
            typer.echo(f"export {name}={shlex.quote(value)}")
        typer.echo("# the sandbox is running; SIGINT (Ctrl-C) or SIGTERM stops it")
        while not stop.wait(1.0):
            pass
    finally:
        if stack is not None:
            stack.stop()
        stub.stop()
        output.stderr.print("the sandbox stopped", markup=False)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
    app.command("sandbox")(sandbox)
