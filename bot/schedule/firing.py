"""What happens when a wait or reminder comes due: judge it, claim it, then deliver it.

The order is the point. The row is claimed in the store (a compare-and-set on
its due time) before anything is delivered, so a fire happens once even if two
jobs, or two processes, reach it together, and a clean restart never repeats
one. The claim writes what it owes in the same transaction: a reminder's post
and any notice for the thread, as lines in the outbox that the edge delivers
(and, for Slack, keeps retrying across restarts), and a wait's note, which goes
to the session's inbox like a message someone sent.
A reminder is posted as is (no model call); a wait wakes its session
through the engine, which starts a turn if the session is idle and injects the
note if one is running. Too late (beyond `max_lateness_s`) means a notice that
it was missed instead; a cron that missed several runs fires once, for the
latest of them. A wait that comes due after its thread has woken itself
`BOT_MAX_SELF_WAKES_PER_DAY` times that UTC day is claimed as missed, counted
inside the claim, and the thread is told why instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo

from bot.agent.engine import Delivery
from bot.quotas import day_start, self_wakes_reason
from bot.schedule.cron import CronSchedule
from bot.schedule.cron_runs import latest_run, next_run
from bot.schedule.timing import Punctuality, Verdict, format_duration, judge, local_text
from bot.store import Reminder, ReminderKind, ReminderStatus, Store, WakeLimit
from bot.types import EngineOutput

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


class Waker(Protocol):
    """The engine's front door, as far as a wake-up needs it (`Engine.submit`)."""

    def submit(self, session_key: str, content: str, *, inbox_id: int | None = None) -> Delivery: ...


def wake_note(reason: str) -> str:
    return f"[wait elapsed: {reason}]"


@dataclass(frozen=True, slots=True)
class FireReport:
    """The outcome of one firing, for listeners (metrics, tests, the benchmark)."""

    reminder_id: int
    started_at: datetime
    """The clock when the job began, before any store or edge work."""
    due_at: datetime | None = None
    """The run that was judged (for a cron, the latest one that came due)."""
    verdict: Verdict | None = None
    """None when nothing was delivered or reported: not pending any more, or another firing won."""
    next_due_at: datetime | None = None
    """When the row is due next if it is still pending (a cron, or a row another process moved)."""
    refused: bool = False
    """On time, but a quota kept it from being delivered (the thread was told why)."""

    @property
    def lateness_s(self) -> float | None:
        return None if self.due_at is None else (self.started_at - self.due_at).total_seconds()

    @property
    def delivered(self) -> bool:
        return self.verdict is not None and self.verdict.punctuality is not Punctuality.MISSED and not self.refused


@dataclass(frozen=True, slots=True)
class Claim:
    """A firing decided and recorded; `reminder` is set only when this firing won and has something to hand
    over: its `owed_lines` (the post, the notices) and, for a wait, its `note` for the session."""

    report: FireReport
    reminder: Reminder | None = None
    note: str | None = None
    """A wait's note, stored in the session's inbox by the claim; None for a reminder, a miss or a refusal."""


class Firer:
    """Fires in two steps, `claim` (async: the store, which owes everything the firing says) then `deliver`
    (sync: the edge or engine), so the caller can schedule the next run in between and a failing edge never
    loses a cron's next run."""

    def __init__(
        self,
        *,
        store: Store,
        waker: Waker,
        output: EngineOutput,
        zone: ZoneInfo,
        max_lateness_s: float,
        clock: Clock,
        max_self_wakes_per_day: int | None = None,
    ) -> None:
        """`max_self_wakes_per_day` bounds the waits one thread's agent is woken by per UTC day (None: no bound)."""
        self._max_wakes = max_self_wakes_per_day
        self._store = store
        self._waker = waker
        self._output = output
        self._zone = zone
        self._max_lateness_s = max_lateness_s
        self._clock = clock

    async def claim(self, reminder_id: int) -> Claim:
        """Judge the row and record the outcome in the store; nothing is delivered yet."""
        started = self._clock()
        reminder = await self._store.get_reminder(reminder_id)
        if reminder is None or reminder.status is not ReminderStatus.PENDING:
            return Claim(FireReport(reminder_id, started))
        if reminder.due_at > started:
            # A timer set for a run that another replica's timer fired first: the row has moved on to
            # its next run, which is not due yet: early is not on time, so nothing is posted now.
            return Claim(FireReport(reminder_id, started, next_due_at=reminder.due_at))
        if reminder.cron is not None:
            return await self._claim_cron(reminder, started)
        verdict = judge(reminder.due_at, started, max_lateness_s=self._max_lateness_s)
        outcome = ReminderStatus.MISSED if verdict.punctuality is Punctuality.MISSED else ReminderStatus.FIRED
        owed = _owed(reminder, verdict)
        limit = None
        if reminder.kind is ReminderKind.WAKE and self._max_wakes is not None:
            limit = WakeLimit(self._max_wakes, day_start(started), _wake_refusal(reminder, started, self._max_wakes))
        claimed = await self._store.claim_reminder(
            reminder_id,
            due_at=reminder.due_at,
            outcome=outcome,
            at=started,
            owed=owed,
            notices=self._missed(reminder, reminder.due_at, verdict, None),
            wake_limit=limit,
        )
        if claimed is None:
            return await self._lost(reminder_id, started)
        refused = outcome is ReminderStatus.FIRED and claimed.status is ReminderStatus.MISSED
        if refused:
            # Ended unfired by the day's limit: it starts no turn, so it is not one of the day's wakes either.
            log.warning(
                "wait %d of %s not delivered: %d self-wakes today", reminder.id, reminder.session_key, self._max_wakes
            )
        report = FireReport(reminder_id, started, reminder.due_at, verdict, refused=refused)
        return Claim(report, claimed, _note(claimed, None if refused else owed))

    def deliver(self, claim: Claim) -> list[int]:
        """Hand a won claim over: a wait's note to the engine, the lines it owed to the edge. Returns the ids
        of the lines the edge has shown already (a terminal), whose debt the caller settles."""
        reminder, report = claim.reminder, claim.report
        if reminder is None or report.verdict is None or report.due_at is None:
            return []
        key, note = reminder.session_key, claim.note
        if note is not None and self._waker.submit(key, note, inbox_id=reminder.inbox_id) is Delivery.REFUSED:
            log.warning("wait %d of %s came due during a shutdown; the next start delivers it", reminder.id, key)
        lines = list(reminder.owed_lines)
        if lines and self._output.lines_owed(lines):
            return [line_id for line_id, _ in lines]
        return []

    async def _claim_cron(self, reminder: Reminder, started: datetime) -> Claim:
        assert reminder.cron is not None
        zone = ZoneInfo(reminder.zone or self._zone.key)
        try:
            schedule = CronSchedule.parse(reminder.cron)
        except ValueError as exc:  # stored by an older version that accepted it (`٣ * * * *`)
            return await self._end_cron(reminder, started, reminder.due_at, f"its cron is not valid any more: {exc}")
        due = latest_run(schedule, zone, due=reminder.due_at, now=started, horizon_s=self._max_lateness_s)
        verdict = judge(due, started, max_lateness_s=self._max_lateness_s)
        following = next_run(schedule, zone, max(started, due))
        if following is None:
            return await self._end_cron(reminder, started, due, f"{schedule.expr!r} has no later run")
        fired_at = started if verdict.punctuality is not Punctuality.MISSED else None
        owed = _owed(reminder, verdict)
        advanced = await self._store.advance_reminder(
            reminder.id,
            due_at=reminder.due_at,
            next_due_at=following,
            fired_at=fired_at,
            owed=owed,
            notices=self._missed(reminder, due, verdict, following),
        )
        if advanced is None:
            return await self._lost(reminder.id, started)
        report = FireReport(reminder.id, started, due, verdict, next_due_at=following)
        return Claim(report, advanced, _note(advanced, owed))

    async def _end_cron(self, reminder: Reminder, started: datetime, due: datetime, why: str) -> Claim:
        """This run of a cron row is its last: it is delivered (or reported missed) like any other, the row
        ends, and the thread and the log say why, so a repeating reminder never just falls silent."""
        verdict = judge(due, started, max_lateness_s=self._max_lateness_s)
        outcome = ReminderStatus.MISSED if verdict.punctuality is Punctuality.MISSED else ReminderStatus.FIRED
        owed = _owed(reminder, verdict)
        farewell = f"⏰ This repeating reminder stops here, {why}: {reminder.text}"
        notices = [*self._missed(reminder, due, verdict, None), farewell]
        ended = await self._store.end_cron_reminder(
            reminder.id, due_at=reminder.due_at, outcome=outcome, at=started, owed=owed, notices=notices
        )
        if ended is None:
            return await self._lost(reminder.id, started)
        log.warning("cron reminder %d of %s ends: %s", reminder.id, reminder.session_key, why)
        return Claim(FireReport(reminder.id, started, due, verdict), ended, _note(ended, owed))

    async def _lost(self, reminder_id: int, started: datetime) -> Claim:
        """Another firing (or a cancel) changed the row first; say when it is due now, if still pending."""
        current = await self._store.get_reminder(reminder_id)
        next_due = current.due_at if current is not None and current.status is ReminderStatus.PENDING else None
        return Claim(FireReport(reminder_id, started, next_due_at=next_due))

    def _missed(self, reminder: Reminder, due: datetime, verdict: Verdict, following: datetime | None) -> list[str]:
        """The notice a missed run owes its thread (none for a run on time)."""
        if verdict.punctuality is not Punctuality.MISSED:
            return []
        zone = ZoneInfo(reminder.zone or self._zone.key)
        what = "A wait" if reminder.kind is ReminderKind.WAKE else "A reminder"
        late = format_duration(verdict.lateness_s, coarse=True)
        text = f"⏰ {what} was missed (due {local_text(due, zone)}, {late} ago, too late to deliver): {reminder.text}"
        if following is not None:
            text += f" — it repeats; next: {local_text(following, zone)}"
        return [text]


def _wake_refusal(reminder: Reminder, started: datetime, limit: int) -> str:
    """The thread's line for a wait that comes due after the day's last self-wake."""
    why = self_wakes_reason(limit, limit, started)
    return f"🚦 A wait came due but did not wake me: {why}. It was: {reminder.text}"


def _note(reminder: Reminder, owed: str | None) -> str | None:
    """What a won claim hands the engine: a wait's note (a reminder's words are a line, owed to the edge)."""
    return owed if reminder.kind is ReminderKind.WAKE else None


def _owed(reminder: Reminder, verdict: Verdict) -> str | None:
    """What a firing with this verdict delivers; None when it is missed (a notice says so instead)."""
    if verdict.punctuality is Punctuality.MISSED:
        return None
    text = wake_note(reminder.text) if reminder.kind is ReminderKind.WAKE else reminder.text
    return text + verdict.marker
