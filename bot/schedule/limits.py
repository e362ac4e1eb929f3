"""The schedule's quotas, checked by the wait and reminder tools before anything is stored.

Each check raises `QuotaExceeded`: its text is the tool result (which limit, its value, its
variable, what to do instead) and its `line` what the thread is told. The per-person count of
pending rows is the store's (`add_reminders(max_pending=…)`), inside the write, and the count of a
thread's self-wakes comes from the waits that fired today, so neither resets with a restart.
"""

from __future__ import annotations

from datetime import datetime

from bot.quotas import QuotaExceeded, Quotas, day_start, self_wakes_reason
from bot.schedule.cron import CronSchedule
from bot.schedule.scheduler import Scheduler
from bot.schedule.timing import format_duration

LINE = "🚦 {what} was refused: {why}."


def check_text(text: str, quotas: Quotas, *, what: str) -> None:
    """A reminder's text (or a wait's reason) within BOT_MAX_REMINDER_CHARS."""
    limit = quotas.max_reminder_chars
    if len(text) > limit:
        why = f"its text is {len(text):,} characters, more than the {limit:,} BOT_MAX_REMINDER_CHARS allows"
        raise QuotaExceeded(f"not scheduled: {why}; shorten it", LINE.format(what=what, why=why))


def check_cron(schedule: CronSchedule, quotas: Quotas) -> None:
    """A repeating reminder no more often than BOT_MIN_CRON_INTERVAL_S."""
    gap_s, limit_s = schedule.shortest_gap_s, quotas.min_cron_interval_s
    if gap_s < limit_s:
        why = (
            f"{schedule.expr!r} can run {format_duration(gap_s)} apart, more often than once every "
            f"{format_duration(limit_s)} (BOT_MIN_CRON_INTERVAL_S)"
        )
        raise QuotaExceeded(f"not scheduled: {why}; choose a sparser schedule", LINE.format(what="A reminder", why=why))


def check_wait_length(seconds: float, quotas: Quotas) -> None:
    """A wait no shorter than BOT_MIN_WAIT_S: shorter is a busy loop of turns, not a wait."""
    if seconds < quotas.min_wait_s:
        why = (
            f"a wait of {format_duration(seconds)} is shorter than the minimum of "
            f"{format_duration(quotas.min_wait_s)} (BOT_MIN_WAIT_S)"
        )
        raise QuotaExceeded(f"not registered: {why}", LINE.format(what="A wait", why=why))


async def check_self_wakes(scheduler: Scheduler, session_key: str, due_at: datetime, quotas: Quotas) -> None:
    """No new wait due today once the thread has woken itself BOT_MAX_SELF_WAKES_PER_DAY times today."""
    now = scheduler.now()
    if day_start(due_at) != day_start(now):
        return  # it wakes on a later day, which has its own count
    woken = await scheduler.count_wakes(session_key, since=day_start(now))
    if woken >= quotas.max_self_wakes_per_day:
        why = self_wakes_reason(woken, quotas.max_self_wakes_per_day, now)
        raise QuotaExceeded(f"not registered: {why}", LINE.format(what="A wait", why=why))


def pending_refusal(pending: int, requester: str | None, quotas: Quotas, *, what: str) -> QuotaExceeded:
    """What `PendingLimitReached` becomes: who has how many, and the limit."""
    who = requester or "this conversation"
    why = (
        f"{who} already has {pending} pending reminders and waits, the most "
        f"BOT_MAX_REMINDERS_PER_USER ({quotas.max_reminders_per_user}) allows"
    )
    return QuotaExceeded(
        f"not scheduled: {why}; cancel one (list_reminders, cancel_reminder) or wait for one to come due",
        LINE.format(what=what, why=why),
    )
