"""Scheduler benchmark: start-up with 10,000 pending reminders, and firing lateness under a burst.

Run: `python bench/bench_schedule.py`. Prints figures, asserts nothing (targets from issue 5):
- start-up with 10,000 pending reminders in the store: ≤ 2 s (beside it, the time just to read the rows);
- lateness of 1,000 reminders due within the same 10 s: p99 ≤ 200 ms, measured at the job (when its body
  starts, before the store claim and any edge I/O); the lateness at the hand-off to the edge (after the
  claim) is printed too.
Everything runs on a real store in a temporary directory and a real AsyncIOScheduler; the edge is a no-op.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.agent.engine import Delivery
from bot.clock import utcnow
from bot.schedule import FireReport, Scheduler
from bot.store import NewReminder, ReminderKind, SqliteStore, Store
from bot.types import OwedLine

STARTUP_ROWS = 10_000
BURST_ROWS = 1_000
BURST_WINDOW_S = 10.0
BURST_LEAD_S = 2.0
SESSIONS = 100
STARTUP_TARGET_S = 2.0
P99_TARGET_MS = 200.0


class NullEdge:
    """An `EngineOutput` that does nothing but note when a reminder was handed to it."""

    def __init__(self) -> None:
        self.handed: dict[str, datetime] = {}

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        for _, line in lines:
            self.handed[line.text] = utcnow()
        return True

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class NullEngine:
    def submit(self, session_key: str, content: str, *, inbox_id: int | None = None) -> Delivery:
        return Delivery.STARTED


def scheduler_on(store: Store, edge: NullEdge) -> Scheduler:
    return Scheduler(store=store, waker=NullEngine(), output=edge, zone=ZoneInfo("UTC"), max_lateness_s=6 * 3600)


async def seeded_store(path: Path, dues: list[datetime]) -> Store:
    store = await SqliteStore.open(path)
    keys = [f"bench:{n}" for n in range(SESSIONS)]
    for key in keys:
        await store.ensure_session(key, {"requester": "UBENCH"})
    items = [
        NewReminder(keys[n % SESSIONS], ReminderKind.REMINDER, f"reminder {n}", due, requester="UBENCH")
        for n, due in enumerate(dues)
    ]
    await store.add_reminders(items)
    return store


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def bench_startup(directory: Path) -> tuple[float, float]:
    now = utcnow()
    dues = [now + timedelta(seconds=random.uniform(3600, 30 * 86400)) for _ in range(STARTUP_ROWS)]
    store = await seeded_store(directory / "startup.db", dues)
    try:
        started = time.perf_counter()
        rows = await store.pending_reminders()
        read_s = time.perf_counter() - started
        assert len(rows) == STARTUP_ROWS
        scheduler = scheduler_on(store, NullEdge())
        started = time.perf_counter()
        count = await scheduler.start()
        start_s = time.perf_counter() - started
        assert count == STARTUP_ROWS
        await scheduler.stop()
    finally:
        await store.close()
    return read_s, start_s


async def bench_burst(directory: Path) -> tuple[list[float], list[float]]:
    window_start = utcnow() + timedelta(seconds=BURST_LEAD_S)
    dues = [window_start + timedelta(seconds=random.uniform(0, BURST_WINDOW_S)) for _ in range(BURST_ROWS)]
    store = await seeded_store(directory / "burst.db", dues)
    edge = NullEdge()
    at_job: list[float] = []
    done = asyncio.Event()

    def on_fire(report: FireReport) -> None:
        if report.lateness_s is not None:
            at_job.append(report.lateness_s * 1000)
        if len(at_job) == BURST_ROWS:
            done.set()

    scheduler = scheduler_on(store, edge)
    scheduler.subscribe(on_fire)
    try:
        await scheduler.start()
        await asyncio.wait_for(done.wait(), BURST_LEAD_S + BURST_WINDOW_S + 30)
    finally:
        await scheduler.stop()
        await store.close()
    at_edge = [(edge.handed[f"reminder {n}"] - due).total_seconds() * 1000 for n, due in enumerate(dues)]
    return at_job, at_edge


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED TARGET"


def lateness_line(label: str, values: list[float]) -> str:
    p50, p99 = statistics.median(values), percentile(values, 99)
    return f"  {label:<44} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   max {max(values):7.1f} ms"


async def main() -> None:
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-schedule-") as tmp:
        directory = Path(tmp)
        read_s, start_s = await bench_startup(directory)
        print(f"scheduler start-up with {STARTUP_ROWS:,} pending reminders")
        print(f"  {'read the rows only (baseline)':<44} {read_s:6.3f} s")
        print(
            f"  {'start: read + build every job':<44} {start_s:6.3f} s   target ≤ {STARTUP_TARGET_S:g} s   "
            f"{verdict(start_s <= STARTUP_TARGET_S)}"
        )
        at_job, at_edge = await bench_burst(directory)
        print(f"firing lateness, {BURST_ROWS:,} reminders due within the same {BURST_WINDOW_S:g} s")
        print(
            lateness_line("at the job (before the claim and the edge)", at_job)
            + f"   target p99 ≤ {P99_TARGET_MS:g} ms   {verdict(percentile(at_job, 99) <= P99_TARGET_MS)}"
        )
        print(lateness_line("at the edge hand-off (after the store claim)", at_edge))
    print(f"total run time {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
