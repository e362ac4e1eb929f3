"""The reminder tools: `schedule_reminder`, `list_reminders`, `cancel_reminder`.

A reminder is for people: when due, its text is posted in the conversation as
is, mentioning whoever asked, with no model call. Each tool sees only the
calling session's reminders; another session's id reads as unknown, so nothing
leaks across threads. Times are shown in the asking person's zone.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bot.quotas import Quotas
from bot.schedule.cron import CronSchedule
from bot.schedule.cron_runs import first_run
from bot.schedule.limits import check_cron, check_text, pending_refusal
from bot.schedule.scheduler import Scheduler
from bot.schedule.timing import format_duration, iso_utc, local_text, parse_timestamp
from bot.schedule.zones import Zones
from bot.store import PendingLimitReached, Reminder, ReminderKind
from tools.base import JSON, Tool, ToolContext, ToolError, tool

MAX_AHEAD_S = 5 * 366 * 86400
"""How far ahead a one-shot reminder may be set: far enough for anyone, and no date overflow."""


def reminder_view(reminder: Reminder, zone: ZoneInfo) -> dict[str, JSON]:
    """A reminder as the model reads it: due time in `zone` (and UTC), and its repeat rule."""
    view: dict[str, JSON] = {
        "reminder_id": reminder.id,
        "kind": reminder.kind.value,
        "text": reminder.text,
        "due": local_text(reminder.due_at, zone),
        "due_utc": iso_utc(reminder.due_at),
    }
    if reminder.cron is not None:
        view["repeats"] = f"{reminder.cron} ({reminder.zone})"
    if reminder.requester:
        view["requester"] = reminder.requester
    return view


def reminder_tools(scheduler: Scheduler, zones: Zones, quotas: Quotas | None = None) -> list[Tool]:
    """The three reminder tools over `scheduler`, held to `quotas`; quick, and they take no concurrency slot."""
    limits = quotas or Quotas()

    @tool(
        "schedule_reminder",
        "Post a reminder in this conversation at a time, mentioning the person who asked; no reply from you is "
        "needed then. Give exactly one of: at (ISO 8601; without an offset it is read in `timezone`), "
        "in_seconds, or cron (five fields, minute hour day-of-month month day-of-week, repeats until cancelled). "
        "timezone defaults to the person's own, else the daemon's. Limits: text of at most "
        f"{limits.max_reminder_chars} characters, a cron at most once every "
        f"{format_duration(limits.min_cron_interval_s)}, {limits.max_reminders_per_user} pending reminders "
        "and waits per person.",
        {
            "text": {"type": "string", "minLength": 1, "description": "What to post, e.g. 'stand-up in 5 minutes'."},
            "at": {"type": "string", "description": "e.g. 2026-05-01T09:00:00 or 2026-05-01T09:00:00+02:00"},
            "in_seconds": {"type": "number", "exclusiveMinimum": 0},
            "cron": {"type": "string", "description": "e.g. '0 9 * * 1-5' for 09:00 on weekdays"},
            "timezone": {"type": "string", "description": "IANA zone such as Europe/Paris"},
        },
        required=("text",),
        uses_slot=False,
        quick=True,
    )
    async def schedule_reminder(args: dict[str, Any], ctx: ToolContext) -> dict[str, JSON]:
        text = args["text"].strip()
        if not text:
            raise ToolError("text must not be empty")
        check_text(text, limits, what="A reminder")
        forms = [name for name in ("at", "in_seconds", "cron") if args.get(name) is not None]
        if len(forms) != 1:
            got = f" (got {' and '.join(forms)})" if forms else ""
            raise ToolError(f"give exactly one of at, in_seconds or cron{got}")
        try:
            zone = await zones.choose(args.get("timezone"), ctx.session_key)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        now = scheduler.now()
        due_at, schedule = _first_due(args, zone, now)
        if schedule is not None:
            check_cron(schedule, limits)
        try:
            reminder = await scheduler.add(
                session_key=ctx.session_key,
                kind=ReminderKind.REMINDER,
                text=text,
                due_at=due_at,
                cron=schedule.expr if schedule is not None else None,
                zone=zone.key,
                max_pending=limits.max_reminders_per_user,
            )
        except PendingLimitReached as exc:
            requester = await scheduler.requester(ctx.session_key)
            raise pending_refusal(exc.pending, requester, limits, what="A reminder") from None
        return {**reminder_view(reminder, zone), "due_in": format_duration((due_at - now).total_seconds())}

    @tool(
        "list_reminders",
        "The pending reminders and waits of this conversation, soonest first, times in the person's zone.",
        uses_slot=False,
        quick=True,
    )
    async def list_reminders(args: dict[str, Any], ctx: ToolContext) -> dict[str, JSON]:
        zone = await zones.of_session(ctx.session_key)
        pending = await scheduler.pending(ctx.session_key)
        return {"timezone": zone.key, "reminders": [reminder_view(reminder, zone) for reminder in pending]}

    @tool(
        "cancel_reminder",
        "Cancel a pending reminder or wait of this conversation by its reminder_id.",
        {"reminder_id": {"type": ["integer", "string"], "description": "as given by list_reminders"}},
        required=("reminder_id",),
        uses_slot=False,
        quick=True,
    )
    async def cancel_reminder(args: dict[str, Any], ctx: ToolContext) -> dict[str, JSON]:
        reminder_id = _reminder_id(args["reminder_id"])
        cancelled = await scheduler.cancel(reminder_id, session_key=ctx.session_key)
        if cancelled is None:
            existing = await scheduler.get(reminder_id)
            if existing is not None and existing.session_key == ctx.session_key:
                raise ToolError(f"reminder {reminder_id} is already {existing.status.value}")
            raise ToolError(f"no reminder {reminder_id} in this conversation")
        return {"reminder_id": reminder_id, "cancelled": True, "kind": cancelled.kind.value, "text": cancelled.text}

    return [schedule_reminder, list_reminders, cancel_reminder]


def _first_due(args: dict[str, Any], zone: ZoneInfo, now: datetime) -> tuple[datetime, CronSchedule | None]:
    """When a new reminder is first due, from whichever of at / in_seconds / cron was given (and the cron)."""
    if (at := args.get("at")) is not None:
        try:
            due_at = parse_timestamp(at, zone)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if due_at <= now:
            raise ToolError(f"{local_text(due_at, zone)} is in the past (it is now {local_text(now, zone)})")
        if (due_at - now).total_seconds() > MAX_AHEAD_S:
            raise ToolError(f"{local_text(due_at, zone)} is more than {format_duration(MAX_AHEAD_S)} away")
        return due_at, None
    if (seconds := args.get("in_seconds")) is not None:
        seconds = float(seconds)
        if not math.isfinite(seconds) or not 0 < seconds <= MAX_AHEAD_S:
            raise ToolError(f"in_seconds must be positive and at most {MAX_AHEAD_S:g}, got {seconds:g}")
        return now + timedelta(seconds=seconds), None
    try:
        schedule = CronSchedule.parse(args["cron"])
    except ValueError as exc:
        raise ToolError(f"invalid cron {args['cron']!r}: {exc}") from None
    first = first_run(schedule, zone, now)
    if first is None:
        raise ToolError(f"cron {schedule.expr!r} never fires (is that date real?)")
    return first, schedule


def _reminder_id(value: Any) -> int:
    text = str(value).strip().lstrip("#")
    if isinstance(value, bool) or not text.isdigit():
        raise ToolError(f"reminder_id must be a number as list_reminders shows it, got {value!r}")
    return int(text)
