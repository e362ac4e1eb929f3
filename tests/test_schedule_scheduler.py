"""The scheduler on a real store and a real APScheduler: firing, once-only claims, restarts, misfires, errors.

The engine is stood in for by `FakeWaker` here (the engine itself is exercised in
test_schedule_engine.py). Sub-second schedules use the real clock; anything about
downtime moves a `FakeClock` instead of waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import RecordingOutput
from schedule_support import FakeClock, FakeWaker, Fires, texts

from bot.clock import utcnow
from bot.schedule import Scheduler
from bot.store import ReminderKind, ReminderStatus, SqliteStore, Store
from bot.types import OwedLine

KEY, OTHER = "test:sched", "test:other"
HOUR = 3600.0
MAX_LATENESS_S = 6 * HOUR

Factory = Callable[..., Scheduler]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await SqliteStore.open(tmp_path / "bot.db")
    await opened.ensure_session(KEY, {"requester": "U123"})
    await opened.ensure_session(OTHER)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def make(store: Store, output: RecordingOutput) -> AsyncIterator[Factory]:
    """Build schedulers on the test's store; every one is stopped at teardown."""
    made: list[Scheduler] = []

    def factory(*, clock: Callable[[], datetime] = utcnow, waker: FakeWaker | None = None, **kw: object) -> Scheduler:
        scheduler = Scheduler(
            store=store,
            waker=waker or FakeWaker(),
            output=kw.pop("out", output),  # type: ignore[arg-type]
            zone=ZoneInfo("Europe/Paris"),
            max_lateness_s=MAX_LATENESS_S,
            clock=clock,
        )
        made.append(scheduler)
        return scheduler

    yield factory
    for scheduler in made:
        await scheduler.stop()


def assert_runs_in(scheduler: Scheduler, reminder_id: int, seconds: float) -> None:
    """The job runs `seconds` from now by the scheduler's clock, i.e. that far ahead on the wall clock."""
    run_at = scheduler.next_run_time(f"reminder:{reminder_id}")
    assert run_at is not None
    assert abs((run_at - utcnow()).total_seconds() - seconds) < 5


async def add(scheduler: Scheduler, text: str, due_at: datetime, **kw: object) -> int:
    kind = kw.pop("kind", ReminderKind.REMINDER)
    reminder = await scheduler.add(session_key=KEY, kind=kind, text=text, due_at=due_at, **kw)  # type: ignore[arg-type]
    return reminder.id


async def test_a_reminder_fires_when_due_without_a_model_call(make: Factory, output: RecordingOutput) -> None:
    scheduler = make()
    assert await scheduler.start() == 0
    rid = await add(scheduler, "stand-up in 5 minutes", utcnow() + timedelta(seconds=0.1))
    await output.wait_for(lambda: bool(output.reminders))
    assert output.reminders == [(KEY, "stand-up in 5 minutes")]  # on time: no marker
    stored = await scheduler.get(rid)
    assert stored is not None and stored.status is ReminderStatus.FIRED and stored.requester == "U123"
    assert scheduler.next_run_time(f"reminder:{rid}") is None


async def test_a_wake_goes_to_the_engine(make: Factory, output: RecordingOutput) -> None:
    waker = FakeWaker()
    scheduler = make(waker=waker)
    fires = Fires(scheduler)
    await scheduler.start()
    rid = await add(scheduler, "check the build", utcnow() + timedelta(seconds=0.05), kind=ReminderKind.WAKE)
    await fires.wait_for(lambda: bool(fires.of(rid)))
    assert waker.submits == [(KEY, "[wait elapsed: check the build]")]
    assert output.reminders == [] and output.notices == []


async def test_firing_twice_at_once_delivers_once(make: Factory, output: RecordingOutput) -> None:
    clock = FakeClock()
    scheduler = make(clock=clock)
    await scheduler.start()
    rid = await add(scheduler, "once", clock.now + timedelta(hours=1))
    clock.advance(HOUR)
    reports = await asyncio.gather(*(scheduler.fire(rid) for _ in range(4)))
    assert sum(report.delivered for report in reports) == 1
    assert output.reminders == [(KEY, "once")]


async def test_cron_fires_each_run_then_stops_when_cancelled(make: Factory, output: RecordingOutput) -> None:
    clock = FakeClock(datetime(2026, 5, 4, 6, 58, tzinfo=UTC))  # a Monday, 08:58 in Paris
    scheduler = make(clock=clock)
    await scheduler.start()
    first_due = datetime(2026, 5, 4, 7, tzinfo=UTC)
    rid = await add(scheduler, "stand-up", first_due, cron="0 9 * * 1-5", zone="Europe/Paris")
    assert_runs_in(scheduler, rid, 120)

    clock.now = first_due + timedelta(seconds=0.2)
    report = await scheduler.fire(rid)
    assert report.delivered and report.next_due_at == first_due + timedelta(days=1)
    assert_runs_in(scheduler, rid, 86400 - 0.2)

    clock.now = first_due + timedelta(days=1, seconds=0.2)
    assert (await scheduler.fire(rid)).delivered
    assert output.reminders == [(KEY, "stand-up"), (KEY, "stand-up")]
    stored = await scheduler.get(rid)
    assert stored is not None and stored.status is ReminderStatus.PENDING
    assert stored.due_at == first_due + timedelta(days=2)

    assert await scheduler.cancel(rid, session_key=OTHER) is None  # not that session's
    assert await scheduler.cancel(rid, session_key=KEY) is not None
    assert scheduler.next_run_time(f"reminder:{rid}") is None
    clock.now = first_due + timedelta(days=2, seconds=0.2)
    assert not (await scheduler.fire(rid)).delivered
    assert len(output.reminders) == 2


async def test_a_timer_for_a_run_fired_elsewhere_waits_for_the_next_instead_of_firing_it_early(
    make: Factory, output: RecordingOutput
) -> None:
    """Two replicas' timers for one cron run: the second finds the row moved on to a run not due yet."""
    clock = FakeClock(datetime(2026, 5, 4, 6, 59, 30, tzinfo=UTC))
    one, other = make(clock=clock), make(clock=clock)
    await one.start()
    await other.start()
    first_due = datetime(2026, 5, 4, 7, tzinfo=UTC)
    rid = await add(one, "every minute", first_due, cron="* * * * *", zone="UTC")
    clock.now = first_due + timedelta(seconds=10)  # both were down when it came due
    assert (await one.fire(rid)).delivered
    report = await other.fire(rid)  # its timer was set for 07:00 too
    assert not report.delivered and report.next_due_at == first_due + timedelta(minutes=1)
    assert_runs_in(other, rid, 50)
    assert output.reminders == [(KEY, "every minute")]  # once, not the 07:01 run 50 s early


async def test_due_during_downtime_fires_once_after_restart_marked_late(
    make: Factory, output: RecordingOutput, store: Store
) -> None:
    clock = FakeClock()
    before = make(clock=clock)
    await before.start()
    rid = await add(before, "water the plants", clock.now + timedelta(minutes=5))
    wid = await add(before, "check the deploy", clock.now + timedelta(minutes=10), kind=ReminderKind.WAKE)
    await before.stop()

    clock.advance(HOUR)  # the daemon was down for an hour
    waker = FakeWaker()
    after = make(clock=clock, waker=waker)
    fires = Fires(after)
    assert await after.start() == 2
    await fires.wait_for(lambda: len(fires.reports) == 2)
    assert output.reminders == [(KEY, "water the plants (late by 55m)")]
    assert waker.submits == [(KEY, "[wait elapsed: check the deploy] (late by 50m)")]
    await after.stop()

    again = make(clock=clock, waker=waker)
    assert await again.start() == 0  # both are recorded as fired: nothing is delivered twice
    assert {(await store.get_reminder(i)).status for i in (rid, wid)} == {ReminderStatus.FIRED}  # type: ignore[union-attr]


async def test_a_cron_that_missed_several_runs_fires_once(make: Factory, output: RecordingOutput) -> None:
    clock = FakeClock(datetime(2026, 5, 1, 8, 59, tzinfo=UTC))
    before = make(clock=clock)
    await before.start()
    rid = await add(before, "hourly check", datetime(2026, 5, 1, 9, tzinfo=UTC), cron="0 * * * *", zone="UTC")
    await before.stop()

    clock.now = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)  # missed 09:00, 10:00, 11:00 and 12:00
    after = make(clock=clock)
    fires = Fires(after)
    await after.start()
    await fires.wait_for(lambda: bool(fires.of(rid)))
    assert output.reminders == [(KEY, "hourly check (late by 30m)")]
    assert fires.of(rid)[0].next_due_at == datetime(2026, 5, 1, 13, tzinfo=UTC)


async def test_beyond_max_lateness_is_reported_missed_not_delivered(make: Factory, output: RecordingOutput) -> None:
    clock = FakeClock(datetime(2026, 5, 1, 6, tzinfo=UTC))
    waker = FakeWaker()
    scheduler = make(clock=clock, waker=waker)
    await scheduler.start()
    rid = await add(scheduler, "pay the invoice", datetime(2026, 5, 1, 7, tzinfo=UTC))
    wid = await add(scheduler, "recheck", datetime(2026, 5, 1, 7, tzinfo=UTC), kind=ReminderKind.WAKE)
    clock.now = datetime(2026, 5, 1, 14, tzinfo=UTC)  # seven hours late, the maximum is six
    assert not (await scheduler.fire(rid)).delivered
    assert not (await scheduler.fire(wid)).delivered
    assert output.reminders == [] and waker.submits == []
    assert texts(output.notices, KEY) == [
        "⏰ A reminder was missed (due Fri 2026-05-01 09:00 CEST, 7h 0m ago, too late to deliver): pay the invoice",
        "⏰ A wait was missed (due Fri 2026-05-01 09:00 CEST, 7h 0m ago, too late to deliver): recheck",
    ]
    assert (await scheduler.get(rid)).status is ReminderStatus.MISSED  # type: ignore[union-attr]


async def test_a_missed_cron_run_is_reported_and_the_next_one_kept(make: Factory, output: RecordingOutput) -> None:
    clock = FakeClock(datetime(2026, 5, 1, 6, tzinfo=UTC))
    scheduler = make(clock=clock)
    await scheduler.start()
    rid = await add(scheduler, "daily", datetime(2026, 5, 1, 7, tzinfo=UTC), cron="0 9 * * *", zone="Europe/Paris")
    clock.now = datetime(2026, 5, 1, 14, tzinfo=UTC)
    report = await scheduler.fire(rid)
    assert not report.delivered and report.next_due_at == datetime(2026, 5, 2, 7, tzinfo=UTC)
    (notice,) = texts(output.notices, KEY)
    assert "missed" in notice and notice.endswith("daily — it repeats; next: Sat 2026-05-02 09:00 CEST")


class ExplodingOutput(RecordingOutput):
    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        if any(line.text == "boom" for _, line in lines):
            raise RuntimeError("the edge fell over")
        return super().lines_owed(lines)


async def test_a_job_raising_does_not_stop_later_jobs(make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    exploding = ExplodingOutput()
    scheduler = make(out=exploding)
    ticked = asyncio.Event()

    async def bad_tick() -> None:
        ticked.set()
        raise ValueError("tick failed")

    scheduler.every("bad-tick", 0.05, bad_tick)
    await scheduler.start()
    now = utcnow()
    bad = await add(scheduler, "boom", now + timedelta(seconds=0.05))
    await add(scheduler, "still here", now + timedelta(seconds=0.15))
    await exploding.wait_for(lambda: bool(exploding.reminders))
    await asyncio.wait_for(ticked.wait(), 5)
    assert exploding.reminders == [(KEY, "still here")]
    failures = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(failure.startswith(f"handing reminder {bad} over failed") for failure in failures)
    assert "scheduled job bad-tick failed" in failures
    assert scheduler.next_run_time("bad-tick") is not None  # the interval job lives on


async def test_a_tick_cut_short_by_stop_logs_no_error(make: Factory, caplog: pytest.LogCaptureFixture) -> None:
    """A stop cancels a running tick (a heartbeat turn, say): that is the plan, not a failure to report."""
    scheduler = make()
    started = asyncio.Event()

    async def long_tick() -> None:
        started.set()
        await asyncio.sleep(3600)

    scheduler.every("long-tick", 0.05, long_tick)
    await scheduler.start()
    await asyncio.wait_for(started.wait(), 5)
    await scheduler.stop(grace_s=0)
    await asyncio.sleep(0)  # APScheduler's own task, which ran the tick, finishes here
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_stop_is_idempotent_and_start_needs_no_rows(make: Factory) -> None:
    scheduler = make()
    assert await scheduler.start() == 0
    await scheduler.stop()
    await scheduler.stop()


async def test_a_cron_whose_delivery_fails_keeps_its_next_run(make: Factory) -> None:
    exploding = ExplodingOutput()
    clock = FakeClock(datetime(2026, 5, 1, 6, 59, tzinfo=UTC))
    scheduler = make(out=exploding, clock=clock)
    await scheduler.start()
    rid = await add(scheduler, "boom", datetime(2026, 5, 1, 7, tzinfo=UTC), cron="0 7 * * *", zone="UTC")
    clock.now = datetime(2026, 5, 1, 7, 0, 1, tzinfo=UTC)
    report = await scheduler.fire(rid)  # the edge's failure is the post's, not the schedule's
    assert report.next_due_at == datetime(2026, 5, 2, 7, tzinfo=UTC)
    assert_runs_in(scheduler, rid, 86400 - 1)


@pytest.mark.parametrize(
    ("expr", "zone", "due", "back", "next_due"),
    [
        # Due 02:30 CEST (00:30Z), back at 02:10 CET (01:10Z), when 02:30 is on the clock again.
        (
            "30 2 * * *",
            "Europe/Berlin",
            datetime(2026, 10, 25, 0, 30),
            datetime(2026, 10, 25, 1, 10),
            datetime(2026, 10, 26, 1, 30),
        ),
        (
            "30 1 * * *",
            "America/New_York",
            datetime(2026, 11, 1, 5, 30),
            datetime(2026, 11, 1, 6, 10),
            datetime(2026, 11, 2, 6, 30),
        ),
        (
            "30 2 * * *",
            "Australia/Sydney",
            datetime(2026, 4, 4, 15, 30),
            datetime(2026, 4, 4, 16, 10),
            datetime(2026, 4, 5, 16, 30),
        ),
    ],
)
async def test_a_late_run_in_the_repeated_hour_does_not_run_again_in_it(
    make: Factory, output: RecordingOutput, expr: str, zone: str, due: datetime, back: datetime, next_due: datetime
) -> None:
    clock = FakeClock(due.replace(tzinfo=UTC) - timedelta(hours=1))
    before = make(clock=clock)
    await before.start()
    rid = await add(before, "nightly", due.replace(tzinfo=UTC), cron=expr, zone=zone)
    await before.stop()

    clock.now = back.replace(tzinfo=UTC)
    after = make(clock=clock)
    await after.start()
    report = await after.fire(rid)
    assert output.reminders == [(KEY, "nightly (late by 40m)")]
    assert report.next_due_at == next_due.replace(tzinfo=UTC)
    assert_runs_in(after, rid, (next_due - back).total_seconds())


async def test_a_cron_years_apart_is_kept_running(make: Factory, output: RecordingOutput) -> None:
    clock = FakeClock(datetime(2026, 10, 31, 23, 59, tzinfo=UTC))
    scheduler = make(clock=clock)
    await scheduler.start()
    due = datetime(2026, 11, 1, tzinfo=UTC)  # 1 November on a Sunday; the next one is in 2037
    rid = await add(scheduler, "rare", due, cron="0 0 1 11 */7", zone="UTC")
    clock.now = due + timedelta(seconds=0.2)
    report = await scheduler.fire(rid)
    assert report.delivered and report.next_due_at == datetime(2037, 11, 1, tzinfo=UTC)
    assert output.notices == []


async def test_a_cron_with_no_run_ahead_ends_and_says_so(
    make: Factory, output: RecordingOutput, caplog: pytest.LogCaptureFixture
) -> None:
    due = datetime(9998, 1, 1, tzinfo=UTC)  # the last 1 January the calendar here can hold
    clock = FakeClock(due - timedelta(seconds=1))
    scheduler = make(clock=clock)
    await scheduler.start()
    rid = await add(scheduler, "new year", due, cron="0 0 1 1 *", zone="UTC")
    clock.now = due + timedelta(seconds=0.2)
    with caplog.at_level(logging.WARNING, logger="bot.schedule.firing"):
        report = await scheduler.fire(rid)
    assert report.delivered and report.next_due_at is None
    assert output.reminders == [(KEY, "new year")]
    assert texts(output.notices, KEY) == [
        "⏰ This repeating reminder stops here, '0 0 1 1 *' has no later run: new year"
    ]
    assert (await scheduler.get(rid)).status is ReminderStatus.FIRED  # type: ignore[union-attr]
    assert scheduler.next_run_time(f"reminder:{rid}") is None
    assert f"cron reminder {rid} of {KEY} ends" in caplog.text


async def test_a_stored_cron_that_no_longer_parses_fires_once_and_says_why(
    make: Factory, output: RecordingOutput
) -> None:
    due = datetime(2026, 5, 1, 7, 3, tzinfo=UTC)
    clock = FakeClock(due - timedelta(seconds=1))
    scheduler = make(clock=clock)
    await scheduler.start()
    rid = await add(scheduler, "every hour", due, cron="\u0663 * * * *", zone="UTC")  # accepted before ASCII only
    clock.now = due + timedelta(seconds=0.2)
    report = await scheduler.fire(rid)
    assert report.delivered and output.reminders == [(KEY, "every hour")]
    (notice,) = texts(output.notices, KEY)
    assert notice.startswith("⏰ This repeating reminder stops here, its cron is not valid any more: cron takes ASCII")
    assert (await scheduler.get(rid)).status is ReminderStatus.FIRED  # type: ignore[union-attr]


async def test_a_post_the_edge_fails_stays_owed_and_is_retried(make: Factory, store: Store) -> None:
    """The claim owed the post before the edge was told: an edge that falls over leaves it in the outbox."""
    exploding = ExplodingOutput()
    scheduler = make(out=exploding)
    rid = await add(scheduler, "boom", utcnow())
    await scheduler.fire(rid)
    assert [m.line.text for m in await store.owed_messages() if m.line is not None] == ["boom"]
