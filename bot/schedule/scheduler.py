"""The one APScheduler of the process, rebuilt from the store at every start.

APScheduler only keeps time here; the store decides. Every pending wait or
reminder is one `DateTrigger` job at its row's `due_at` (a cron row's due time
moves after each run, and its job is added again), so the two can never
disagree, and a restart is just "read the pending rows, add their jobs". No
persistent job store: it would pickle callables, and it would be a second source
of truth.

Job defaults, on purpose:
- `misfire_grace_time=None`: APScheduler never drops a late job by itself (it
  would, silently, after 1 s by default); lateness is judged by `firing.py`
  from the row's due time against `BOT_MAX_LATENESS_S`.
- `coalesce=True`: a job behind by several runs (the heartbeat after a stall)
  runs once.
- `max_instances=1`: a slow heartbeat is never run twice at once.

Job bodies are wrapped: an exception is logged with the job id and goes no
further, so one bad job never stops the others. Deliveries are shielded from
cancellation, and `stop` waits for them. What a firing says in its thread (a
reminder's post, a notice) is owed by its claim; the edge delivers it (Slack's
outbox, across restarts and replicas) or has shown it already (a terminal).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bot.clock import utcnow
from bot.concurrency import TaskSet
from bot.schedule.firing import Clock, Firer, FireReport, Waker
from bot.store import NewReminder, Reminder, ReminderKind, ReminderStatus, Store
from bot.types import EngineOutput, SessionFilter

log = logging.getLogger(__name__)

JOB_DEFAULTS: dict[str, Any] = {"misfire_grace_time": None, "coalesce": True, "max_instances": 1}
STOP_GRACE_S = 5.0

FireListener = Callable[[FireReport], None]
ChangeListener = Callable[[int], None]
"""Told the id of a row this process added or cancelled (a cluster rings the other replicas)."""
Tick = Callable[[], Coroutine[Any, Any, object]]


class Periodic(Protocol):
    """Runs interval work once per tick: across a cluster's replicas (bot/cluster/ticks.py), or on this
    process's own timer (`OwnTimer`)."""

    def every(self, name: str, interval_s: float, work: Callable[[int], Awaitable[object]]) -> None: ...


class OwnTimer:
    """Interval jobs on this process's APScheduler: with no other process to share them, every tick is ours.

    The first run is one interval from now; the job defaults keep a slow one from running twice at once."""

    def __init__(self, aps: AsyncIOScheduler) -> None:
        self._aps = aps

    def every(self, name: str, interval_s: float, work: Callable[[int], Awaitable[object]]) -> None:
        trigger = IntervalTrigger(seconds=interval_s, timezone=UTC)
        self._aps.add_job(work, trigger, args=(0,), id=name, name=name, replace_existing=True)


class Scheduler:
    """Waits and reminders (rows in the store, one job each) plus interval jobs such as the heartbeat.

    `clock` is "now" for every decision; APScheduler is only told how far ahead a row is.
    `owns` limits it to the sessions of the edge that runs it (a console must not
    fire, and so swallow, a Slack thread's reminder); None means all.
    """

    def __init__(
        self,
        *,
        store: Store,
        waker: Waker,
        output: EngineOutput,
        zone: ZoneInfo,
        max_lateness_s: float,
        clock: Clock = utcnow,
        owns: SessionFilter | None = None,
        periodic: Periodic | None = None,
        max_self_wakes_per_day: int | None = None,
        on_change: ChangeListener | None = None,
    ) -> None:
        """`periodic` runs the interval jobs (a cluster's: once per tick cluster-wide; by default `OwnTimer`);
        `max_self_wakes_per_day` bounds the waits that wake one thread per UTC day (None: no bound);
        `on_change` is told of every row this process adds or cancels."""
        self._store = store
        self._clock = clock
        self._owns = owns
        self._firer = Firer(
            store=store,
            waker=waker,
            output=output,
            zone=zone,
            max_lateness_s=max_lateness_s,
            clock=clock,
            max_self_wakes_per_day=max_self_wakes_per_day,
        )
        self._aps = AsyncIOScheduler(timezone=UTC, job_defaults=JOB_DEFAULTS)
        self._aps.add_listener(self._on_skipped, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        self._periodic = periodic or OwnTimer(self._aps)
        self._listeners: list[FireListener] = []
        self._changes = [on_change] if on_change is not None else []
        self._deliveries = TaskSet()
        self._ticks = TaskSet()
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> int:
        """Add a job for every pending row, then start keeping time; returns how many rows."""
        pending = await self.sync()
        self._aps.start()
        log.info("scheduler started with %d pending waits and reminders", pending)
        return pending

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Start no more jobs, let deliveries under way finish, cancel the rest. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if not self._aps.running:
            return
        self._aps.pause()
        await self._ticks.close()
        await self._deliveries.close(grace_s)
        self._aps.shutdown(wait=False)
        await asyncio.sleep(0)  # AsyncIOScheduler.shutdown runs on the loop's next turn

    # -- reminders ------------------------------------------------------------------------

    async def add(
        self,
        *,
        session_key: str,
        kind: ReminderKind,
        text: str,
        due_at: datetime,
        cron: str | None = None,
        zone: str | None = None,
        max_pending: int | None = None,
    ) -> Reminder:
        """Store a wait or reminder for the person who asked in this session, and schedule it.

        With `max_pending`, `PendingLimitReached` when that person has that many pending already."""
        requester = await self.requester(session_key)
        item = NewReminder(session_key, kind, text, due_at, requester=requester, cron=cron, zone=zone)
        reminder = await self._store.add_reminder(item, max_pending=max_pending)
        self._schedule(reminder.id, reminder.due_at)
        self._changed(reminder.id)
        return reminder

    async def requester(self, session_key: str) -> str | None:
        """Whom a row added in this session is for: who spoke last, else who started the session."""
        session = await self._store.get_session(session_key)
        return session.person if session is not None else None

    async def count_wakes(self, session_key: str, *, since: datetime) -> int:
        return await self._store.count_wakes(session_key, since=since)

    async def cancel(self, reminder_id: int, *, session_key: str) -> Reminder | None:
        """Cancel a pending reminder of this session; None if it has none by that id."""
        cancelled = await self._store.cancel_reminder(reminder_id, session_key=session_key)
        if cancelled is not None:
            self._unschedule(cancelled.job_id)
            self._changed(cancelled.id)
        return cancelled

    async def track(self, reminder_id: int) -> None:
        """Follow a row another process added or cancelled: schedule it while it is pending, else drop it.

        In a cluster every replica schedules every row and the store's claim lets one of them fire it,
        so a row still fires when the replica that added it is gone."""
        reminder = await self._store.get_reminder(reminder_id)
        if reminder is not None and reminder.status is ReminderStatus.PENDING and self._owns_key(reminder.session_key):
            self._schedule(reminder.id, reminder.due_at)
        else:
            self._unschedule(f"reminder:{reminder_id}")

    async def sync(self) -> int:
        """Schedule every pending row (what `start` does first); returns how many."""
        pending = [r for r in await self._store.pending_reminders() if self._owns_key(r.session_key)]
        for reminder in pending:
            self._schedule(reminder.id, reminder.due_at)
        return len(pending)

    def _changed(self, reminder_id: int) -> None:
        for listener in self._changes:
            listener(reminder_id)

    async def pending(self, session_key: str) -> list[Reminder]:
        return await self._store.pending_reminders(session_key)

    async def get(self, reminder_id: int) -> Reminder | None:
        return await self._store.get_reminder(reminder_id)

    def now(self) -> datetime:
        return self._clock()

    async def fire(self, reminder_id: int) -> FireReport:
        """Fire a row now (what its job does when due); tests drive it with a controlled clock."""
        claim = await self._firer.claim(reminder_id)
        report = claim.report
        if report.next_due_at is not None:
            self._schedule(reminder_id, report.next_due_at)
        else:
            self._unschedule(f"reminder:{reminder_id}")
        try:
            shown = self._firer.deliver(claim)  # no await since the claim: a shutdown cannot come between them
            if shown:
                await self._store.settle_posts(shown)
        except Exception:
            # The claim owed its lines before the edge was told: they stay in the outbox for the next start.
            log.exception("handing reminder %d over failed; what it owes stays in the store", reminder_id)
        finally:
            for listener in self._listeners:
                try:
                    listener(report)
                except Exception:
                    log.exception("fire listener failed for reminder %d", reminder_id)
        return report

    def subscribe(self, listener: FireListener) -> None:
        """Be told of every firing (after the store was updated and the edge was handed the message)."""
        self._listeners.append(listener)

    # -- other jobs -----------------------------------------------------------------------

    def every(self, job_id: str, interval_s: float, tick: Tick) -> None:
        """Run `tick` every `interval_s` (first run one interval from now), never two at once."""
        self._periodic.every(job_id, interval_s, functools.partial(self._run_tick, job_id, tick))

    def next_run_time(self, job_id: str) -> datetime | None:
        """When APScheduler will next run a job; None if there is no such job."""
        job = self._aps.get_job(job_id)
        return None if job is None else job.next_run_time

    # -- internals ------------------------------------------------------------------------

    def _schedule(self, reminder_id: int, due_at: datetime) -> None:
        # APScheduler keeps the wall clock; our clock decides. A row due in 10 minutes by our
        # clock runs 10 minutes from now, and one already due runs at once (the same with the
        # real clock, and still right when a test moves the clock).
        delay_s = max(0.0, (due_at - self._clock()).total_seconds())
        run_date = datetime.now(UTC) + timedelta(seconds=delay_s)
        self._aps.add_job(
            self._run_reminder,
            DateTrigger(run_date=run_date, timezone=UTC),
            args=(reminder_id,),
            id=f"reminder:{reminder_id}",
            name=f"reminder:{reminder_id}",
            replace_existing=True,
        )

    def _owns_key(self, session_key: str) -> bool:
        return self._owns is None or self._owns(session_key)

    def _unschedule(self, job_id: str) -> None:
        with contextlib.suppress(JobLookupError):
            self._aps.remove_job(job_id)

    async def _run_reminder(self, reminder_id: int) -> None:
        job_id = f"reminder:{reminder_id}"
        task = self._deliveries.spawn(self.fire(reminder_id), f"scheduled job {job_id}")
        if task is not None:
            await asyncio.wait({task})  # a cancelled job (at shutdown) leaves the delivery to `stop`

    async def _run_tick(self, job_id: str, tick: Tick, _number: int) -> None:
        task = self._ticks.spawn(tick(), f"scheduled job {job_id}")
        # wait() rather than await: a tick that stop() cancels ends quietly, and APScheduler, which
        # runs this, would log that cancellation as the job's failure.
        if task is not None:
            await asyncio.wait({task})

    def _on_skipped(self, event: JobEvent) -> None:
        log.warning("job %s skipped a run: the previous one was still running, or it was missed", event.job_id)
