"""kimi-ops's own time in the closed-door window, with the production defaults (issue 36).

While a deployment holds users on the fallback (admission closed, then the apply, the rollout and the readiness
step, then the route opened again), part of the time is the cluster's (the operator rolling the model out, the
gateway taking a route) and part is kimi-ops noticing. This bench measures kimi-ops's part of each wait the window
has, over real HTTP against kmock's Kubernetes emulator, the HyperPod operator simulator and the gateway
stand-in, with the production ``KIMI_ROLLOUT_POLL_SECONDS`` (5 s):

* rollout: from the operator writing ``DeploymentComplete`` to the adapter's verdict (``KubernetesCluster.watch``);
* route change, twice a window (close, reopen): from the gateway writing ``Accepted`` for the new generation to
  the admission service's return (``apply_admission``).

The moment each fact is written is taken by a watch of the bench's own on the same object. Baseline, in the same
run: the same waits as kimi-ops made them before (a read every 5 s for the rollout; a 0.2 s pause before each
read of the route). Goal: kimi-ops's own time in one window, rollout plus two route changes, at most 2 s.

On SQLite and on a fresh PostgreSQL database (``--no-postgres``: SQLite only), each with its own baseline.

    .venv/bin/python bench/closed_door.py [--windows 3] [--no-postgres]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import two_databases as databases
import yaml

from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.rest import object_path
from bot.adapters.cluster.rollout import read_hyperpod
from bot.adapters.cluster.route_read import read_route_status
from bot.adapters.cluster.watching import versions
from bot.adapters.store import schema
from bot.bootstrap import build_context
from bot.config import EndpointSettings, load_settings
from bot.domain.admission import Admission
from bot.domain.release import ReleaseManifest
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.operator import OperatorSimulator
from bot.sandbox.stack import EXAMPLE_RELEASES
from bot.sandbox.traffic import route_config, start_traffic_layer
from bot.services.admission import apply_admission
from bot.services.context import Context, Ports

NS = "model-serving"
ENDPOINT = "kimi-prod"
GOAL_SECONDS = 2.0
OLD_ROUTE_PAUSE = 0.2


class FirstSeen:
    """A watch of the bench's own: when ``fact`` first held for the object (time.monotonic)."""

    def __init__(self, kube: KubeStandIn, kind: str, name: str, fact: Callable[[dict[str, Any]], bool]) -> None:
        self.at: float | None = None
        self._stop = threading.Event()
        api = kube.api_client()

        def run() -> None:
            while not self._stop.is_set() and self.at is None:
                for obj in versions(api, kind, name, NS, seconds=5.0, stop=self._stop):
                    if fact(obj):
                        self.at = time.monotonic()
                        return

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def close(self) -> float:
        self._thread.join(60)
        self._stop.set()
        assert self.at is not None, "the fact was never seen"
        return self.at


def rollout_lateness(kube: KubeStandIn, cluster: KubernetesCluster, ep: EndpointSettings, release: ReleaseManifest,
                     generation: int, old_way: bool) -> float:
    """Seconds between the operator's DeploymentComplete and the verdict, for one apply of ``release``."""
    manifest = cluster.render(release, ep, release.tuple_hash())
    seen = FirstSeen(kube, "InferenceEndpointConfig", ENDPOINT,
                     lambda o: read_hyperpod(o).verdict == "succeeded"
                     and int((o.get("metadata") or {}).get("generation") or 0) >= generation)
    cluster.apply(ep, manifest)
    if old_way:  # the loop before the watch API: a read every poll_seconds
        path = object_path("InferenceEndpointConfig", ENDPOINT, NS)
        while not (read_hyperpod(cluster.rest.get(path)).verdict == "succeeded"
                   and int(((cluster.rest.get(path) or {}).get("metadata") or {}).get("generation") or 0) >= generation):
            time.sleep(cluster.poll_seconds)
    else:
        outcome = cluster.watch(ep, manifest, timeout_seconds=600, on_progress=lambda _p: None)
        assert outcome.status == "succeeded", outcome
    done = time.monotonic()
    return done - seen.close()


def route_lateness(kube: KubeStandIn, ctx: Context, ep: EndpointSettings, admission: Admission, old_way: bool) -> float:
    """Seconds between the gateway accepting the route's new generation and the admission service returning."""
    cluster = ctx.ports.cluster
    assert isinstance(cluster, KubernetesCluster)
    before = cluster.route_status(ep)
    wanted = (before.generation or 0) + 1 if before is not None else 1
    name = ep.route.route_name(ep.name) if ep.route is not None else ep.name
    seen = FirstSeen(kube, "HTTPRoute", name, lambda o: read_route_status(o, ep).accepted
                     and (read_route_status(o, ep).generation or 0) >= wanted)
    if old_way:  # the loop before: set the route, then pause 0.2 s before each read until the gateway accepted
        status = cluster.set_route(ep, admission, "bench")
        while not (status.accepted and status.effective == admission):
            time.sleep(OLD_ROUTE_PAUSE)
            status = cluster.route_status(ep) or status
    else:
        apply_admission(ctx, ep, admission, "bench")
    done = time.monotonic()
    return done - seen.close()


def measure(backend: str, args: argparse.Namespace, poll: float,
            releases: list[ReleaseManifest]) -> dict[str, list[float]]:
    """``args.windows`` windows each way, with kimi-ops's records on ``backend``."""
    found: dict[str, list[float]] = {"rollout": [], "route": [], "rollout old": [], "route old": []}
    with start_kube() as kube, OpenAIServer(served_model="Kimi-K3") as model, \
            tempfile.TemporaryDirectory() as tmp_name, \
            databases.database(backend, args, Path(tmp_name), "closed_door") as url:
        tmp = Path(tmp_name)
        seed_cluster(kube.rest(), namespace=NS, zone="us-east-1a")
        changed = kube.changes()
        traffic = start_traffic_layer(kube.rest(), namespace=NS, endpoint=ENDPOINT, model_url=model.url,
                                      changed=changed)
        try:
            cluster = KubernetesCluster(kube.api_client(), poll_seconds=poll)
            ep = EndpointSettings(name=ENDPOINT, namespace=NS, url=model.url, availability_zone="us-east-1a",
                                  route=route_config())
            schema.upgrade(url)
            ctx = build_context(load_settings(database_url=url, data_dir=tmp), ports=Ports(cluster=cluster))
            generation = 0
            try:
                with OperatorSimulator(kube.rest(), NS, kind="hyperpod", step_seconds=0.2,
                                       changed=kube.changes()):
                    for window in range(args.windows * 2):
                        old_way = window % 2 == 1  # alternate, so load on the machine falls on both alike
                        suffix = " old" if old_way else ""
                        found["route" + suffix].append(route_lateness(kube, ctx, ep, Admission.closed(), old_way))
                        generation += 1
                        release = releases[window % len(releases)]
                        found["rollout" + suffix].append(
                            rollout_lateness(kube, cluster, ep, release, generation, old_way))
                        found["route" + suffix].append(route_lateness(kube, ctx, ep, Admission.open(), old_way))
            finally:
                ctx.close()
        finally:
            traffic.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=3, help="closed-door windows measured each way")
    databases.add_arguments(parser)
    args = parser.parse_args()
    poll = load_settings().rollout_poll_seconds  # the production default: 5 s
    releases = [ReleaseManifest.model_validate(yaml.safe_load(p.read_text()))
                for p in sorted(EXAMPLE_RELEASES.glob("*.yaml"))]
    results = {backend: measure(backend, args, poll, releases) for backend in databases.backends(args)}
    print(f"{'database':<10} {'wait':<28} {'median s':>9} {'worst s':>8} {'baseline median s':>18} "
          f"{'baseline worst s':>17}")
    for backend, found in results.items():
        for wait, label in (("rollout", "rollout verdict"), ("route", "route change (each)")):
            now, old = found[wait], found[wait + " old"]
            print(f"{backend:<10} {label:<28} {statistics.median(now):>9.3f} {max(now):>8.3f} "
                  f"{statistics.median(old):>18.3f} {max(old):>17.3f}")
    print()
    for backend, found in results.items():
        own = statistics.median(found["rollout"]) + 2 * statistics.median(found["route"])
        old_window = statistics.median(found["rollout old"]) + 2 * statistics.median(found["route old"])
        print(f"{backend}: kimi-ops's own time in one closed-door window (rollout + 2 route changes, "
              f"KIMI_ROLLOUT_POLL_SECONDS={poll:g}): {own:.2f} s (baseline {old_window:.2f} s); "
              f"goal ≤ {GOAL_SECONDS:g} s: {'ok' if own <= GOAL_SECONDS else 'MISSED'}")


if __name__ == "__main__":
    main()
