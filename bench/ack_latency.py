"""Acknowledgement latency of the Slack app, beside a bare Bolt app doing nothing, in the same run.

Both apps are served by the same WSGI server (waitress) on 127.0.0.1 with an
ephemeral port, one after the other (kimi-ops' work after the acks is let finish
before the next measurement), and receive the same signed requests: ``/kimi help`` slash
commands and Approve button clicks (on a gate ticket that no longer waits, so
the work after the ack is a refusal). Each level runs ``--requests`` requests
spread over 1, 10 and 50 concurrent clients; the table gives p50 and p99 of the
time until the HTTP answer (the ack Slack waits for, 3 s at most) and the ratio
to the bare app.

    .venv/bin/python bench/ack_latency.py [--requests 300]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slack_bolt import App
from slack_sdk import WebClient

from bot.adapters.store import schema
from bot.bootstrap import build_context, build_root
from bot.config import load_settings
from bot.sandbox.slack_stub import Message, SlackSender, SlackStub
from bot.slack.app import create_app
from bot.slack.http import HttpServer
from bot.views.actions import APPROVE, GateTicket

SECRET = "bench-signing-secret"
LEVELS = (1, 10, 50)


def bare_app(stub: SlackStub) -> App:
    app = App(client=WebClient(token="xoxb-bench", base_url=stub.api_url), signing_secret=SECRET,
              token_verification_enabled=False, process_before_response=True)
    app.command("/kimi")(lambda ack: ack())
    app.action(APPROVE)(lambda ack: ack())
    return app


def run_level(url: str, clients: int, total: int, make_body: Callable[[], str], sender: SlackSender) -> list[float]:
    per_client = max(1, total // clients)
    timings: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []

    def worker() -> None:
        with httpx.Client(timeout=10) as http:
            for _ in range(per_client):
                body = make_body()
                headers = sender.headers(body)
                started = time.perf_counter()
                answer = http.post(url, content=body.encode(), headers=headers)
                elapsed = time.perf_counter() - started
                if answer.status_code != 200:
                    errors.append(f"HTTP {answer.status_code}")
                with lock:
                    timings.append(elapsed)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"{len(errors)} request(s) were not acknowledged: {errors[:3]}")
    return timings


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per kind and concurrency level (bounded)")
    args = parser.parse_args()
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # queueing at 50 clients is what is measured, not news
    total = max(10, min(args.requests, 5000))

    with tempfile.TemporaryDirectory() as tmp, SlackStub() as stub:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        schema.upgrade(url)
        ctx = build_context(load_settings(database_url=url, data_dir=Path(tmp), slack_api_url=stub.api_url,
                                          roles={"approver": ["U0BENCH"], "viewer": ["U0BENCH"]}))
        kimi = create_app(build_root(ctx, slack_token="xoxb-bench"), signing_secret=SECRET)
        servers = {
            "kimi-ops": HttpServer(kimi.wsgi(), "127.0.0.1", 0).start(),
            "bare Bolt": HttpServer(_bare_wsgi(bare_app(stub)), "127.0.0.1", 0).start(),
        }
        sender = SlackSender(SECRET, stub)
        old_message = Message("C0BENCH", "1700000000.000001", "gate", [])
        ticket = GateTicket(999_999, "artifact", "0" * 64, "1" * 64).encode()
        kinds = {
            "slash command": lambda: sender.slash("U0BENCH", "help", "C0BENCH"),
            "button click": lambda: sender.click("U0BENCH", old_message, APPROVE, ticket),
        }
        rows = []
        try:
            for kind, make_body in kinds.items():
                for clients in LEVELS:
                    result = {}
                    for name, server in servers.items():
                        timings = run_level(f"{server.url}/slack/events", clients, total, make_body, sender)
                        result[name] = (pct(timings, 0.5), pct(timings, 0.99), len(timings))
                        # kimi-ops' work after each ack runs in this process: let it finish before the next
                        # measurement, or the bare app (and the next level) would be timed under its load.
                        kimi.wait_idle(120)
                    rows.append((kind, clients, result))
        finally:
            for server in servers.values():
                server.stop()
            kimi.close()
            ctx.close()

    print(
        f"{'request':<14} {'clients':>7} {'n':>5} {'kimi p50 ms':>12} {'kimi p99 ms':>12} "
        f"{'bare p50 ms':>12} {'bare p99 ms':>12} {'p50 ratio':>10} {'p99 ratio':>10}"
    )
    for kind, clients, result in rows:
        k50, k99, n = result["kimi-ops"]
        b50, b99, _ = result["bare Bolt"]
        print(
            f"{kind:<14} {clients:>7} {n:>5} {k50:>12.2f} {k99:>12.2f} {b50:>12.2f} {b99:>12.2f} "
            f"{k50 / b50 if b50 else float('nan'):>10.2f} {k99 / b99 if b99 else float('nan'):>10.2f}"
        )
    worst = max(r[2]["kimi-ops"][1] for r in rows)
    print(
        f"\nworst kimi-ops p99: {worst:.1f} ms (Slack's limit: 3000 ms); median over all levels: "
        f"{statistics.median(r[2]['kimi-ops'][0] for r in rows):.2f} ms"
    )


def _bare_wsgi(app: App):  # type: ignore[no-untyped-def]
    from slack_bolt.adapter.wsgi import SlackRequestHandler

    return SlackRequestHandler(app)


if __name__ == "__main__":
    main()
