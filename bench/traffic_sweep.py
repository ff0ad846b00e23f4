"""The traffic gate's sweep against the local OpenAI-compatible stand-in, printed as the gate's report.

The stand-in saturates like a model server: each request already running adds
``--ttft-per-running`` seconds to a newcomer's first token, and past
``--limit`` running plus ``--queue`` waiting requests it answers 429. The
report shows each level's TTFT/completion percentiles, rejections, queue depth,
KV usage and prefix-cache hit rate, the knee and the proposed limits; ``--plot FILE``
writes the PNG the Slack thread shows, drawn from the report's numbers.

    .venv/bin/python bench/traffic_sweep.py [--limit 12] [--queue 0] [--ceiling 32] [--plot sweep.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.adapters.endpoint import HttpEndpointClient
from bot.adapters.endpoint.loadgen import HttpLoadGenerator
from bot.adapters.gate_plots import gate_png
from bot.bootstrap import build_context
from bot.config import EndpointSettings, load_settings
from bot.sandbox.openai_server import OpenAIServer
from bot.services.traffic_gate import run_traffic_gate
from bot.views.gate_text import render_traffic_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=12, help="requests the stand-in runs at once")
    parser.add_argument("--queue", type=int, default=0, help="requests it queues beyond that before 429")
    parser.add_argument("--ceiling", type=int, default=32)
    parser.add_argument("--ttft-per-running", type=float, default=0.01)
    parser.add_argument("--ttft-objective-ms", type=float, default=2000)
    parser.add_argument("--plot", type=Path, metavar="FILE", help="write the report's plot (PNG) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, OpenAIServer(
        max_running=args.limit, max_waiting=args.queue, first_token_delay=0.05, token_delay=0.005,
        ttft_per_running=args.ttft_per_running, reply="OK, noted.",
    ) as server:
        settings = load_settings(
            data_dir=Path(tmp), auto_migrate=True,
            traffic_sweep={"ceiling": args.ceiling, "max_tokens": 16, "prompt_words": 120},
            traffic_objectives={"ttft_p99_ms": args.ttft_objective_ms},
        )
        client = HttpEndpointClient(timeout=5)
        ctx = build_context(settings, loadgen=HttpLoadGenerator(metrics=client.peak_metrics))
        started = time.perf_counter()
        report = run_traffic_gate(ctx, EndpointSettings(name="bench", url=server.url))
        print(render_traffic_report(report))
        if args.plot is not None:
            args.plot.write_bytes(gate_png(report.model_dump(mode="json"), endpoint="bench", release="stand-in") or b"")
            print(f"plot written to {args.plot}")
        print(f"\nwall time {time.perf_counter() - started:.1f} s; stand-in served {server.stats().served}, "
              f"rejected {server.stats().rejected}")
        ctx.close()


if __name__ == "__main__":
    main()
