"""The virtual wait tools: `wait_for` and `wait_until` register a wake-up and return at once.

Nothing sleeps: the call finishes immediately with "wait registered: …", the
turn goes on (or ends), and when the time comes the scheduler hands the session
`[wait elapsed: REASON]`, as a new turn if it is idle or as a mid-turn note if
it is busy. A wait is a reminder row of kind `wake`, so `list_reminders` and
`cancel_reminder` see it too.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bot.quotas import Quotas
from bot.schedule.firing import wake_note
from bot.schedule.limits import check_self_wakes, check_text, check_wait_length, pending_refusal
from bot.schedule.scheduler import Scheduler
from bot.schedule.timing import format_duration, iso_utc, parse_timestamp
from bot.store import PendingLimitReached, ReminderKind
from tools.base import Tool, ToolContext, ToolError, tool

_REASON = {"type": "string", "minLength": 1, "description": "What to do when woken; you will read it back."}


def check_wait(seconds: float, max_wait_s: float) -> None:
    """ToolError unless `seconds` is a positive, finite duration within the configured maximum."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ToolError(f"a wait must be a positive number of seconds, got {seconds:g}")
    if seconds > max_wait_s:
        raise ToolError(
            f"a wait of {format_duration(seconds)} is longer than the maximum of {format_duration(max_wait_s)}; "
            "use schedule_reminder for something that far away"
        )


def wait_tools(
    scheduler: Scheduler, *, default_zone: ZoneInfo, max_wait_s: float, quotas: Quotas | None = None
) -> list[Tool]:
    """`wait_for` and `wait_until` over `scheduler`, held to `quotas`; quick, and they take no concurrency slot."""
    limits = quotas or Quotas()

    async def register(ctx: ToolContext, reason: str, due_at: datetime, seconds: float) -> str:
        if not reason:
            raise ToolError("reason must say what to do when woken")
        check_text(reason, limits, what="A wait")
        check_wait_length(seconds, limits)
        await check_self_wakes(scheduler, ctx.session_key, due_at, limits)
        try:
            reminder = await scheduler.add(
                session_key=ctx.session_key,
                kind=ReminderKind.WAKE,
                text=reason,
                due_at=due_at,
                max_pending=limits.max_reminders_per_user,
            )
        except PendingLimitReached as exc:
            requester = await scheduler.requester(ctx.session_key)
            raise pending_refusal(exc.pending, requester, limits, what="A wait") from None
        return (
            f"wait registered: {format_duration(seconds)}, until {iso_utc(due_at)} (id {reminder.id}). "
            f"You will be woken with {wake_note(reason)}; nothing is blocked meanwhile."
        )

    @tool(
        "wait_for",
        "Come back to this conversation after some seconds, without blocking anything: returns at once, and "
        f"you are woken later with [wait elapsed: REASON]. At least {format_duration(limits.min_wait_s)}, at most "
        f"{format_duration(max_wait_s)}.",
        {"seconds": {"type": "number", "exclusiveMinimum": 0, "description": "How long to wait."}, "reason": _REASON},
        required=("seconds", "reason"),
        uses_slot=False,
        quick=True,
    )
    async def wait_for(args: dict[str, Any], ctx: ToolContext) -> str:
        seconds = float(args["seconds"])
        check_wait(seconds, max_wait_s)
        return await register(ctx, args["reason"].strip(), scheduler.now() + timedelta(seconds=seconds), seconds)

    @tool(
        "wait_until",
        "Come back to this conversation at an ISO 8601 time (e.g. 2026-05-01T09:00:00+02:00; without an offset "
        f"it means {default_zone.key}), without blocking anything: returns at once, and you are woken then "
        "with [wait elapsed: REASON].",
        {"timestamp": {"type": "string", "minLength": 1}, "reason": _REASON},
        required=("timestamp", "reason"),
        uses_slot=False,
        quick=True,
    )
    async def wait_until(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            due_at = parse_timestamp(args["timestamp"], default_zone)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        now = scheduler.now()
        seconds = (due_at - now).total_seconds()
        if seconds <= 0:
            raise ToolError(f"{iso_utc(due_at)} is in the past (it is now {iso_utc(now)}); give a future time")
        check_wait(seconds, max_wait_s)
        return await register(ctx, args["reason"].strip(), due_at, seconds)

    return [wait_for, wait_until]
