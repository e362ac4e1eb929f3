"""Quotas, one by one: each refuses with a tool result naming the limit and its value, and a line for the thread.

Pending reminders and waits per person, reminder text length, the shortest cron interval, the
shortest wait, self-wakes per thread per UTC day (counted in the store, so a restart keeps them),
tool calls at once per person, and the daily token budgets per person and per channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use
from schedule_support import FakeClock, FakeWaker
from test_caps import Gated

from bot.agent.toolbox import Toolbox
from bot.calls.summary import state_text
from bot.config import load_settings
from bot.errors import ConfigError
from bot.quotas import QuotaExceeded, Quotas, day_start, next_reset, reset_text
from bot.schedule import Scheduler
from bot.schedule.cron import CronSchedule
from bot.schedule.reminder_tools import reminder_tools
from bot.schedule.wait_tools import wait_tools
from bot.schedule.zones import Zones
from bot.store import (
    NewReminder,
    PendingLimitReached,
    ReminderKind,
    ReminderStatus,
    SqliteStore,
    Store,
    WakeLimit,
)
from bot.store.usage import UsageGrouping
from bot.toolcall import CallStatus, ProgressKind, ToolCall
from bot.types import Usage
from bot.usage_report import near_limits, render_limits
from tools.base import ToolContext, ToolError, ToolKind

A, A2, B = "test:alice", "test:alice-2", "test:bob"
NOW = datetime(2026, 5, 1, 6, tzinfo=UTC)
ZONE = ZoneInfo("UTC")


@dataclass
class Kit:
    store: Store
    scheduler: Scheduler
    toolbox: Toolbox
    clock: FakeClock
    output: RecordingOutput
    waker: FakeWaker

    async def call(self, name: str, args: dict[str, Any], session_key: str = A) -> Any:
        problem = self.toolbox.problem(name, args)
        if problem is not None:
            raise ToolError(problem)
        item = self.toolbox.get(name)
        assert item is not None
        ctx = ToolContext("toolu_q", session_key, Path("."), lambda kind, payload: None, asyncio.get_running_loop())
        return await item.run(args, ctx)

    def scheduler_again(self, quotas: Quotas) -> Scheduler:
        """A second scheduler on the same store: what a restart starts with."""
        return Scheduler(
            store=self.store,
            waker=self.waker,
            output=self.output,
            zone=ZONE,
            max_lateness_s=3600,
            clock=self.clock,
            max_self_wakes_per_day=quotas.max_self_wakes_per_day,
        )


QUOTAS = Quotas(
    max_reminders_per_user=3, min_cron_interval_s=3600, max_reminder_chars=40, min_wait_s=5, max_self_wakes_per_day=2
)


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[Kit]:
    store = await SqliteStore.open(tmp_path / "bot.db")
    await store.ensure_session(A, {"requester": "UALICE"})
    await store.ensure_session(A2, {"requester": "UALICE"})
    await store.ensure_session(B, {"requester": "UBOB"})
    clock, output, waker = FakeClock(NOW), RecordingOutput(), FakeWaker()
    scheduler = Scheduler(
        store=store,
        waker=waker,
        output=output,
        zone=ZONE,
        max_lateness_s=3600,
        clock=clock,
        max_self_wakes_per_day=QUOTAS.max_self_wakes_per_day,
    )
    toolbox = Toolbox(
        [
            *wait_tools(scheduler, default_zone=ZONE, max_wait_s=7 * 86400, quotas=QUOTAS),
            *reminder_tools(scheduler, Zones(ZONE), QUOTAS),
        ]
    )
    await scheduler.start()
    try:
        yield Kit(store, scheduler, toolbox, clock, output, waker)
    finally:
        await scheduler.stop()
        await store.close()


# --- the day, and cron's shortest gap ------------------------------------------------------


def test_a_day_runs_from_utc_midnight() -> None:
    moment = datetime(2026, 5, 1, 21, 30, tzinfo=ZoneInfo("Europe/Paris"))  # 19:30 UTC
    assert day_start(moment) == datetime(2026, 5, 1, tzinfo=UTC)
    assert next_reset(moment) == datetime(2026, 5, 2, tzinfo=UTC)
    assert reset_text(moment) == "resets at 00:00 UTC (in 4h 30m)"


@pytest.mark.parametrize(
    ("expr", "gap_s"),
    [
        ("* * * * *", 60),
        ("*/15 * * * *", 900),
        ("0 * * * *", 3600),
        ("0,30 9 * * *", 1800),
        ("0 9 * * 1-5", 86400),
        ("59 23 * * *", 86400),
        ("0,59 0,23 * * *", 60),  # 23:59 then 00:00: across midnight
        ("@daily", 86400),
    ],
)
def test_the_shortest_gap_of_a_cron(expr: str, gap_s: int) -> None:
    assert CronSchedule.parse(expr).shortest_gap_s == gap_s


# --- reminders and waits -------------------------------------------------------------------


async def test_pending_rows_are_counted_per_person_across_their_threads(kit: Kit) -> None:
    await kit.call("schedule_reminder", {"text": "one", "in_seconds": 600})
    await kit.call("wait_for", {"seconds": 600, "reason": "two"}, session_key=A2)
    await kit.call("schedule_reminder", {"text": "three", "in_seconds": 600}, session_key=A2)
    with pytest.raises(QuotaExceeded) as refused:
        await kit.call("schedule_reminder", {"text": "four", "in_seconds": 600})
    assert "UALICE already has 3 pending reminders and waits" in str(refused.value)
    assert "BOT_MAX_REMINDERS_PER_USER (3)" in str(refused.value) and "cancel_reminder" in str(refused.value)
    assert refused.value.line.startswith("🚦 A reminder was refused: UALICE already has 3 pending")
    with pytest.raises(QuotaExceeded, match="BOT_MAX_REMINDERS_PER_USER"):
        await kit.call("wait_for", {"seconds": 600, "reason": "five"})
    assert len(await kit.store.pending_reminders()) == 3
    await kit.call("schedule_reminder", {"text": "bob's", "in_seconds": 600}, session_key=B)  # another person
    (first, *_) = await kit.store.pending_reminders(A)
    await kit.call("cancel_reminder", {"reminder_id": first.id})
    await kit.call("schedule_reminder", {"text": "room again", "in_seconds": 600})


async def test_one_batch_cannot_each_see_room_for_itself(kit: Kit) -> None:
    calls = [kit.call("schedule_reminder", {"text": f"r{n}", "in_seconds": 600}) for n in range(6)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert sum(isinstance(result, QuotaExceeded) for result in results) == 3
    assert len(await kit.store.pending_reminders()) == 3


async def test_reminder_text_and_wait_reason_have_a_length_limit(kit: Kit) -> None:
    with pytest.raises(QuotaExceeded) as refused:
        await kit.call("schedule_reminder", {"text": "x" * 41, "in_seconds": 600})
    assert "41 characters, more than the 40 BOT_MAX_REMINDER_CHARS allows" in str(refused.value)
    assert refused.value.line.startswith("🚦 A reminder was refused: its text is 41 characters")
    with pytest.raises(QuotaExceeded, match="BOT_MAX_REMINDER_CHARS"):
        await kit.call("wait_for", {"seconds": 600, "reason": "y" * 41})
    await kit.call("schedule_reminder", {"text": "x" * 40, "in_seconds": 600})


async def test_a_cron_may_not_repeat_more_often_than_the_minimum(kit: Kit) -> None:
    with pytest.raises(QuotaExceeded) as refused:
        await kit.call("schedule_reminder", {"text": "spam", "cron": "*/5 * * * *"})
    assert "'*/5 * * * *' can run 5m 0s apart, more often than once every 1h 0m" in str(refused.value)
    assert "BOT_MIN_CRON_INTERVAL_S" in refused.value.line
    assert await kit.store.pending_reminders() == []
    await kit.call("schedule_reminder", {"text": "hourly", "cron": "0 * * * *"})


async def test_a_wait_has_a_shortest_length(kit: Kit) -> None:
    with pytest.raises(QuotaExceeded) as refused:
        await kit.call("wait_for", {"seconds": 0.001, "reason": "spin"})
    assert "shorter than the minimum of 5" in str(refused.value) and "BOT_MIN_WAIT_S" in str(refused.value)
    with pytest.raises(QuotaExceeded, match="BOT_MIN_WAIT_S"):
        await kit.call("wait_until", {"timestamp": (NOW + timedelta(seconds=2)).isoformat(), "reason": "spin"})
    await kit.call("wait_for", {"seconds": 5, "reason": "fine"})


async def _fire_wait(kit: Kit, scheduler: Scheduler, session_key: str = A) -> None:
    await kit.call("wait_for", {"seconds": 60, "reason": "look again"}, session_key=session_key)
    kit.clock.advance(60)
    (row,) = await kit.store.pending_reminders(session_key)
    await scheduler.fire(row.id)


async def test_self_wakes_are_bounded_per_thread_per_day_and_survive_a_restart(kit: Kit) -> None:
    await _fire_wait(kit, kit.scheduler)
    await kit.scheduler.stop()
    again = kit.scheduler_again(QUOTAS)  # the count is in the store, not in this scheduler
    await again.start()
    try:
        await _fire_wait(kit, again)
        assert kit.waker.submits == [(A, "[wait elapsed: look again]")] * 2
        # A third wait due today is refused up front...
        tools = {item.name: item for item in wait_tools(again, default_zone=ZONE, max_wait_s=86400, quotas=QUOTAS)}
        ctx = ToolContext("toolu_w", A, Path("."), lambda kind, payload: None, asyncio.get_running_loop())
        with pytest.raises(QuotaExceeded) as refused:
            await tools["wait_for"].run({"seconds": 60, "reason": "again"}, ctx)
        assert "woken itself 2 times today, the most BOT_MAX_SELF_WAKES_PER_DAY (2) allows" in str(refused.value)
        assert "resets at 00:00 UTC" in str(refused.value)
        # ...and one set before the limit was reached does not wake the thread when it comes due.
        late = await kit.store.add_reminder(NewReminder(A, ReminderKind.WAKE, "sneaky", kit.clock.now))
        report = await again.fire(late.id)
        assert not report.delivered and report.refused
        assert len(kit.waker.submits) == 2
        assert (await kit.store.get_reminder(late.id)).status is ReminderStatus.MISSED  # type: ignore[union-attr]
        [(key, line)] = [notice for notice in kit.output.notices if "did not wake me" in notice[1]]
        assert key == A and "BOT_MAX_SELF_WAKES_PER_DAY (2)" in line and line.endswith("It was: sneaky")
        # Another thread has its own count, and the next UTC day starts a new one.
        await _fire_wait(kit, again, session_key=B)
        kit.clock.now = next_reset(kit.clock.now) + timedelta(minutes=1)
        await _fire_wait(kit, again)
        assert len(kit.waker.submits) == 4
    finally:
        await again.stop()


async def test_two_waits_due_together_cannot_both_take_the_last_wake(kit: Kit) -> None:
    await _fire_wait(kit, kit.scheduler)
    rows = [await kit.store.add_reminder(NewReminder(A, ReminderKind.WAKE, f"w{n}", kit.clock.now)) for n in range(2)]
    reports = await asyncio.gather(*(kit.scheduler.fire(row.id) for row in rows))
    assert sorted(report.delivered for report in reports) == [False, True]
    assert len(kit.waker.submits) == 2


async def test_a_wait_due_tomorrow_is_not_held_to_todays_count(kit: Kit) -> None:
    for _ in range(2):
        await _fire_wait(kit, kit.scheduler)
    tomorrow = next_reset(kit.clock.now) + timedelta(hours=1)
    answer = await kit.call("wait_until", {"timestamp": tomorrow.isoformat(), "reason": "tomorrow"})
    assert answer.startswith("wait registered")


# --- the store's counts, on both back ends -------------------------------------------------


async def test_the_store_counts_pending_rows_and_wakes(any_store: Store) -> None:
    store = any_store
    await store.ensure_session(A, {"requester": "UALICE"})
    await store.ensure_session("test:console")
    due = datetime.now(UTC) + timedelta(hours=1)
    await store.add_reminders(
        [NewReminder(A, ReminderKind.REMINDER, f"r{n}", due, requester="UALICE") for n in range(2)]
    )
    with pytest.raises(PendingLimitReached) as full:
        await store.add_reminder(NewReminder(A, ReminderKind.WAKE, "w", due, requester="UALICE"), max_pending=2)
    assert full.value.pending == 2
    await store.add_reminder(NewReminder("test:console", ReminderKind.WAKE, "w", due), max_pending=1)  # no person
    assert await store.pending_by_person() == [("UALICE", 2), ("test:console", 1)]
    wake = await store.add_reminder(NewReminder(A, ReminderKind.WAKE, "w", due - timedelta(hours=2)))
    await store.claim_reminder(wake.id, due_at=wake.due_at, outcome=ReminderStatus.FIRED, at=datetime.now(UTC))
    today = day_start(datetime.now(UTC))
    assert await store.count_wakes(A, since=today) == 1
    assert await store.count_wakes(A, since=today + timedelta(days=1)) == 0
    assert await store.wakes_by_session(since=today) == [(A, 1)]


async def test_writes_side_by_side_cannot_each_take_the_last_room(any_store: Store) -> None:
    store = any_store
    keys = [f"test:alice-{n}" for n in range(8)]  # each its own session: no session row lock in common
    for key in keys:
        await store.ensure_session(key, {"requester": "UALICE"})
    due = datetime.now(UTC) + timedelta(hours=1)
    adds = [
        store.add_reminder(NewReminder(key, ReminderKind.REMINDER, "r", due, requester="UALICE"), max_pending=3)
        for key in keys
    ]
    results = await asyncio.gather(*adds, return_exceptions=True)
    assert sum(isinstance(result, PendingLimitReached) for result in results) == 5
    assert await store.pending_by_person() == [("UALICE", 3)]


async def test_claims_side_by_side_cannot_both_take_the_last_wake(any_store: Store) -> None:
    store = any_store
    await store.ensure_session(A)
    now = datetime.now(UTC)
    rows = await store.add_reminders([NewReminder(A, ReminderKind.WAKE, f"w{n}", now) for n in range(4)])
    limit = WakeLimit(2, day_start(now))
    claims = [
        store.claim_reminder(
            row.id, due_at=row.due_at, outcome=ReminderStatus.FIRED, at=now, owed="note", wake_limit=limit
        )
        for row in rows
    ]
    claimed = await asyncio.gather(*claims)
    assert sorted(row.status for row in claimed if row is not None) == ["fired", "fired", "missed", "missed"]
    assert [row.inbox_id is not None for row in claimed if row is not None].count(True) == 2  # owed only when fired
    assert await store.count_wakes(A, since=day_start(now)) == 2


async def test_the_store_sums_todays_tokens_per_person_and_channel(any_store: Store) -> None:
    store = any_store
    await store.ensure_session("slack:T:C1:1.0", {"channel": "C1"})
    await store.ensure_session("slack:T:C2:2.0", {"channel": "C2"})
    for key, who in (("slack:T:C1:1.0", "U1"), ("slack:T:C1:1.0", "U2"), ("slack:T:C2:2.0", "U1")):
        await store.record_usage(session_key=key, turn_id=None, model="m", usage=Usage(10, 5, 100, 20), requester=who)
    today = day_start(datetime.now(UTC))
    assert await store.tokens_since(today, requester="U1") == 270
    assert await store.tokens_since(today, channel="C1") == 270
    assert await store.tokens_since(today, channel="C9") == 0
    assert await store.tokens_since(today + timedelta(days=1), requester="U1") == 0
    assert await store.top_spenders(UsageGrouping.USER, since=today) == [("U1", 270), ("U2", 135)]
    assert await store.top_spenders(UsageGrouping.CHANNEL, since=today) == [("C1", 270), ("C2", 135)]


# --- tool calls at once, per person ---------------------------------------------------------


async def test_one_persons_calls_wait_for_their_cap_and_say_why(
    core_factory: CoreFactory, output: RecordingOutput
) -> None:
    core = await core_factory(bot_max_concurrent_tools=10, bot_max_concurrent_tools_per_user=2)
    gated = Gated(ToolKind.THREAD)
    keys = ["test:u1-a", "test:u1-b", "test:u2"]
    for key in keys:
        await core.store.ensure_session(key)
    people = {"test:u1-a": "U1", "test:u1-b": "U1", "test:u2": "U2"}
    calls = [
        await core.registry.submit(
            call_id=f"toolu_cap{n}",
            session_key=key,
            turn_id=f"{key}#1",
            tool_name="gated",
            tool_input={},
            tool=gated.tool,
            requester=people[key],
        )
        for n, key in enumerate(["test:u1-a", "test:u1-b", "test:u1-a", "test:u2"])
    ]
    await output.wait_for(lambda: sum(c.status is CallStatus.RUNNING for c in calls) == 3)
    held = calls[2]
    assert held.status is CallStatus.PENDING and calls[3].status is CallStatus.RUNNING  # U2 is not held by U1
    await output.wait_for(lambda: any("BOT_MAX_CONCURRENT_TOOLS_PER_USER" in str(e.payload) for e in held.progress))
    assert "U1 has 2 tool calls running" in str(held.progress[-1].payload)
    [line] = [text for key, text in output.notices if "BOT_MAX_CONCURRENT_TOOLS_PER_USER" in text]
    assert line.startswith("🚦 A tool call waits: U1 has 2 tool calls running")
    gated.release.set()
    for call in calls:
        assert await core.registry.wait_final(call.id, 10)
    assert all(call.status is CallStatus.COMPLETED for call in calls)


def test_a_pending_call_shows_what_holds_it_back() -> None:
    call = ToolCall("toolu_p", "test:p", "t", "run_command", {"command": "make"})
    assert state_text(call) == "pending (waiting for a free slot)"
    call.add_progress(ProgressKind.LOG, "waiting: U1 has 8 tool calls running")
    assert state_text(call) == "pending (waiting: U1 has 8 tool calls running)"


async def test_a_quota_a_tool_hits_is_said_in_the_thread(core_factory: CoreFactory, output: RecordingOutput) -> None:
    core = await core_factory(bot_max_reminder_chars=10)
    await core.store.ensure_session("test:q")
    item = core.toolbox.get("schedule_reminder")
    call = await core.registry.submit(
        call_id="toolu_long",
        session_key="test:q",
        turn_id="t",
        tool_name="schedule_reminder",
        tool_input={"text": "a reminder far too long", "in_seconds": 60},
        tool=item,
    )
    assert await core.registry.wait_final(call.id, 10)
    assert call.status is CallStatus.FAILED and "BOT_MAX_REMINDER_CHARS allows; shorten it" in (call.error or "")
    assert [text for key, text in output.notices if key == "test:q"] == [
        "🚦 A reminder was refused: its text is 23 characters, more than the 10 BOT_MAX_REMINDER_CHARS allows."
    ]


# --- daily token budgets ----------------------------------------------------------------------


async def test_a_spent_budget_stops_the_turn_before_the_model(
    fake: FakeAnthropic, core_factory: CoreFactory, output: RecordingOutput
) -> None:
    core = await core_factory(bot_daily_tokens_per_user=1)
    await core.store.ensure_session("console:b", {"requester": "U1", "channel": "C1"})
    fake.script(Reply.text_only("first answer"))
    await core.engine.run_turn("console:b", "hello")  # booked to the session's person, U1
    assert len(fake.requests) == 1
    outcome = await core.engine.run_turn("console:b", "again")
    assert len(fake.requests) == 1, "no model call once the budget is spent"
    assert outcome is not None and outcome.error == "the daily token budget is spent"
    [line] = [text for key, text in output.notices if "BOT_DAILY_TOKENS_PER_USER" in text]
    assert line.startswith("🚦 Not answered: U1 has used ") and "the daily budget BOT_DAILY_TOKENS_PER_USER (1)" in line
    assert "resets at 00:00 UTC" in line
    history = await core.store.load_messages("console:b")
    assert history[-1]["role"] == "assistant"  # the history stays valid
    # A wake-up of the session is the session's person's turn too: no call either.
    core.engine.submit("console:b", "[wait elapsed: look]")
    await core.engine.wait_turn("console:b")
    assert len(fake.requests) == 1


async def test_a_channel_budget_holds_everyone_in_it(
    fake: FakeAnthropic, core_factory: CoreFactory, output: RecordingOutput
) -> None:
    core = await core_factory(bot_daily_tokens_per_channel=1)
    await core.store.ensure_session("slack:T:C1:1.0", {"requester": "U1", "channel": "C1"})
    await core.store.ensure_session("slack:T:C1:2.0", {"requester": "U2", "channel": "C1"})
    await core.store.ensure_session("slack:T:C2:3.0", {"requester": "U2", "channel": "C2"})
    fake.script(Reply.text_only("one"), Reply.text_only("elsewhere"))
    await core.engine.run_turn("slack:T:C1:1.0", "hi")
    await core.engine.run_turn("slack:T:C1:2.0", "me too")
    assert len(fake.requests) == 1
    assert any(
        "this channel (C1) has used" in text and "BOT_DAILY_TOKENS_PER_CHANNEL (1)" in text
        for _, text in output.notices
    )
    await core.engine.run_turn("slack:T:C2:3.0", "other channel")
    assert len(fake.requests) == 2


async def test_usage_lists_who_is_near_a_limit(any_store: Store) -> None:
    store = any_store
    await store.ensure_session("slack:T:C1:1.0", {"channel": "C1", "requester": "U1"})
    await store.record_usage(
        session_key="slack:T:C1:1.0", turn_id=None, model="m", usage=Usage(850, 0, 0, 0), requester="U1"
    )
    await store.record_usage(
        session_key="slack:T:C1:1.0", turn_id=None, model="m", usage=Usage(100, 0, 0, 0), requester="U2"
    )
    due = datetime.now(UTC) + timedelta(hours=1)
    await store.add_reminders(
        [NewReminder("slack:T:C1:1.0", ReminderKind.REMINDER, "r", due, requester="U1") for _ in range(4)]
    )
    quotas = Quotas(daily_tokens_per_user=1000, daily_tokens_per_channel=10_000, max_reminders_per_user=5)
    now = datetime.now(UTC)
    near = await near_limits(store, quotas, now)
    assert [item.line() for item in near] == [
        "U1  tokens today 850 of 1,000 (85%, BOT_DAILY_TOKENS_PER_USER)",
        "U1  pending reminders and waits 4 of 5 (80%, BOT_MAX_REMINDERS_PER_USER)",
    ]
    assert render_limits(near, now).splitlines()[0].startswith("quotas: at 80% or more of a limit today (UTC")
    assert render_limits([], now) == "quotas: nobody is at 80% of a limit today (UTC)"


async def test_tool_results_of_a_turn_name_the_limit(
    fake: FakeAnthropic, core_factory: CoreFactory, output: RecordingOutput
) -> None:
    core = await core_factory(bot_max_reminders_per_user=1)
    await core.store.ensure_session("console:r", {"requester": "U1"})
    fake.script(
        Reply.tools(
            tool_use("schedule_reminder", {"text": "first", "in_seconds": 600}),
            tool_use("schedule_reminder", {"text": "second", "in_seconds": 600}),
        ),
        Reply.text_only("one of them"),
    )
    await core.engine.run_turn("console:r", "two reminders")
    results = [str(content) for content in tool_results(fake.requests[1]).values()]
    refused = [result for result in results if "BOT_MAX_REMINDERS_PER_USER" in result]
    assert len(refused) == 1
    assert "U1 already has 1 pending reminders and waits, the most BOT_MAX_REMINDERS_PER_USER (1) allows" in refused[0]
    assert any(text.startswith("🚦 A reminder was refused: U1 already has 1") for _, text in output.notices)


# --- settings ------------------------------------------------------------------------------


def test_the_quota_settings_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(_env_file=None).quotas == Quotas()
    assert Quotas().daily_tokens_per_user is None and Quotas().max_reminders_per_user == 50
    monkeypatch.setenv("BOT_DAILY_TOKENS_PER_USER", "")
    monkeypatch.setenv("BOT_DAILY_TOKENS_PER_CHANNEL", "5000000")
    monkeypatch.setenv("BOT_MAX_SELF_WAKES_PER_DAY", "0")
    quotas = load_settings(_env_file=None).quotas
    assert (quotas.daily_tokens_per_user, quotas.daily_tokens_per_channel) == (None, 5_000_000)
    assert quotas.max_self_wakes_per_day == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("BOT_MIN_CRON_INTERVAL_S", "30"),
        ("BOT_DAILY_TOKENS_PER_USER", "0"),
        ("BOT_MAX_REMINDERS_PER_USER", "0"),
        ("BOT_MAX_CONCURRENT_TOOLS_PER_USER", "-1"),
    ],
)
def test_a_bad_quota_names_its_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{name}: "):
        load_settings(_env_file=None)
