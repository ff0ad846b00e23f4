"""The rendered Prometheus rules and the built-in watch page on the same series, at the same moments.

Each case counts traffic into the OpenAI stand-in minute by minute while the clock moves: Prometheus's view is
the stand-in's ``/metrics`` scraped every minute (fed to the real ``promtool test rules`` as input series), the
built-in watch reads the same server every five minutes and opens incidents. At every watch round the alerts
firing in ``promtool`` must be exactly the incidents the watch holds open — for a burst of slow first tokens,
a slow burn, a healthy busy endpoint and a reject storm, the cases of tests/services/test_metrics_watch.py.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.domain import alert_rules
from bot.sandbox.openai_server import OpenAIServer
from bot.services.alert_rules import render_rules
from bot.services.context import Ports
from bot.services.metrics_watch import BURN_KINDS, watch_metrics
from tests.jobs_support import eks_endpoint, make_live
from tests.promtool_support import promtool, write_yaml

HEALTHY = {"requests": 600, "ttft": 0.2, "queue": 0.01, "e2e": 4.0}  # per five minutes, as the watch's tests
BUSY = {**HEALTHY, "requests": 3000, "kv_usage": 0.97}
FED = ("vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_count",
       "vllm:request_queue_time_seconds_bucket", "vllm:request_queue_time_seconds_count",
       "vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
       "http_requests_total", "vllm:kv_cache_usage_perc")
POD = {"namespace": "model-serving", "pod": "kimi-prod-7d9f-0"}  # the labels Prometheus's scrape adds
KINDS = (*BURN_KINDS, "kv-pressure")

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the agreement, not the database


@dataclass
class Run:
    """What both sides saw: the scraped series minute by minute, and the watch's open incidents by minute."""

    series: dict[str, list[float | None]] = field(default_factory=lambda: defaultdict(list))
    scrapes: int = 0
    open_at: dict[int, set[str]] = field(default_factory=dict)


def scrape_into(run: Run, scraper: httpx.Client, targets: dict[str, dict[str, str]]) -> None:
    """One scrape of each target's ``/metrics`` (url → the labels Prometheus's scrape adds), as one minute's values."""
    for url, target_labels in targets.items():
        for family in text_string_to_metric_families(scraper.get(f"{url}/metrics").text):
            for sample in family.samples:
                if sample.name in FED:
                    labels = {**sample.labels, **target_labels}
                    key = sample.name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
                    values = run.series[key]
                    values.extend([None] * (run.scrapes - len(values)))  # a series first exposed now
                    values.append(sample.value)
    run.scrapes += 1


@pytest.fixture()
def watched(make_ctx, clock):
    with OpenAIServer() as server:
        ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod", url=server.url, ttft_objective_ms=2000)],
                       ports=Ports(endpoint=HttpEndpointClient(timeout=10)))
        make_live(ctx, "kimi-prod")
        run = Run()
        scraper = httpx.Client(timeout=10)

        def scrape() -> None:
            scrape_into(run, scraper, {server.url: POD})

        def watch(minute: int) -> None:
            watch_metrics(ctx)
            with ctx.uow() as uow:
                row = uow.endpoints.get("kimi-prod")
                run.open_at[minute] = {i.kind for i in uow.incidents.open_of(row.id, KINDS)}

        def play(case: list[tuple[dict, int]]) -> Run:
            scrape()
            watch(0)  # the first reading sets where counting starts
            minute = 0
            for traffic, steps in case:
                for _ in range(steps):
                    for _ in range(5):  # a fifth of the step's traffic each minute, one scrape a minute
                        server.simulate(**{k: (v // 5 if k in ("requests", "errors", "rejects") else v)
                                           for k, v in traffic.items()})
                        clock.advance(dt.timedelta(minutes=1))
                        minute += 1
                        scrape()
                    watch(minute)
            return run

        try:
            yield ctx, play
        finally:
            scraper.close()


def firing(selector: str, minute: int, kinds: set[str]) -> dict:
    """A ``promql_expr_test``: at ``minute`` the alerts ``selector`` picks fire exactly ``kinds``, once each."""
    return {"expr": f'count by ({alert_rules.KIND_LABEL}) (ALERTS{{alertstate="firing", {selector}}})',
            "eval_time": f"{minute}m",
            "exp_samples": [{"labels": f'{{{alert_rules.KIND_LABEL}="{kind}"}}', "value": 1} for kind in sorted(kinds)]}


def at_each_round_alone(groups: list[dict], checks: list[dict]) -> str:
    """promtool's evaluation interval: the watch's five minutes, where Prometheus evaluates every minute.

    The same verdicts at the watch's rounds, with a fifth of promtool's work, while every rule is a function of
    the series at the moment it is evaluated: no ``for`` (a pending alert counts evaluations) and no recorded
    series read over a range or at an offset (that would read the minutes between). Checked here: a rule that
    starts to keep state fails the test until the interval is one minute again, never passes on other verdicts.
    """
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    over_time = re.compile("(" + "|".join(map(re.escape, recorded)) + r")(\{[^}]*\})?\s*(\[|offset)")
    for rule in (r for g in groups for r in g["rules"]):
        assert not {"for", "keep_firing_for"} & rule.keys(), rule
        assert not (recorded and over_time.search(rule["expr"])), rule
    assert all(check["eval_time"].endswith("m") and int(check["eval_time"][:-1]) % 5 == 0 for check in checks)
    return "5m"


def promtool_test(run: Run, groups: list[dict], checks: list[dict], tmp_path: Path) -> None:
    write_yaml(tmp_path / "rules.yaml", {"groups": groups})
    series = [{"series": key, "values": " ".join("_" if v is None else f"{v:g}" for v in values)}
              for key, values in run.series.items()]
    # Recording groups first at each moment, as the watch computes its ratios before deciding: without an order
    # promtool evaluates the groups in Go's random map order, so an alert might read the minute-old ratios.
    ordered = sorted(groups, key=lambda g: any("alert" in r for r in g["rules"]))
    write_yaml(tmp_path / "test.yaml", {"rule_files": ["rules.yaml"],
                                        "evaluation_interval": at_each_round_alone(groups, checks),
                                        "group_eval_order": [g["name"] for g in ordered],
                                        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}]})
    done = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert done.returncode == 0, f"the rules and the built-in watch disagree:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"


def promtool_agrees(ctx, run: Run, tmp_path: Path) -> None:
    """``promtool test rules``: at each watch round, the firing alerts' kinds are the watch's open incidents."""
    rendered = render_rules(ctx, "kimi-prod")
    assert rendered.targets[0].release == "rel-live"
    checks = [firing('endpoint="kimi-prod"', minute, kinds) for minute, kinds in sorted(run.open_at.items())]
    promtool_test(run, rendered.rules_file["groups"], checks, tmp_path)


def ever(run: Run) -> set[str]:
    return set().union(*run.open_at.values())


def test_a_burst_of_slow_first_tokens_pages_in_both(watched, tmp_path) -> None:
    ctx, play = watched
    run = play([(HEALTHY, 12), ({**HEALTHY, "ttft": 3.0}, 6), (HEALTHY, 12)])
    assert "burn-page:ttft" in ever(run) and not {k for k in ever(run) if "errors" in k or "rejects" in k}
    promtool_agrees(ctx, run, tmp_path)


def test_a_slow_burn_warns_without_paging_in_both(watched, tmp_path) -> None:
    ctx, play = watched
    run = play([(HEALTHY, 12), ({**HEALTHY, "errors": 10}, 36)])  # 1.7 % 5xx against a 1 % budget for three hours
    assert "burn-warn:errors" in ever(run) and "burn-page:errors" not in ever(run)
    promtool_agrees(ctx, run, tmp_path)


def test_a_healthy_busy_endpoint_pages_in_neither(watched, tmp_path) -> None:
    ctx, play = watched
    run = play([(BUSY, 24)])  # two busy hours: a full KV cache, no rejects
    assert ever(run) == set()
    promtool_agrees(ctx, run, tmp_path)


def test_a_reject_storm_pages_kv_pressure_and_the_reject_budget_in_both(watched, tmp_path) -> None:
    ctx, play = watched
    run = play([(BUSY, 6), ({**BUSY, "rejects": 600}, 6), (BUSY, 12)])
    assert {"kv-pressure", "burn-page:rejects"} <= ever(run) and run.open_at[max(run.open_at)] <= {"burn-warn:rejects"}
    promtool_agrees(ctx, run, tmp_path)


def test_a_burn_split_over_both_sides_pages_the_service_and_neither_side(make_ctx, clock, tmp_path) -> None:
    """Half the requests fail, alternately on each side, at a rate too thin for either side alone to reach
    ``min_requests`` (60 an hour each, 100 needed): neither side's rules nor the built-in watch (which has no
    service-wide burn rate) page, the service's own rules, counting both sides' requests, do."""
    sides = ("kimi-blue", "kimi-green")
    with OpenAIServer() as blue, OpenAIServer() as green:
        servers = dict(zip(sides, (blue, green), strict=True))
        ctx = make_ctx(endpoints=[eks_endpoint(side, url=servers[side].url, ttft_objective_ms=2000,
                                               slo={"min_requests": 100}) for side in sides],
                       services=[{"name": "kimi", "sides": list(sides),
                                  "route": {"gateway": {"name": "gw", "namespace": "gateways"}}}],
                       ports=Ports(endpoint=HttpEndpointClient(timeout=10)))
        for side in sides:
            make_live(ctx, side)
        run = Run()
        targets = {servers[side].url: {"namespace": "model-serving", "pod": f"{side}-7d9f-0"} for side in sides}
        with httpx.Client(timeout=10) as scraper:
            for minute in range(71):
                if minute:
                    blue.simulate(requests=1, errors=minute % 2, ttft=0.2, e2e=4.0)
                    green.simulate(requests=1, errors=1 - minute % 2, ttft=0.2, e2e=4.0)
                    clock.advance(dt.timedelta(minutes=1))
                scrape_into(run, scraper, targets)
                if minute % 5 == 0:
                    watch_metrics(ctx)
                    with ctx.uow() as uow:
                        run.open_at[minute] = {f"{row.name} {i.kind}" for row in uow.endpoints.list()
                                               for i in uow.incidents.open_of(row.id, KINDS)}
    assert ever(run) == set()  # the built-in watch: each side alone has too few requests to judge

    groups = [g for name in (*sides, "kimi") for g in render_rules(ctx, name).rules_file["groups"]]
    sides_only = f'{alert_rules.SCOPE_LABEL}=""'
    service = f'{alert_rules.SCOPE_LABEL}="service", service="kimi"'
    checks = [firing(sides_only, minute, set()) for minute in sorted(run.open_at)]  # as the watch: nothing
    checks += [firing(service, 30, set()),  # half an hour: 60 requests over both sides, too few
               firing(service, 70, {"burn-page:errors", "burn-warn:errors"})]
    promtool_test(run, groups, checks, tmp_path)
