"""`/metrics`: counters by their old names, gauges and per-model counters read when scraped, histograms with
their labels, and a registry per instance (two daemons in one process never count into each other)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bot.telemetry.metrics import COUNTERS, HISTOGRAMS, Metrics


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render())
        for sample in family.samples
    }


def test_counters_keep_their_names_and_unknown_ones_are_refused() -> None:
    metrics = Metrics()
    metrics.inc("turns_started_total", 3)
    text = metrics.render()
    assert "# TYPE threadbot_turns_started_total counter\nthreadbot_turns_started_total 3.0\n" in text
    for name in COUNTERS:
        assert f"\nthreadbot_{name} " in text, name
    assert metrics.counts["turns_started_total"] == 3
    with pytest.raises(KeyError):
        metrics.inc("no_such_counter")


def test_gauges_and_counter_families_are_read_when_scraped() -> None:
    metrics = Metrics()
    running = [2]
    tokens = {"claude-sonnet-5-5": 10.0}
    metrics.gauge("tool_calls_running", "tool calls running now", lambda: running[0])
    metrics.counter_family("model_output_tokens_total", "output tokens, by model", "model", lambda: tokens)
    running[0], tokens["claude-haiku-5-5"] = 5, 4.0
    samples = _samples(metrics)
    assert samples[("threadbot_tool_calls_running", ())] == 5
    assert samples[("threadbot_model_output_tokens_total", (("model", "claude-sonnet-5-5"),))] == 10
    assert samples[("threadbot_model_output_tokens_total", (("model", "claude-haiku-5-5"),))] == 4


def test_histograms_count_into_buckets_by_their_label() -> None:
    metrics = Metrics()
    metrics.observe("tool_call_seconds", 0.02, "now")
    metrics.observe("tool_call_seconds", 3.0, "sleep_for")
    metrics.observe("tool_call_seconds", 4.0, "sleep_for")
    metrics.observe("event_ack_seconds", 0.003)
    samples = _samples(metrics)
    sleep = (("tool", "sleep_for"),)
    assert samples[("threadbot_tool_call_seconds_count", sleep)] == 2
    assert samples[("threadbot_tool_call_seconds_sum", sleep)] == 7.0
    assert samples[("threadbot_tool_call_seconds_bucket", (("le", "1.0"), ("tool", "sleep_for")))] == 0
    assert samples[("threadbot_tool_call_seconds_bucket", (("le", "5.0"), ("tool", "sleep_for")))] == 2
    assert samples[("threadbot_tool_call_seconds_count", (("tool", "now"),))] == 1
    assert samples[("threadbot_event_ack_seconds_bucket", (("le", "0.005"),))] == 1
    assert samples[("threadbot_event_ack_seconds_bucket", (("le", "0.0025"),))] == 0
    for name, spec in HISTOGRAMS.items():  # every histogram is served, observed or not
        assert f"# TYPE threadbot_{name} histogram" in metrics.render(), name
        assert spec.buckets == tuple(sorted(spec.buckets)), name


def test_two_instances_share_no_series() -> None:
    first, second = Metrics(), Metrics()
    first.inc("cancels_total")
    first.observe("turn_duration_seconds", 1.0)
    first.gauge("sessions_posting", "sessions with Slack posts queued", lambda: 1)
    second.gauge("sessions_posting", "sessions with Slack posts queued", lambda: 7)  # no duplicate-name error
    assert _samples(second)[("threadbot_cancels_total", ())] == 0
    assert _samples(second)[("threadbot_turn_duration_seconds_count", ())] == 0
    assert _samples(second)[("threadbot_sessions_posting", ())] == 7


async def test_the_endpoint_serves_the_text_format_next_to_healthz() -> None:
    metrics = Metrics()
    metrics.observe("slack_post_lag_seconds", 0.2)
    runner = web.AppRunner(metrics.web_app(lambda: (True, {"status": "ok"})))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=")
                assert "threadbot_slack_post_lag_seconds_count 1.0" in await response.text()
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert (response.status, await response.json()) == (200, {"status": "ok"})
    finally:
        await runner.cleanup()


async def test_the_tasks_gauge_counts_the_loops_tasks_not_done() -> None:
    metrics = Metrics()
    metrics.count_tasks(asyncio.get_running_loop())
    before = _samples(metrics)[("threadbot_asyncio_tasks", ())]
    release = asyncio.Event()
    waiting = [asyncio.create_task(release.wait()) for _ in range(3)]
    assert _samples(metrics)[("threadbot_asyncio_tasks", ())] == before + 3
    release.set()
    await asyncio.gather(*waiting)
    assert _samples(metrics)[("threadbot_asyncio_tasks", ())] == before
