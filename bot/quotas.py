"""Per-person limits: what one user (or one thread, or one channel) may make the daemon do.

The limits themselves are settings (`Settings.quotas`); this module holds them as one value the
engine's parts share, the UTC day they are counted over, and the error a tool raises when one is
hit. That error carries two texts: the tool result tells the model which limit it hit and its value
(so it stops retrying), and the line for the thread tells the people there, in their words.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tools.base import ToolError


@dataclass(frozen=True, slots=True)
class Quotas:
    """The limits, with the stated defaults of `bot/config.py`; a budget of None is no budget."""

    max_reminders_per_user: int = 50
    min_cron_interval_s: float = 60.0
    max_reminder_chars: int = 2000
    min_wait_s: float = 1.0
    max_concurrent_tools_per_user: int = 8
    max_self_wakes_per_day: int = 48
    daily_tokens_per_user: int | None = None
    daily_tokens_per_channel: int | None = None


class QuotaExceeded(ToolError):
    """A tool refused because a limit was hit: `str()` is the model's result, `line` the thread's."""

    def __init__(self, result: str, line: str) -> None:
        super().__init__(result)
        self.line = line


def day_start(moment: datetime) -> datetime:
    """The UTC midnight that starts `moment`'s day: every daily count runs from there."""
    utc = moment.astimezone(UTC)
    return datetime(utc.year, utc.month, utc.day, tzinfo=UTC)


def next_reset(moment: datetime) -> datetime:
    """When a daily count starts again: the next UTC midnight."""
    return day_start(moment) + timedelta(days=1)


def reset_text(moment: datetime) -> str:
    """`resets at 00:00 UTC (in 3h 12m)`: when and how soon, for a line in the thread."""
    left_s = int((next_reset(moment) - moment).total_seconds())
    hours, minutes = divmod(max(left_s, 60) // 60, 60)
    return f"resets at 00:00 UTC (in {hours}h {minutes:02d}m)"


def self_wakes_reason(woken: int, limit: int, now: datetime) -> str:
    """Why a thread's agent may not wake itself again today (for a tool result and a thread line alike)."""
    return (
        f"this thread has woken itself {woken} times today, the most BOT_MAX_SELF_WAKES_PER_DAY ({limit}) "
        f"allows; the count {reset_text(now)}"
    )
