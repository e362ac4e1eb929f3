"""The five schedule tools, run directly: what they register, what they answer, how they refuse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import RecordingOutput
from schedule_support import FakeClock, FakeWaker, zone_lookup

from bot.agent.toolbox import Toolbox
from bot.schedule import Scheduler
from bot.schedule.reminder_tools import reminder_tools
from bot.schedule.wait_tools import wait_tools
from bot.schedule.zones import Zones
from bot.store import ReminderKind, ReminderStatus, SqliteStore, Store
from tools.base import ToolContext, ToolError

A, B = "test:alice", "test:bob"
NOW = datetime(2026, 5, 1, 6, tzinfo=UTC)  # 08:00 in Paris, 02:00 in New York
BOT_ZONE = ZoneInfo("Europe/Paris")
MAX_WAIT_S = 7 * 86400


@dataclass
class Kit:
    store: Store
    scheduler: Scheduler
    toolbox: Toolbox
    clock: FakeClock

    async def call(self, name: str, args: dict[str, Any], session_key: str = A) -> Any:
        """Validate against the schema as the engine would, then run the tool."""
        problem = self.toolbox.problem(name, args)
        if problem is not None:
            raise ToolError(problem)
        item = self.toolbox.get(name)
        assert item is not None and item.quick and not item.uses_slot
        ctx = ToolContext("toolu_x", session_key, Path("."), lambda kind, payload: None, asyncio.get_running_loop())
        return await item.run(args, ctx)


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[Kit]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    await store.ensure_session(A, {"requester": "UALICE"})
    await store.ensure_session(B, {"requester": "UBOB"})
    clock = FakeClock(NOW)
    scheduler = Scheduler(
        store=store, waker=FakeWaker(), output=RecordingOutput(), zone=BOT_ZONE, max_lateness_s=3600, clock=clock
    )
    zones = Zones(BOT_ZONE, zone_lookup({A: "America/New_York", B: None}))
    toolbox = Toolbox(
        [*wait_tools(scheduler, default_zone=BOT_ZONE, max_wait_s=MAX_WAIT_S), *reminder_tools(scheduler, zones)]
    )
    await scheduler.start()
    try:
        yield Kit(store, scheduler, toolbox, clock)
    finally:
        await scheduler.stop()
        await store.close()


# --- waits ---------------------------------------------------------------------------------


async def test_wait_for_registers_and_returns_at_once(kit: Kit) -> None:
    answer = await kit.call("wait_for", {"seconds": 600, "reason": "check the build"})
    assert answer.startswith("wait registered: 10m 0s, until 2026-05-01T06:10:00Z (id 1)")
    assert "[wait elapsed: check the build]" in answer
    (row,) = await kit.store.pending_reminders(A)
    assert (row.kind, row.text, row.due_at, row.requester) == (
        ReminderKind.WAKE,
        "check the build",
        NOW + timedelta(minutes=10),
        "UALICE",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"seconds": 0, "reason": "x"}, "less than or equal to the minimum of 0"),
        ({"seconds": -3, "reason": "x"}, "less than or equal to the minimum of 0"),
        ({"seconds": 8 * 86400, "reason": "x"}, "longer than the maximum of 7d 0h"),
        ({"seconds": 60, "reason": "   "}, "reason must say what to do"),
        ({"seconds": 60}, "'reason' is a required property"),
    ],
)
async def test_wait_for_refuses(kit: Kit, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await kit.call("wait_for", args)
    assert await kit.store.pending_reminders() == []


@pytest.mark.parametrize(
    ("timestamp", "due"),
    [
        ("2026-05-01T12:00:00+02:00", datetime(2026, 5, 1, 10, tzinfo=UTC)),
        ("2026-05-01T10:00:00Z", datetime(2026, 5, 1, 10, tzinfo=UTC)),
        ("2026-05-01T12:00:00", datetime(2026, 5, 1, 10, tzinfo=UTC)),  # naive: BOT_TIMEZONE (Paris)
    ],
)
async def test_wait_until_with_and_without_zone(kit: Kit, timestamp: str, due: datetime) -> None:
    answer = await kit.call("wait_until", {"timestamp": timestamp, "reason": "deploy window"})
    assert answer.startswith("wait registered: 4h 0m, until 2026-05-01T10:00:00Z")
    (row,) = await kit.store.pending_reminders(A)
    assert row.due_at == due


@pytest.mark.parametrize(
    ("timestamp", "message"),
    [
        ("2026-05-01T07:59:00", r"2026-05-01T05:59:00Z is in the past \(it is now 2026-05-01T06:00:00Z\)"),
        ("2026-04-01T00:00:00Z", "is in the past"),
        ("next tuesday", "not an ISO 8601 time"),
        ("2026-06-01T00:00:00Z", "longer than the maximum"),
    ],
)
async def test_wait_until_refuses(kit: Kit, timestamp: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await kit.call("wait_until", {"timestamp": timestamp, "reason": "x"})


# --- reminders -----------------------------------------------------------------------------


async def test_reminder_at_a_naive_time_is_the_askers_time(kit: Kit) -> None:
    view = await kit.call("schedule_reminder", {"text": "call mum", "at": "2026-05-01T09:00:00"})
    # Alice's Slack zone is New York: 09:00 EDT is 13:00 UTC.
    assert view["due"] == "Fri 2026-05-01 09:00 EDT" and view["due_utc"] == "2026-05-01T13:00:00Z"
    assert view["due_in"] == "7h 0m" and "repeats" not in view and view["requester"] == "UALICE"


async def test_reminder_with_an_explicit_zone(kit: Kit) -> None:
    view = await kit.call("schedule_reminder", {"text": "x", "at": "2026-05-02T09:00:00", "timezone": "Asia/Tokyo"})
    assert view["due_utc"] == "2026-05-02T00:00:00Z" and view["due"] == "Sat 2026-05-02 09:00 JST"


async def test_reminder_in_seconds(kit: Kit) -> None:
    view = await kit.call("schedule_reminder", {"text": "tea is ready", "in_seconds": 240})
    assert view["due_utc"] == "2026-05-01T06:04:00Z" and view["due_in"] == "4m 0s"


async def test_cron_reminder_uses_the_askers_zone_then_the_bots(kit: Kit) -> None:
    alice = await kit.call("schedule_reminder", {"text": "stand-up", "cron": "0 9 * * 1-5"})
    assert alice["repeats"] == "0 9 * * 1-5 (America/New_York)"
    assert alice["due_utc"] == "2026-05-01T13:00:00Z"  # Friday 09:00 in New York
    bob = await kit.call("schedule_reminder", {"text": "stand-up", "cron": "0 9 * * 1-5"}, session_key=B)
    assert bob["repeats"] == "0 9 * * 1-5 (Europe/Paris)" and bob["due_utc"] == "2026-05-01T07:00:00Z"
    row = await kit.scheduler.get(alice["reminder_id"])
    assert row is not None and (row.cron, row.zone) == ("0 9 * * 1-5", "America/New_York")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"text": "x"}, "exactly one of at, in_seconds or cron$"),
        ({"text": "x", "at": "2026-05-02T09:00:00", "cron": "0 9 * * *"}, r"\(got at and cron\)"),
        ({"text": "x", "cron": "0 9 * *"}, "invalid cron '0 9 \\* \\*': cron needs 5 fields"),
        ({"text": "x", "cron": "0 0 30 2 *"}, "never fires"),
        ({"text": "x", "cron": "\u0663 * * * *"}, "invalid cron .*ASCII only.*ARABIC-INDIC DIGIT THREE"),
        ({"text": "x", "at": "2026-04-30T09:00:00"}, "is in the past"),
        ({"text": "x", "in_seconds": 0}, "less than or equal to the minimum"),
        ({"text": "x", "in_seconds": 60, "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"text": " ", "in_seconds": 60}, "text must not be empty"),
    ],
)
async def test_schedule_reminder_refuses(kit: Kit, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await kit.call("schedule_reminder", args)
    assert await kit.store.pending_reminders() == []


async def test_list_shows_only_this_sessions_pending_items_in_the_askers_zone(kit: Kit) -> None:
    await kit.call("schedule_reminder", {"text": "later", "in_seconds": 7200})
    await kit.call("wait_for", {"seconds": 60, "reason": "soon"})
    await kit.call("schedule_reminder", {"text": "bob's", "in_seconds": 60}, session_key=B)
    listed = await kit.call("list_reminders", {})
    assert listed["timezone"] == "America/New_York"
    assert [(r["kind"], r["text"], r["due"]) for r in listed["reminders"]] == [
        ("wake", "soon", "Fri 2026-05-01 02:01 EDT"),
        ("reminder", "later", "Fri 2026-05-01 04:00 EDT"),
    ]
    bobs = await kit.call("list_reminders", {}, session_key=B)
    assert bobs["timezone"] == "Europe/Paris" and [r["text"] for r in bobs["reminders"]] == ["bob's"]


async def test_cancel_only_this_sessions_reminders(kit: Kit) -> None:
    view = await kit.call("schedule_reminder", {"text": "x", "in_seconds": 60})
    rid = view["reminder_id"]
    with pytest.raises(ToolError, match=f"no reminder {rid} in this conversation"):
        await kit.call("cancel_reminder", {"reminder_id": rid}, session_key=B)
    assert await kit.call("cancel_reminder", {"reminder_id": str(rid)}) == {
        "reminder_id": rid,
        "cancelled": True,
        "kind": "reminder",
        "text": "x",
    }
    with pytest.raises(ToolError, match=f"reminder {rid} is already cancelled"):
        await kit.call("cancel_reminder", {"reminder_id": rid})
    with pytest.raises(ToolError, match="must be a number"):
        await kit.call("cancel_reminder", {"reminder_id": "tomorrow's"})
    assert (await kit.scheduler.get(rid)).status is ReminderStatus.CANCELLED  # type: ignore[union-attr]


async def test_a_wait_can_be_cancelled_like_a_reminder(kit: Kit) -> None:
    await kit.call("wait_for", {"seconds": 60, "reason": "poll"})
    (row,) = await kit.store.pending_reminders(A)
    assert (await kit.call("cancel_reminder", {"reminder_id": row.id}))["kind"] == "wake"
    assert (await kit.call("list_reminders", {}))["reminders"] == []


async def test_a_failing_zone_lookup_falls_back_to_the_bot_zone(tmp_path: Path) -> None:
    async def broken(session_key: str) -> str | None:
        raise RuntimeError("users.info is down")

    zones = Zones(BOT_ZONE, broken)
    assert await zones.of_session(A) == BOT_ZONE
    assert await Zones(BOT_ZONE, zone_lookup({A: "Not/AZone"})).of_session(A) == BOT_ZONE
    assert await Zones(BOT_ZONE).choose("UTC", A) == ZoneInfo("UTC")


async def test_a_cron_that_first_fires_years_ahead_is_accepted(kit: Kit) -> None:
    # 1 March on a Sunday: not before 2037, beyond a nine-year look-ahead.
    view = await kit.call("schedule_reminder", {"text": "rare", "cron": "0 9 1 3 */7"})
    assert view["due_utc"] == "2037-03-01T14:00:00Z"  # 09:00 EST in New York
