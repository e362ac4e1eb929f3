"""Helpers for the schedule tests: a settable clock, a recording engine stand-in, a core with a clock.

The scheduler keeps real time through APScheduler, but every decision (due,
late, missed, active hours) reads the injected clock, so tests move "now" by
hand instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
from conftest import MODEL, WAIT_S, RecordingOutput
from fakes.anthropic_api import FakeAnthropic

from bot.agent.engine import Delivery
from bot.app import Core, open_core
from bot.config import Settings
from bot.model.anthropic import AnthropicProvider
from bot.schedule import FireReport, Scheduler
from bot.types import TimezoneLookup


class FakeClock:
    """A "now" the test moves; starts at the real time so APScheduler and the clock agree at first."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class FakeWaker:
    """Stands in for `Engine.submit`: records what would start a turn or be injected."""

    def __init__(self) -> None:
        self.submits: list[tuple[str, str]] = []
        self.busy: set[str] = set()

    def submit(self, session_key: str, content: str, *, inbox_id: int | None = None) -> Delivery:
        self.submits.append((session_key, content))
        return Delivery.INJECTED if session_key in self.busy else Delivery.STARTED


class Fires:
    """Records a scheduler's FireReports and lets a test await them."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.reports: list[FireReport] = []
        self._changed = asyncio.Event()
        scheduler.subscribe(self._record)

    def _record(self, report: FireReport) -> None:
        self.reports.append(report)
        self._changed.set()

    def of(self, reminder_id: int) -> list[FireReport]:
        return [report for report in self.reports if report.reminder_id == reminder_id]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()


@contextlib.asynccontextmanager
async def schedule_core(
    fake: FakeAnthropic,
    settings: Settings,
    output: RecordingOutput,
    *,
    clock: FakeClock | None = None,
    user_timezone: TimezoneLookup | None = None,
) -> AsyncIterator[Core]:
    """`open_core` against the fake Messages API, with a clock and a time zone lookup."""
    client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=0)
    provider = AnthropicProvider(model=MODEL, max_tokens=1024, client=client)
    try:
        async with open_core(settings, output, provider=provider, clock=clock, user_timezone=user_timezone) as core:
            yield core
    finally:
        await client.close()


def zone_lookup(zones: dict[str, str | None]) -> TimezoneLookup:
    """A `TimezoneLookup` answering from a dict of session key → zone name."""

    async def lookup(session_key: str) -> str | None:
        return zones.get(session_key)

    return lookup


def texts(items: list[tuple[str, str]], session_key: str) -> list[str]:
    return [text for key, text in items if key == session_key]


def first(values: list[Any]) -> Any:
    assert values, "expected at least one"
    return values[0]
