"""A fleet: readiness probe, reservation watch, status and App Home at 1, 50 and 500 endpoints, each beside a baseline.

Every endpoint has a live release and a HyperPod training plan; all of them are served by one local
OpenAI-compatible stand-in whose completions take about ``--completion-seconds`` (default 1 s), and the plans
by the capacity stand-in behind the real boto3 reservation adapter. Measured in this process, on SQLite and on a
fresh PostgreSQL database (``--postgres URL``, an admin URL; ``--no-postgres`` for SQLite only):

* probe: one ``probe_endpoints`` run (wall time), ``KIMI_PROBE_CONCURRENCY`` (16) at once on the shared
  client. Baseline: one endpoint at a time with a new HTTP client per probe (what the probe did before),
  measured up to 50 endpoints; at 500 it is 10× the 50-endpoint figure (marked ``~``: it would take minutes).
* reservation watch: one ``watch_reservations`` run; baseline: training plans described one at a time.
* status and App Home: the best of ``--repeat`` renders (``observe`` on, no cluster configured), with the
  SQL statements of one. Baseline: the same page read one endpoint at a time (each endpoint reading its
  probes, deployments, incidents and all reservations again: quadratic in endpoints).

Goals (issue 19): a probe of 500 endpoints with one-second completions inside one probe period (5 min);
status for 500 endpoints under 300 ms, on both databases.

    .venv/bin/python bench/fleet_scale.py [--sizes 1,50,500] [--completion-seconds 1.0] [--repeat 3] [--no-postgres]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import two_databases as databases
from sqlalchemy import Engine, event

from bot.adapters.aws import reservations as aws_reservations
from bot.adapters.aws.reservations import AwsReservationSource
from bot.adapters.endpoint import HttpEndpointClient
from bot.adapters.store import schema
from bot.adapters.store.models import Deployment, Release
from bot.bootstrap import build_context, build_root
from bot.config import load_settings
from bot.sandbox.capacity import CapacityStandIn
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.stack import SANDBOX_DOOR, SANDBOX_EGRESS
from bot.services.access import Identity
from bot.services.context import Context, Ports
from bot.services.readiness import endpoint_status, probe_endpoints
from bot.services.reservations import watch_reservations
from commands import home, status

ADMIN = Identity("U0BENCH")
REGION = "us-east-1"
PERIOD_SECONDS = 300.0
STATUS_GOAL_MS = 300.0
BASELINE_MEASURED_UP_TO = 50


def seed_live(ctx: Context, names: list[str]) -> None:
    """One release, live on every endpoint."""
    now = ctx.clock.now()
    with ctx.uow() as uow:
        release = uow.releases.add(Release(
            name="kimi-k3-bench", model_repo="moonshotai/Kimi-K3", model_commit="0" * 40, weights_prefix="s3://w/k3/",
            objects=[{"key": f"weights/{i:05d}.safetensors", "size": 5_000_000_000, "sha256": "ab" * 32} for i in range(64)],
            image="r/vllm@sha256:" + "0" * 64, serving_args=[], serving_env={}, licence_version="v1", licence_uri=None,
            licence_sha256="a" * 64, evaluation_report=None, trust_remote_code_exception=None, tuple_hash="b" * 64,
            registered_by="U1", registered_at=now))
        for name in names:
            endpoint = uow.endpoints.get(name)
            assert endpoint is not None
            live = uow.deployments.add(Deployment(endpoint_id=endpoint.id, release_id=release.id, kind="deploy",
                                                  state="live", requested_by="U1", created_at=now, updated_at=now,
                                                  finished_at=now, applied_manifest="x" * 4000))
            assert live.in_flight is None  # live: no longer holding its endpoint (the model takes it from the state)
        uow.commit()


def statements_of(engine: Engine, call: Callable[[], object]) -> int:
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return len(seen)


def best_ms(call: Callable[[], object], repeat: int) -> float:
    call()  # warm-up
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        timings.append((time.perf_counter() - started) * 1000)
    return min(timings)


def timed_s(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def sequential_probe(ctx: Context, names: list[str]) -> None:
    """The baseline probe: one endpoint after the other, a new HTTP client (and CA bundle) for each."""
    for name in names:
        spec = ctx.settings.endpoint(name)
        assert spec is not None
        client = HttpEndpointClient(timeout=60)
        try:
            client.readiness(spec)
        finally:
            client.close()


def run_size(place: AbstractContextManager[str], tmp: Path, count: int, completion_seconds: float, repeat: int,
             server: OpenAIServer) -> dict[str, Any]:
    names = [f"kimi-{n:03d}" for n in range(count)]
    capacity = CapacityStandIn(page_size=100)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    with place as url:
        schema.upgrade(url)
        endpoints = [{"name": n, "kind": "hyperpod", "url": server.url, "region": REGION, "egress": SANDBOX_EGRESS,
                      "door": SANDBOX_DOOR, "availability_zone": f"{REGION}a"} for n in names]
        client = HttpEndpointClient(timeout=60)
        ctx = build_context(load_settings(database_url=url, data_dir=tmp, roles={"admin": [ADMIN.user_id]},
                                          endpoints=endpoints, aws_regions=[REGION]),
                            ports=Ports(endpoint=client, reservations=AwsReservationSource(capacity.client_factory())))
        try:
            for spec in ctx.settings.endpoints:
                capacity.cover(spec, start, start + dt.timedelta(days=30))
            seed_live(ctx, names)
            found: dict[str, Any] = {}
            # Warm-ups: the first round builds the HTTP client, the boto3 clients and the stored reservations.
            server.configure(first_token_delay=0.0)
            probe_endpoints(ctx)
            watch_reservations(ctx)
            server.configure(first_token_delay=completion_seconds)
            found["probe"] = timed_s(lambda: probe_endpoints(ctx))
            if count <= BASELINE_MEASURED_UP_TO:
                found["probe baseline"] = timed_s(lambda: sequential_probe(ctx, names))
            server.configure(first_token_delay=0.0)
            found["watch"] = timed_s(lambda: watch_reservations(ctx))
            concurrency = aws_reservations.DESCRIBE_CONCURRENCY
            aws_reservations.DESCRIBE_CONCURRENCY = 1
            try:
                found["watch baseline"] = timed_s(lambda: watch_reservations(ctx))
            finally:
                aws_reservations.DESCRIBE_CONCURRENCY = concurrency
            root = build_root(ctx)
            pages: dict[str, Callable[[], object]] = {
                "status": lambda: status.run(root, ADMIN, None),
                "App Home": lambda: home.parts(ctx, ADMIN),
            }
            engine = ctx.uow.engine
            for page, call in pages.items():
                found[page] = (best_ms(call, repeat), statements_of(engine, call))

            def one_at_a_time() -> None:
                for name in names:
                    endpoint_status(ctx, name, history=5)

            if count <= BASELINE_MEASURED_UP_TO:
                found["page baseline"] = (best_ms(one_at_a_time, repeat), statements_of(engine, one_at_a_time))
            else:  # minutes at 500 endpoints: one pass, timed and counted at once
                started = time.perf_counter()
                statements = statements_of(engine, one_at_a_time)
                found["page baseline"] = ((time.perf_counter() - started) * 1000, statements)
            return found
        finally:
            client.close()
            ctx.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1,50,500", help="endpoint counts, comma-separated")
    parser.add_argument("--completion-seconds", type=float, default=1.0, help="how long each readiness completion takes")
    parser.add_argument("--repeat", type=int, default=3, help="renders per page measurement (the best is shown)")
    databases.add_arguments(parser)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # a fleet's worth of INFO lines is not the table
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = databases.backends(args)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    with OpenAIServer() as server, tempfile.TemporaryDirectory() as tmp_name:
        for backend in backends:
            for count in sizes:
                place = databases.database(backend, args, Path(tmp_name), f"fleet_{count}")
                results[(backend, count)] = run_size(place, Path(tmp_name), count, args.completion_seconds,
                                                     max(1, args.repeat), server)
                print(f"# {backend}: {count} endpoint(s) measured", file=sys.stderr)

    print(f"{'database':<10} {'endpoints':>9} {'probe s':>8} {'baseline s':>11} {'watch s':>8} {'baseline s':>11} "
          f"{'status ms':>10} {'stmts':>6} {'Home ms':>8} {'stmts':>6} {'baseline ms':>12} {'stmts':>6}")
    per_endpoint: float | None = None
    for backend, count in results:
        per_endpoint = None if count == sizes[0] else per_endpoint  # each database's own baseline
        r = results[(backend, count)]
        if "probe baseline" in r:
            per_endpoint = r["probe baseline"] / count
            probe_base = f"{r['probe baseline']:>11.1f}"
        else:
            probe_base = f"{'~' + format(per_endpoint * count, '.0f') if per_endpoint else '-':>11}"
        print(f"{backend:<10} {count:>9} {r['probe']:>8.1f} {probe_base} {r['watch']:>8.2f} {r['watch baseline']:>11.2f} "
              f"{r['status'][0]:>10.1f} {r['status'][1]:>6} {r['App Home'][0]:>8.1f} {r['App Home'][1]:>6} "
              f"{r['page baseline'][0]:>12.1f} {r['page baseline'][1]:>6}")
    top = max(sizes)
    print()
    for backend in backends:
        probe, page = results[(backend, top)]["probe"], results[(backend, top)]["status"][0]
        print(f"{backend}: goals at {top} endpoints: probe inside one period ({PERIOD_SECONDS:.0f} s) with "
              f"{args.completion_seconds:g} s completions: {probe:.1f} s "
              f"({'ok' if probe < PERIOD_SECONDS else 'MISSED'}); status under {STATUS_GOAL_MS:.0f} ms: "
              f"{page:.1f} ms ({'ok' if page < STATUS_GOAL_MS else 'MISSED'})")


if __name__ == "__main__":
    main()
    gc.freeze()  # the process ends: its last garbage collection would only walk what the OS frees anyway
