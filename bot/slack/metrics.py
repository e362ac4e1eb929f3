"""A few counters and gauges, served as Prometheus text on `/metrics` next to `/healthz`.

Hand-written on purpose: a dozen numbers do not need a client library, and the text
format is stable and simple. Gauges are read when scraped, through callables, so
nothing has to keep them up to date.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from aiohttp import web

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


class Metrics:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self._families: dict[str, tuple[str, str, Callable[[], Mapping[str, float]]]] = {}

    def inc(self, name: str, amount: int = 1) -> None:
        if name not in COUNTERS:
            raise KeyError(f"unknown counter {name}")
        self.counts[name] += amount

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self._gauges[name] = (help_text, read)

    def counter_family(self, name: str, help_text: str, label: str, read: Callable[[], Mapping[str, float]]) -> None:
        """A counter kept elsewhere, one series per value of `label` (e.g. tokens by model), read when scraped."""
        self._families[name] = (help_text, label, read)

    def render(self) -> str:
        lines: list[str] = []
        for name, help_text in COUNTERS.items():
            lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} counter"]
            lines.append(f"{PREFIX}{name} {self.counts[name]}")
        for name, (help_text, read) in self._gauges.items():
            lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} gauge"]
            lines.append(f"{PREFIX}{name} {float(read()):g}")
        for name, (help_text, label, read_family) in self._families.items():
            lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} counter"]
            lines += [f'{PREFIX}{name}{{{label}="{value}"}} {count:g}' for value, count in read_family().items()]
        return "\n".join(lines) + "\n"

    def web_app(self, health: Callable[[], tuple[bool, dict[str, object]]]) -> web.Application:
        """`/healthz` (200 when `health` says ok, else 503; its report as JSON either way) and `/metrics`."""

        async def healthz(request: web.Request) -> web.Response:
            ok, report = health()
            return web.json_response(report, status=200 if ok else 503)

        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text=self.render(), content_type="text/plain", charset="utf-8")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/metrics", metrics)
        return app
