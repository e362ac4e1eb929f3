"""Counters, gauges and histograms, served in the Prometheus text format on `/metrics` next to `/healthz`.

Each `Metrics` has a `CollectorRegistry` of its own, never prometheus_client's global one: two daemons in
one process (the tests run several) must not count into each other's series or collide on a name. Gauges
and the per-model token counters are read when scraped, through callables, so nothing has to keep them
up to date; histograms are fed by `observe` at the few places where a duration ends.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

PREFIX = "threadbot_"

COUNTERS = {
    "events_received_total": "Slack events and interactions received",
    "events_duplicate_total": "events dropped as redeliveries or message/app_mention twins",
    "events_ignored_total": "events that were not for the bot (other bots, edits, chatter)",
    "events_denied_total": "messages refused by BOT_ALLOWED_USERS / BOT_ALLOWED_CHANNELS",
    "turns_started_total": "messages that started a turn",
    "turns_queued_total": "messages handed to the cluster for their thread's job (cluster mode)",
    "injections_total": "messages injected into a running turn",
    "cancels_total": "cancel requests (reactions, buttons, stop)",
    "approvals_decided_total": "tool calls approved or denied from Slack",
    "questions_answered_total": "ask_user questions answered from Slack (a button or a reply)",
    "slack_posts_total": "chat.postMessage calls that landed",
    "slack_errors_total": "Slack Web API calls that failed after retries",
    "socket_reconnects_total": "Socket Mode sessions opened after the first (drops, stale pings, silence)",
}

LABELLED_COUNTERS = {
    "feedback_total": ("answers rated with their feedback buttons, by rating (good, bad)", "rating"),
}
"""Counters with one label, counted as they happen (unlike `counter_family`'s, read when scraped)."""

SECONDS_FAST = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
SECONDS_QUEUE = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
SECONDS_MODEL = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
SECONDS_WORK = (0.01, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 180.0, 600.0, 1800.0)
SECONDS_OWED = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)


@dataclass(frozen=True, slots=True)
class HistogramSpec:
    help: str
    buckets: tuple[float, ...]
    label: str | None = None


HISTOGRAMS = {
    "turn_duration_seconds": HistogramSpec("a turn, from its start to its last save", SECONDS_WORK),
    "model_request_seconds": HistogramSpec(
        "a model request, from sending it to the end of its answer", SECONDS_MODEL, "model"
    ),
    "model_first_token_seconds": HistogramSpec(
        "a model request, from sending it to the first content of its answer", SECONDS_MODEL, "model"
    ),
    "tool_call_seconds": HistogramSpec("a tool call, from its start to its final state", SECONDS_WORK, "tool"),
    "event_ack_seconds": HistogramSpec(
        "a Slack event, from its arrival (a Socket Mode envelope, an HTTP request) to its ack", SECONDS_FAST
    ),
    "slack_edit_lag_seconds": HistogramSpec(
        "a message's new state, from first waiting to the chat.update that landed", SECONDS_QUEUE
    ),
    "slack_post_lag_seconds": HistogramSpec(
        "a post, from being queued to the chat.postMessage that landed", SECONDS_QUEUE
    ),
    "outbox_age_seconds": HistogramSpec(
        "a post owed in the outbox, from being owed (or found owed at start) to landing", SECONDS_OWED
    ),
}


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.counts: Tally[str] = Tally()
        """The counters' values, for tests and logs; the same numbers the scrape shows."""
        self._counters = {
            name: Counter(PREFIX + name.removesuffix("_total"), text, registry=self.registry)
            for name, text in COUNTERS.items()
        }
        self._labelled = {
            name: Counter(PREFIX + name.removesuffix("_total"), text, labelnames=(label,), registry=self.registry)
            for name, (text, label) in LABELLED_COUNTERS.items()
        }
        self._histograms = {
            name: Histogram(
                PREFIX + name,
                spec.help,
                labelnames=(spec.label,) if spec.label else (),
                buckets=spec.buckets,
                registry=self.registry,
            )
            for name, spec in HISTOGRAMS.items()
        }

    def inc(self, name: str, amount: int = 1) -> None:
        if name not in COUNTERS:
            raise KeyError(f"unknown counter {name}")
        self.counts[name] += amount
        self._counters[name].inc(amount)

    def inc_labelled(self, name: str, value: str, amount: int = 1) -> None:
        """Count into the series of `name` whose one label is `value`; `counts` keeps it as `name{value}`."""
        self.counts[f"{name}{{{value}}}"] += amount
        self._labelled[name].labels(value).inc(amount)

    def observe(self, name: str, seconds: float, label: str | None = None) -> None:
        """One duration into the histogram `name`; `label` is its one label's value (a model, a tool)."""
        histogram = self._histograms[name]
        (histogram.labels(label) if label is not None else histogram).observe(max(seconds, 0.0))

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        Gauge(PREFIX + name, help_text, registry=self.registry).set_function(lambda: float(read()))

    def count_tasks(self, loop: asyncio.AbstractEventLoop) -> None:
        """`asyncio_tasks`: the loop's tasks not done yet, counted when scraped. Work in flight comes and
        goes; a count that keeps rising under steady load is a task kept alive per event (bench/bench_soak.py
        watches it)."""
        self.gauge("asyncio_tasks", "asyncio tasks not done on the event loop", lambda: len(asyncio.all_tasks(loop)))

    def counter_family(self, name: str, help_text: str, label: str, read: Callable[[], Mapping[str, float]]) -> None:
        """A counter kept elsewhere, one series per value of `label` (e.g. tokens by model), read when scraped."""
        self.registry.register(_ReadCounters(PREFIX + name.removesuffix("_total"), help_text, label, read))

    def timed(self, name: str) -> Middleware:
        """An aiohttp middleware that observes each request's time to its response into the histogram `name`."""

        @web.middleware
        async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
            started = time.monotonic()
            try:
                return await handler(request)
            finally:
                self.observe(name, time.monotonic() - started)

        return timed

    def render(self) -> str:
        return generate_latest(self.registry).decode()

    def web_app(self, health: Callable[[], tuple[bool, dict[str, object]]]) -> web.Application:
        """`/healthz` (200 when `health` says ok, else 503; its report as JSON either way) and `/metrics`."""

        async def healthz(request: web.Request) -> web.Response:
            ok, report = health()
            return web.json_response(report, status=200 if ok else 503)

        async def metrics(request: web.Request) -> web.Response:
            return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/metrics", metrics)
        return app


class _ReadCounters(Collector):
    def __init__(self, name: str, help_text: str, label: str, read: Callable[[], Mapping[str, float]]) -> None:
        self._name, self._help, self._label, self._read = name, help_text, label, read

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self._name, self._help, labels=[self._label])]

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self._name, self._help, labels=[self._label])
        for value, count in self._read().items():
            family.add_metric([value], count)
        return [family]
