"""The gated workflow from the ``kimi-ops`` console script, end to end against the sandbox's stand-ins.

Each CLI step runs the console script's ``main`` as a terminal would run ``kimi-ops ARGS``
(:func:`tests.cli_support.run_in_process`: in this process, which saves a new interpreter's
second of imports per step), with nothing but the environment ``Sandbox.environment`` gives
it: the database, moto's S3 and ECR, the kmock cluster with the HyperPod operator simulator,
the OpenAI-compatible endpoint, and the capacity stand-in over HTTP, so the command builds
its own context and runs every gate with the production adapter classes. The test only sets
the scene (an earlier release live) and looks at what a user would: the CLI's output and
exit status, the cluster, the history. Separate ``kimi-ops`` processes are tested where the
process is the point (tests/services/test_crash_recovery.py, tests/stack/test_gate_crash.py,
tests/stack/test_cancel_elsewhere.py, tests/sandbox/test_headless.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bot.adapters.cluster.rest import object_path
from bot.cli.main import app
from bot.sandbox.stack import (
    ADMIN,
    APPROVER_1,
    APPROVER_2,
    DEPLOYER,
    ENDPOINT,
    NAMESPACE,
)
from bot.services.deployments import endpoint_settings, get_deployment
from tests.cli_support import (
    CliSandbox,
    deploy_in_process,
    start_cli_sandbox,
    stop_cli_sandbox,
)
from tests.docs_support import read_examples

# Whole-stack: every stand-in, and every gate run by the CLI's commands.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture()
def cli(tmp_path: Path) -> Iterator[CliSandbox]:
    sandbox = start_cli_sandbox(tmp_path)
    sandbox.in_process = True
    try:
        yield sandbox
    finally:
        stop_cli_sandbox(sandbox)


def _headline(out: str) -> str:
    """The last ``deployment #N: …`` line the CLI printed: where the deployment stands now."""
    lines = [line for line in out.splitlines() if line.startswith("deployment #")]
    assert lines, out
    return lines[-1]


def _deployment_id(out: str) -> str:
    found = re.match(r"deployment #(\d+):", _headline(out))
    assert found, out
    return found.group(1)


def _history_row(out: str, deployment_id: str) -> str:
    row = next((line for line in out.splitlines() if re.match(rf"^\W*{deployment_id}\W", line)), None)
    assert row is not None, out
    return row


def _cluster_endpoint(cli: CliSandbox) -> dict:
    obj = cli.sandbox.stand_ins["kube"].rest().get(object_path("InferenceEndpointConfig", ENDPOINT, NAMESPACE))
    assert obj is not None
    return obj


def _route_admission(cli: CliSandbox) -> str:
    """What the endpoint's HTTPRoute in the cluster says users get (closed, internal, 10%, open)."""
    route = cli.sandbox.stand_ins["kube"].rest().get(object_path("HTTPRoute", ENDPOINT, NAMESPACE))
    assert route is not None
    return str(route["metadata"]["annotations"]["kimi-ops.io/admission"])


def test_deploy_through_four_gates_by_two_approvers_to_live_from_the_cli(cli: CliSandbox) -> None:
    release = cli.sandbox.releases[0].name

    out = cli.ok("deploy", release, "--as", ADMIN)
    dep = _deployment_id(out)
    assert _headline(out) == f"deployment #{dep}: deploy of {release} to {ENDPOINT} — artifact gate"
    assert "PASS  weights.objects" in out and f"→ approve: kimi-ops gate approve {dep} artifact" in out
    # The governance records the sandbox seeded are what let it pass; the image's provenance is shown.
    assert "PASS  licence.review" in out and "PASS  bucket.policy" in out and "PASS  image.provenance" in out

    # Separation of duties on a prod endpoint: the requester (an admin, so an approver too) may not approve.
    refused = cli.run("gate", "approve", dep, "artifact", "--as", ADMIN)
    assert refused.returncode != 0, cli.explain(refused)
    assert refused.stderr.strip().splitlines() == [
        f"error: you requested deployment #{dep}; someone else must approve its gates on {ENDPOINT}"
    ]
    # The refusal is the whole answer: the report it was about follows only when asked for (-v).
    assert "PASS" not in refused.stdout and f"kimi-ops gate show {dep}" in refused.stdout
    verbose = cli.run("gate", "approve", dep, "artifact", "--as", ADMIN, "-v")
    assert verbose.returncode == refused.returncode and "PASS  weights.objects" in verbose.stdout

    out = cli.ok("gate", "approve", dep, "artifact", "--as", APPROVER_1)
    assert _headline(out) == f"deployment #{dep}: deploy of {release} to {ENDPOINT} — infrastructure gate"
    # The command read the training plan itself (over HTTP) and the cluster's nodes.
    assert "PASS  reservation.window" in out and "PASS  cluster.gpu_nodes" in out
    assert "PASS  capture.policy" in out and "no payloads" in out
    assert "PASS  pods.boundary" in out  # the model pods' NetworkPolicy, read from the render
    assert "ListTrainingPlans" in cli.face.calls

    out = cli.ok("gate", "approve", dep, "infrastructure", "--as", APPROVER_2)
    assert _headline(out).startswith(
        f"deployment #{dep}: deploy of {release} to {ENDPOINT} — model gate (readiness completion answered")
    assert f"→ approve: kimi-ops gate approve {dep} model" in out
    # The release's own evaluation report, read from S3, beside the fresh run.
    assert "PASS  model.release_report" in out and "15/15 cases passed, 100%; this run:" in out
    assert _cluster_endpoint(cli)["metadata"]["annotations"]["kimi-ops.io/release"] == release
    assert _cluster_endpoint(cli)["spec"]["dataCapture"] == {"loadBalancer": {"enabled": True}}
    assert _route_admission(cli) == "closed"  # the candidate runs, and users are on the fallback while it is judged

    out = cli.ok("gate", "approve", dep, "model", "--as", APPROVER_1)
    assert _headline(out) == f"deployment #{dep}: deploy of {release} to {ENDPOINT} — traffic gate"
    assert f"→ approve: kimi-ops gate approve {dep} traffic" in out

    # The endpoint admits 32 concurrent requests, above what the sweep measured safe: plain approval is refused,
    # naming the proposal, and an approval with a reason is recorded as an override.
    refused = cli.run("gate", "approve", dep, "traffic", "--as", APPROVER_2)
    assert refused.returncode != 0, cli.explain(refused)
    (line,) = refused.stderr.strip().splitlines()
    assert re.search(r"would go live with 32 concurrent requests admitted, above the measured safe \d+ "
                     r"\(proposed maxConcurrentRequests \d+, maxQueueSize \d+\)", line), line
    out = cli.ok("gate", "approve", dep, "traffic", "--override-limits", "launch traffic is capped upstream", "--as", APPROVER_2)
    assert _headline(out) == (f"deployment #{dep}: deploy of {release} to {ENDPOINT} — live "
                              "(ramp complete: everyone reaches Kimi K3)")
    assert _route_admission(cli) == "open"
    with cli.ctx.uow() as uow:
        seen = uow.gates.latest(int(dep), "traffic").seen
    assert seen["limits_override"]["reason"] == "launch traffic is capped upstream"

    row = _history_row(cli.ok("history"), dep)
    assert all(word in row for word in ("deploy", release, "live", ADMIN))
    assert all(f"{gate}:{who}" in row for gate, who in
               (("artif", APPROVER_1), ("infra", APPROVER_2), ("model", APPROVER_1), ("traff", APPROVER_2)))


def test_rollback_from_the_cli_restores_the_previous_release_and_reopens_the_route(cli: CliSandbox) -> None:
    older, newer = (release.name for release in cli.sandbox.releases)
    # The scene: the older release went live, then the newer one replaced it.
    first = deploy_in_process(cli, older)
    second = deploy_in_process(cli, newer)
    assert (get_deployment(cli.ctx, first.id).state, second.state) == ("superseded", "live")

    out = cli.ok("rollback", "--as", DEPLOYER)
    rb = _deployment_id(out)
    assert _headline(out) == f"deployment #{rb}: rollback of {older} to {ENDPOINT} — artifact gate"
    assert "PASS  weights.objects" in out and "PASS  manifest.restore" in out

    out = cli.ok("gate", "approve", rb, "artifact", "--as", APPROVER_1)
    assert _headline(out) == (f"deployment #{rb}: rollback of {older} to {ENDPOINT} — live "
                              f"(reopened after rollback #{rb}: everyone reaches Kimi K3)")
    # The cluster runs the older release's exact manifest again, and the route is open after the readiness suite.
    running = _cluster_endpoint(cli)
    stored = next(o for o in yaml.safe_load_all(applied_manifest(cli, first.id)) if o["kind"] == "InferenceEndpointConfig")
    assert dict(running["metadata"]["annotations"]) == stored["metadata"]["annotations"]
    assert running["spec"] == stored["spec"]
    assert _route_admission(cli) == "open"
    # The route has its own object: the release's object carries no admission switch any more.
    assert cli.sandbox.stand_ins["kube"].rest().get(object_path("ConfigMap", f"kimi-ops-admission-{ENDPOINT}", NAMESPACE)) is None
    assert get_deployment(cli.ctx, int(rb)).manifest_hash == first.manifest_hash

    out = cli.ok("history")
    rollback_row, second_row, first_row = (_history_row(out, str(i)) for i in (rb, second.id, first.id))
    assert all(word in rollback_row for word in ("rollback", older, "live", DEPLOYER, f"artif:{APPROVER_1}"))
    assert all(word in second_row for word in ("deploy", newer, "superseded"))
    assert all(word in first_row for word in ("deploy", older, "superseded"))

    # The read-only terminal examples of the README and docs/, as written there, against this sandbox, by an operator whose
    # KIMI_CLI_USER says who they are (governance and drill listings are for people with a role).
    examples = read_examples()
    assert ["history", ENDPOINT] in examples and ["release", "show", older] in examples
    assert ["drills", ENDPOINT, "-o", "json"] in examples and ["exception", "list", "--all"] in examples
    operator = {**cli.env, "KIMI_CLI_USER": DEPLOYER}
    for words in examples:  # in this process, as an operator's terminal would build it: they only read
        result = runner.invoke(app, list(words), env=operator)
        assert result.exit_code == 0, (words, result.output)


def applied_manifest(cli: CliSandbox, deployment_id: int) -> str:
    """The manifest stored (and applied) for a deployment: what a rollback to it must restore."""
    with cli.ctx.uow() as uow:
        text = uow.deployments.get(deployment_id).applied_manifest
    assert text
    return text


# ---------------------------------------------------------------------------- gate report / accept-limits

runner = CliRunner()


def _invoke(cli: CliSandbox, *args: str):
    """The CLI in this process (its own context from the environment, as a subprocess would build it)."""
    return runner.invoke(app, list(args), env=cli.env)


def test_gate_report_prints_stored_reports_and_accept_limits_takes_the_proposal(cli: CliSandbox) -> None:
    release = cli.sandbox.releases[0].name
    dep = deploy_in_process(cli, release, until="traffic_gate")

    traffic = _invoke(cli, "gate", "report", str(dep.id), "traffic")
    assert traffic.exit_code == 0, traffic.output
    assert f"deployment #{dep.id} (deploy of {release}), traffic gate: waiting for a decision" in traffic.output
    assert "traffic gate:" in traffic.output and "requests in" in traffic.output  # the sweep's headline
    assert re.search(r"prefix\s+conc\s+reqs", traffic.output), traffic.output  # the sweep table
    proposed = re.search(r"proposed: maxConcurrentRequests (\d+), maxQueueSize (\d+)", traffic.output)
    assert proposed, traffic.output

    model = _invoke(cli, "gate", "report", str(dep.id), "model")
    assert model.exit_code == 0, model.output
    assert f"model gate: approved by {APPROVER_1}" in model.output
    assert f"model gate: {release} — set kimi-k3-default" in model.output
    assert re.search(r"kind\s+passed\s+this release", model.output), model.output

    artifact = _invoke(cli, "gate", "report", str(dep.id), "artifact")
    assert artifact.exit_code == 0, artifact.output
    assert "artifact gate checks: pass" in artifact.output and "PASS  weights.objects" in artifact.output

    for args, message in (
        (("gate", "report", "99", "model"), "error: no deployment #99; `kimi-ops history` lists them"),
        (("gate", "report", str(dep.id), "canary"),
         "error: no gate named canary; the gates are artifact, infrastructure, model, traffic"),
    ):
        result = _invoke(cli, *args)
        assert result.exit_code != 0 and result.output.strip().splitlines() == [message], result.output

    report_hash = re.search(r"report ([0-9a-f]{12})", traffic.output)
    assert report_hash, traffic.output

    # Accepting limits is an approver's call, bound to the report read; refusals are one line and change nothing.
    for args, words in (
        (("--as", DEPLOYER), "approver role"),
        (("--report", "0" * 12, "--as", APPROVER_2), f"now {report_hash[1]}, not {'0' * 12}"),
    ):
        refused = _invoke(cli, "gate", "accept-limits", str(dep.id), *args)
        assert refused.exit_code != 0 and len(refused.output.strip().splitlines()) == 1, refused.output
        assert words in refused.output
    assert endpoint_settings(cli.ctx, ENDPOINT).effective_request_limits.max_concurrent_requests == 32

    # As an operator's terminal runs it: accepting applies the limits to the running release on the cluster.
    accepted = cli.ok("gate", "accept-limits", str(dep.id), "--report", report_hash[1], "--as", APPROVER_2)
    assert (f"{ENDPOINT}: request limits set to {proposed[1]} concurrent, queue {proposed[2]} (were 32, queue 64), "
            f"accepted by {APPROVER_2} from report {report_hash[1]}") in accepted
    assert f"applied to deployment #{dep.id}'s running release: manifest revision 2" in accepted
    assert _cluster_endpoint(cli)["spec"]["worker"]["requestLimits"]["maxConcurrentRequests"] == int(proposed[1])
    # What the next render uses: the accepted limits, not the YAML file's.
    limits = endpoint_settings(cli.ctx, ENDPOINT).effective_request_limits
    assert (limits.max_concurrent_requests, limits.max_queue_size) == (int(proposed[1]), int(proposed[2]))
