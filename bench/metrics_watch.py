"""The metrics watch's cost for many live endpoints, beside the bare scrapes it cannot avoid.

Every endpoint is live and points at one local OpenAI-compatible stand-in (its ``/metrics`` in vLLM's names) and
one DCGM exporter stand-in; between runs the stand-in counts a minute of busy traffic and the clock moves a minute.
The baseline, measured in the same run, is the floor any watch pays: one ``/metrics`` and one DCGM scrape per
endpoint through the same adapters, nothing stored. The cluster is not read (a pod and node read per endpoint
is one more API call each, at the API server's speed).

    .venv/bin/python bench/metrics_watch.py [--endpoints 500] [--runs 3] [--database-url postgresql+psycopg://…]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.adapters.clock import FrozenClock
from bot.adapters.endpoint.dcgm import HttpGpuTelemetry
from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.adapters.store.models import Deployment
from bot.bootstrap import build_context
from bot.config import load_settings
from bot.sandbox.dcgm import DcgmExporter
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.stack import SANDBOX_DOOR
from bot.services.context import Ports
from bot.services.metrics_watch import watch_metrics
from bot.services.releases import register_release

RELEASE = Path(__file__).resolve().parents[1] / "deploy" / "releases" / "kimi-k3-2026-08-01.yaml"


def _timed(work: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="an empty database (default: a temporary SQLite file)")
    args = parser.parse_args()
    clock = FrozenClock(dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC))
    with tempfile.TemporaryDirectory() as tmp, OpenAIServer() as server, DcgmExporter(gpus=8) as dcgm:
        names = [f"kimi-{i:04d}" for i in range(args.endpoints)]
        settings = load_settings(
            data_dir=Path(tmp), auto_migrate=True, database_url=args.database_url,
            endpoints=[{"name": n, "kind": "eks", "url": server.url, "dcgm_url": dcgm.url, "channel": "C0BENCH",
                        "door": SANDBOX_DOOR} for n in names],
        )
        endpoint, gpus = HttpEndpointClient(timeout=10), HttpGpuTelemetry()
        ctx = build_context(settings, clock=clock, ports=Ports(endpoint=endpoint, gpus=gpus))
        release = yaml.safe_load(RELEASE.read_text())
        register_release(ctx, release, "U0BENCH")
        with ctx.uow() as uow:
            rel = uow.releases.get(release["name"])
            assert rel is not None
            for row in uow.endpoints.list():
                uow.deployments.add(Deployment(endpoint_id=row.id, release_id=rel.id, kind="deploy", state="live",
                                               in_flight=None, requested_by="U0BENCH", created_at=clock.now(),
                                               updated_at=clock.now(), finished_at=clock.now()))
            uow.commit()

        def scrapes() -> None:
            for spec in settings.endpoints:
                endpoint.metrics(spec)
                gpus.read(dcgm.url)

        rows: list[tuple[str, float, float]] = []
        wall, cpu = _timed(scrapes)
        rows.append(("baseline: scrapes only", wall, cpu))
        for run in range(args.runs):
            server.simulate(requests=600, errors=3, ttft=0.3, queue=0.02, e2e=5.0, kv_usage=0.8)
            clock.advance(dt.timedelta(minutes=1))
            wall, cpu = _timed(lambda: watch_metrics(ctx))
            rows.append((f"watch run {run + 1}", wall, cpu))
        with ctx.uow() as uow:
            stored = uow.samples.count()
        base = rows[0][1]
        print(f"{'what':<24} {'wall s':>8} {'cpu s':>8} {'ms/endpoint':>12} {'× baseline':>11}")
        for what, wall, cpu in rows:
            print(f"{what:<24} {wall:8.2f} {cpu:8.2f} {1000 * wall / args.endpoints:12.1f} {wall / base:11.1f}")
        print(f"\n{args.endpoints} endpoints, {args.runs} runs, {stored} samples stored "
              f"({stored / max(1, args.endpoints):.0f} per endpoint); a run must finish well inside the 1-minute period")
        ctx.close()


if __name__ == "__main__":
    main()
    gc.freeze()  # the process ends: its last garbage collection would only walk what the OS frees anyway
