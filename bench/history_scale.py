"""What people read, at the scale of years: status, history, gates, App Home and ``jobs list`` at 1k and 100k deployments.

For each database (SQLite, and PostgreSQL when ``--postgres`` reaches one) and each size, a fresh database is
migrated to head and filled in SQL (``INSERT … SELECT`` over a counter, so filling costs the database, not
Python): 4 endpoints, 200 releases of 64 weight objects each, the deployments (each with an 8 KB applied
manifest, four decided gate reports, twelve audit rows and the outbox events a real one leaves: nine delivered
``deployment.state`` events, the readiness one carrying its cold start on three of the four endpoints, and two
thread messages), one deployment per endpoint waiting at its model gate, ten readiness probes per deployment
(a probe every five minutes between deployments) and one ``job.run`` audit row per 10 deployments. Each
endpoint's newest cold start is on its row, as the readiness step keeps it (migration 0017); the fourth
endpoint's rollouts recorded none, the worst case for a search of its events.

Each call is timed in this process: server time, the command's whole work up to the reply it would send; the
best of ``--repeat`` (on a shared machine the best is the code's cost, the rest is other people's load), the sizes
taking turns call by call so that a busy moment falls on both and the growth measures the data. Its
SQL statements are counted. The baseline, in the same run, is the same call on the same data with migration
0009's five indexes dropped. The goals (issues 19 and 36): each call under 50 ms at 100k deployments, and at
most 2× from 1k to 100k. Beside them, the lookup status made before migration 0017 (each endpoint's newest
state event carrying a cold start, one backwards walk of its events per endpoint) is timed on the same data.

    .venv/bin/python bench/history_scale.py [--sizes 1000,100000] [--repeat 5] [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import two_databases as databases
from sqlalchemy import Connection, Engine, bindparam, create_engine, event, select, text
from sqlalchemy.orm import Session, aliased

from bot.adapters.store import schema
from bot.adapters.store.models import Endpoint, Event, UTCDateTime
from bot.bootstrap import build_context, build_root
from bot.config import Settings, load_settings
from bot.sandbox.stack import SANDBOX_DOOR, SANDBOX_EGRESS
from bot.services.access import Identity
from bot.services.context import Context
from bot.services.scheduling import job_overview
from commands import gates, history, home, status

ENDPOINTS = 4
RELEASES = 200
OBJECTS = 64
GATES = ("artifact", "infrastructure", "model", "traffic")
AUDIT_PER_DEPLOYMENT = 12
STATE_EVENTS = ("requested", "artifact_gate", "infrastructure_gate", "closing", "applying", "rolling_out", "readiness",
                "model_gate", "live")
THREAD_MESSAGES_PER_DEPLOYMENT = 2
PROBES_PER_DEPLOYMENT = 10
COLD_START_ENDPOINTS = 3  # the last endpoint's rollouts recorded no cold start
COLD_START = {"image_pull_s": 95.0, "weights_s": 840.0, "load_s": 300.0, "first_completion_s": 2.0}
GOAL_MS = 50.0
GOAL_GROWTH = 2.0
ADMIN = Identity("U0BENCH")
START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
INDEXES = {  # migration 0009's: what the baseline runs without
    "ix_deployments_endpoint_id_state": "deployments", "ix_deployments_in_flight": "deployments",
    "ix_gate_results_undecided": "gate_results", "ix_readiness_checks_endpoint_id_at_id": "readiness_checks",
    "ix_audit_log_subject_id": "audit_log",
}


# ---------------------------------------------------------------------------- filling


def _report(gate: str) -> str:
    checks = [{"name": f"{gate}.check{i}", "status": "pass", "reason": "fine " * 12, "details": {"n": i}} for i in range(8)]
    return json.dumps({"gate": gate, "checks": checks, "summary": "all checks passed", "attachments": {}})


def _counter(upto: int) -> str:
    """A CTE ``n(i)`` of 1..upto, in SQL both databases run."""
    return f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {upto}) "


def fill(engine: Engine, deployments: int) -> None:
    """The history described in the module's docstring, written in a handful of statements."""
    pg = engine.dialect.name == "postgresql"
    js = (lambda p: f"CAST({p} AS JSON)") if pg else (lambda p: p)
    now = bindparam("now", START, type_=UTCDateTime())
    objects = json.dumps([{"key": f"weights/model-{i:05d}.safetensors", "size": 5_000_000_000 + i, "sha256": "ab" * 32}
                          for i in range(OBJECTS)])
    manifest = "apiVersion: v1\nkind: List\nitems:\n" + "  - {kind: Filler, data: " + "x" * 8000 + "}\n"
    with engine.begin() as conn:
        def run(sql: str, **params: Any) -> None:
            conn.execute(text(sql).bindparams(now, **params) if ":now" in sql else text(sql).bindparams(**params))

        for e in range(1, ENDPOINTS + 1):
            name = f"kimi-{e}"
            run(f"INSERT INTO endpoints (id, name, kind, environment, namespace, url, admission_open, admission, settings, "
                f"created_at) VALUES ({e}, :name, 'hyperpod', 'prod', 'ns', 'http://127.0.0.1:9', true, 'open', "
                f"{js(':settings')}, :now)", name=name, settings=json.dumps({"name": name}))
        run(_counter(RELEASES) + "INSERT INTO releases (id, name, model_repo, model_commit, weights_prefix, objects, image, "
            "serving_args, serving_env, licence_version, licence_sha256, tuple_hash, registered_by, registered_at) "
            f"SELECT i, 'rel-' || i, 'moonshotai/Kimi-K3', :commit, 's3://w/k3/', {js(':objects')}, :image, "
            f"{js(':args')}, {js(':env')}, 'v1', :sha, :sha, 'U1', :now FROM n",
            commit="0" * 40, objects=objects, image="r/vllm@sha256:" + "0" * 64, args="[]", env="{}", sha="a" * 64)
        # Ended deployments round-robin over the endpoints; the newest of each endpoint is made live below.
        run(_counter(deployments) + "INSERT INTO deployments (id, endpoint_id, release_id, kind, state, state_reason, "
            "in_flight, requested_by, applied_manifest, manifest_hash, created_at, updated_at, finished_at, "
            "rollback_offered, own_requests, own_uncertain) "
            f"SELECT i, 1 + (i % {ENDPOINTS}), 1 + (i % {RELEASES}), 'deploy', 'superseded', 'superseded', NULL, 'U1', "
            ":manifest, :hash, :now, :now, :now, false, 0, 0 FROM n", manifest=manifest, hash="b" * 64)
        run("UPDATE deployments SET state = 'live' WHERE id IN (SELECT max(id) FROM deployments GROUP BY endpoint_id)")
        for gate in GATES:
            run("INSERT INTO gate_results (deployment_id, gate, report, status, report_hash, checked_at, decision, "
                f"decided_by, decided_at) SELECT id, :gate, {js(':report')}, 'pass', :hash, :now, 'approved', 'U2', :now "
                "FROM deployments", gate=gate, report=_report(gate), hash="c" * 64)
        run(_counter(AUDIT_PER_DEPLOYMENT) + "INSERT INTO audit_log (at, actor, action, subject, details) "
            f"SELECT :now, 'U1', 'deployment.step' || n.i, 'deployment:' || d.id, {js(':details')} "
            "FROM deployments d CROSS JOIN n", details=json.dumps({"from": "a", "to": "b"}))
        run(_counter(max(1, deployments // 10)) + "INSERT INTO audit_log (at, actor, action, subject, details) "
            f"SELECT :now, 'kimi-ops:scheduler', 'job.run', 'job:readiness-probe', {js(':details')} FROM n",
            details=json.dumps({"ok": True, "summary": "kimi-1: answered"}))
        run(_counter(PROBES_PER_DEPLOYMENT * deployments) + "INSERT INTO readiness_checks (endpoint_id, at, ok, "
            f"http_status, ttft_ms, total_ms) SELECT 1 + (i % {ENDPOINTS}), :now, true, 200, 120.0, 900.0 FROM n")
        # The outbox a real history leaves: every state change and thread message, delivered long ago.
        for step, to_state in enumerate(STATE_EVENTS):
            cold = (f"CASE WHEN d.endpoint_id <= {COLD_START_ENDPOINTS} THEN :cold_payload ELSE :payload END"
                    if to_state == "readiness" else ":payload")
            run("INSERT INTO events (at, kind, deployment_id, endpoint_name, payload, delivered_at, attempts) "
                f"SELECT :now, 'deployment.state', d.id, 'kimi-' || d.endpoint_id, {js(cold)}, :now, 1 FROM deployments d",
                payload=json.dumps({"from": STATE_EVENTS[step - 1] if step else "requested", "to": to_state,
                                    "reason": f"step {step}", "release": "rel-1", "kind": "deploy"}),
                **({"cold_payload": json.dumps({"from": "rolling_out", "to": "readiness", "release": "rel-1",
                                                "kind": "deploy", "cold_start": COLD_START})} if to_state == "readiness" else {}))
        run(_counter(THREAD_MESSAGES_PER_DEPLOYMENT) + "INSERT INTO events (at, kind, deployment_id, endpoint_name, "
            f"payload, delivered_at, attempts) SELECT :now, 'rollout.progress', d.id, 'kimi-' || d.endpoint_id, "
            f"{js(':payload')}, :now, 1 FROM deployments d CROSS JOIN n",
            payload=json.dumps({"message": "2 of 2 pods ready", "state": "rolling_out"}))
        # Each endpoint's newest cold start, on its row as the readiness step keeps it (migration 0017).
        run(f"UPDATE endpoints SET cold_start = {js(':cold')}, cold_start_at = :now WHERE id <= {COLD_START_ENDPOINTS}",
            cold=json.dumps(COLD_START))
        # One deployment per endpoint waiting at its model gate (the gates /kimi gates lists).
        for e in range(1, ENDPOINTS + 1):
            dep = deployments + e
            run("INSERT INTO deployments (id, endpoint_id, release_id, kind, state, in_flight, requested_by, "
                "applied_manifest, manifest_hash, created_at, updated_at, rollback_offered, own_requests, own_uncertain) "
                f"VALUES ({dep}, {e}, 1, 'deploy', 'model_gate', true, 'U1', :manifest, :hash, :now, :now, false, 0, 0)",
                manifest=manifest, hash="b" * 64)
            for gate in GATES[:2]:
                run("INSERT INTO gate_results (deployment_id, gate, report, status, report_hash, checked_at, decision, "
                    f"decided_by, decided_at) VALUES ({dep}, :gate, {js(':report')}, 'pass', :hash, :now, 'approved', "
                    "'U2', :now)", gate=gate, report=_report(gate), hash="c" * 64)
            run("INSERT INTO gate_results (deployment_id, gate, report, status, report_hash, checked_at) "
                f"VALUES ({dep}, 'model', {js(':report')}, 'pass', :hash, :now)", report=_report("model"), hash="c" * 64)
        if pg:
            conn.execute(text("ANALYZE"))
    if not pg:
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))


def drop_indexes(engine: Engine) -> None:
    with engine.begin() as conn:
        for name in INDEXES:
            conn.execute(text(f"DROP INDEX {name}"))
        conn.execute(text("ANALYZE"))


# ---------------------------------------------------------------------------- measuring


BEFORE = "before 0017"  # a measurement of what the code did before, beside the goals, not judged by them


def cold_starts_before_0017(ctx: Context) -> dict[str, Any]:
    """The lookup status made before migration 0017: each endpoint's newest state event carrying a cold start, one
    correlated ``LIMIT 1`` walking that endpoint's ``(endpoint_name, kind, id)`` index backwards (migration 0012)."""
    newest = aliased(Event)
    carries = newest.payload["cold_start"].as_string().is_not(None)
    latest = (select(newest.id).where(newest.endpoint_name == Endpoint.name, newest.kind == "deployment.state", carries)
              .order_by(newest.id.desc()).limit(1).correlate(Endpoint).scalar_subquery())
    with Session(ctx.uow.engine) as session:
        ids = select(latest).select_from(Endpoint)
        rows = session.scalars(select(Event).where(Event.id.in_(ids))).all()
        return {r.endpoint_name: r.payload["cold_start"] for r in rows if r.endpoint_name is not None}


def calls(ctx: Context) -> dict[str, Callable[[], object]]:
    root = build_root(ctx)
    return {
        "status": lambda: status.run(root, ADMIN, None),
        "history 50": lambda: history.run(root, ADMIN, history.Args("kimi-1", 50)),
        "gates": lambda: gates.run(root, ADMIN, gates.Args()),
        "App Home": lambda: home.parts(ctx, ADMIN),
        "jobs list": lambda: job_overview(ctx, {}),
        f"cold start {BEFORE}": lambda: cold_starts_before_0017(ctx),
    }


def measure(sides: dict[int, tuple[Engine, Callable[[], object]]], repeat: int) -> dict[int, tuple[float, int]]:
    """Per size: the best milliseconds of its call over ``repeat`` (after one warm-up) and the SQL statements one
    call sends. The sizes take turns call by call, so a busy moment on the machine falls on each alike and the
    growth between them measures the data, not the neighbours."""
    counted: dict[int, int] = {}
    for size, (engine, call) in sides.items():
        statements: list[str] = []

        def count(conn: Connection, cursor: Any, statement: str, *args: Any, seen: list[str] = statements) -> None:
            seen.append(statement)

        call()
        event.listen(engine, "before_cursor_execute", count)
        try:
            call()
        finally:
            event.remove(engine, "before_cursor_execute", count)
        counted[size] = len(statements)
    timings: dict[int, list[float]] = {size: [] for size in sides}
    for _ in range(repeat):
        for size, (_engine, call) in sides.items():
            started = time.perf_counter()
            call()
            timings[size].append((time.perf_counter() - started) * 1000)
    return {size: (min(timings[size]), counted[size]) for size in sides}


def settings_for(url: str, tmp: Path) -> Settings:
    return load_settings(database_url=url, data_dir=tmp, roles={"admin": [ADMIN.user_id]},
                         endpoints=[{"name": f"kimi-{e}", "egress": SANDBOX_EGRESS, "door": SANDBOX_DOOR}
                                    for e in range(1, ENDPOINTS + 1)])


def run_backend(backend: str, args: argparse.Namespace, tmp: Path, sizes: list[int],
                repeat: int) -> dict[int, dict[str, dict[str, tuple[float, int]]]]:
    """``{size: {"indexed"|"baseline": {call: (ms, statements)}}}``: one database per size, all filled first, then
    every call measured on the sizes in turn; the baseline last, on the same data without the indexes."""
    found: dict[int, dict[str, dict[str, tuple[float, int]]]] = {size: {} for size in sizes}
    with ExitStack() as stack:
        urls: dict[int, str] = {}
        for size in sizes:
            started = time.perf_counter()
            urls[size] = url = stack.enter_context(databases.database(backend, args, tmp, f"history_{size}"))
            schema.upgrade(url)
            filler = create_engine(url)
            fill(filler, size)
            filler.dispose()
            print(f"# {backend} {size:,} deployments: filled in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        for variant in ("indexed", "baseline"):
            contexts: dict[int, Context] = {}
            try:
                for size, url in urls.items():
                    if variant == "baseline":
                        dropper = create_engine(url)
                        drop_indexes(dropper)
                        dropper.dispose()
                    place = tmp / f"{backend}-{size}-{variant}"
                    place.mkdir()
                    contexts[size] = build_context(settings_for(url, place))
                named = {size: calls(ctx) for size, ctx in contexts.items()}
                for name in named[sizes[0]]:
                    sides = {size: (contexts[size].uow.engine, named[size][name]) for size in sizes}
                    for size, result in measure(sides, repeat).items():
                        found[size].setdefault(variant, {})[name] = result
            finally:
                for ctx in contexts.values():
                    ctx.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000", help="deployment counts, comma-separated (first is the base)")
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per measurement (the best is shown)")
    databases.add_arguments(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = databases.backends(args)
    results: dict[tuple[str, int], dict[str, dict[str, tuple[float, int]]]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        for backend in backends:
            started = time.perf_counter()
            for size, found in run_backend(backend, args, Path(tmp_name), sizes, max(1, args.repeat)).items():
                results[(backend, size)] = found
            print(f"# {backend}: measured in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    base, top = sizes[0], sizes[-1]
    print(f"{'database':<10} {'call':<23} {f'{base:,} ms':>10} {f'{top:,} ms':>11} {'growth':>7} {'stmts':>6} "
          f"{'baseline ms':>12} {'baseline×':>10}  goal")
    worst_ms, worst_growth = 0.0, 0.0
    for backend in backends:
        for call in results[(backend, base)]["indexed"]:
            low_ms, _ = results[(backend, base)]["indexed"][call]
            high_ms, stmts = results[(backend, top)]["indexed"][call]
            baseline_ms, _ = results[(backend, top)]["baseline"][call]
            growth = high_ms / low_ms if low_ms else float("nan")
            if BEFORE in call:
                met = "(measured beside the goals)"
            else:
                worst_ms, worst_growth = max(worst_ms, high_ms), max(worst_growth, growth)
                met = "ok" if high_ms < GOAL_MS and growth <= GOAL_GROWTH else "MISSED"
            print(f"{backend:<10} {call:<23} {low_ms:>10.1f} {high_ms:>11.1f} {growth:>6.2f}× {stmts:>6} "
                  f"{baseline_ms:>12.1f} {baseline_ms / high_ms if high_ms else float('nan'):>9.1f}×  "
                  f"{'' if BEFORE in call else f'<{GOAL_MS:.0f} ms, ≤{GOAL_GROWTH:.0f}×: '}{met}")
    print(f"\ngoals: each call under {GOAL_MS:.0f} ms at {top:,} deployments (worst {worst_ms:.1f} ms), "
          f"growth from {base:,} under {GOAL_GROWTH:.0f}× (worst {worst_growth:.2f}×); baseline: the same data "
          f"without migration 0009's indexes")


if __name__ == "__main__":
    main()
    gc.freeze()  # the process ends: its last garbage collection would only walk what the OS frees anyway
