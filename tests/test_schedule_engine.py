"""Waits and reminders through the whole core: open_core, the real SDK, the fake Messages API.

A wait brings the agent back by itself (a new turn when idle, a mid-turn note when
busy); a reminder is posted without any model call; and both survive a restart on
the same database, fired once and marked late, or reported missed when too late.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from conftest import RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use, user_texts
from schedule_support import FakeClock, schedule_core, texts

from bot.agent.protocol import INJECTION_PREFIX
from bot.config import Settings
from bot.schedule.timing import judge
from bot.store import ReminderKind, ReminderStatus

KEY = "test:schedule"
MakeSettings = Callable[..., Settings]


async def test_wait_for_wakes_an_idle_session_with_a_new_turn(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    clock = FakeClock()
    wait = tool_use("wait_for", {"seconds": 600, "reason": "check the build"})
    fake.script(Reply.tools(wait), Reply.text_only("I'll look again in 10 minutes."), Reply.text_only("Green."))
    async with schedule_core(fake, settings, output, clock=clock) as core:
        await core.engine.run_turn(KEY, "check the build again in 10 minutes")
        assert tool_results(fake.requests[1])[wait["id"]].startswith("wait registered: 10m 0s, until ")
        (row,) = await core.store.pending_reminders(KEY)
        assert row.kind is ReminderKind.WAKE and not core.engine.is_busy(KEY)

        clock.advance(600)
        assert (await core.scheduler.fire(row.id)).delivered
        await output.wait_turns(KEY, 2)
    third = fake.requests[2]
    assert third["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "[wait elapsed: check the build]"}],
    }
    assert output.text(KEY).endswith("Green.")
    assert fake.rejections == [] and fake.pending == 0


async def test_wait_for_on_a_busy_session_arrives_as_a_mid_turn_note(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    clock = FakeClock()
    hold = asyncio.Event()
    fake.script(
        Reply.tools(tool_use("wait_for", {"seconds": 60, "reason": "poll the queue"})),
        Reply.text_only("Still working on the report…", hold=hold),
        Reply.text_only("Polled the queue too."),
    )
    async with schedule_core(fake, settings, output, clock=clock) as core:
        core.engine.submit(KEY, "write the report; poll the queue in a minute")
        await fake.wait_for_requests(2)  # the turn is now held mid-stream: busy
        (row,) = await core.store.pending_reminders(KEY)
        clock.advance(60)
        assert (await core.scheduler.fire(row.id)).delivered
        hold.set()
        (outcome,) = await output.wait_turns(KEY, 1)
    assert outcome.text == "Polled the queue too." and len(fake.requests) == 3
    assert f"{INJECTION_PREFIX} [wait elapsed: poll the queue]" in user_texts(fake.requests[2])
    assert fake.rejections == []


async def test_a_real_timer_brings_the_agent_back(
    fake: FakeAnthropic, make_settings: Callable[..., Settings], output: RecordingOutput
) -> None:
    settings = make_settings(bot_min_wait_s=0.2)  # below the default floor, to keep the test quick
    fake.script(Reply.tools(tool_use("wait_for", {"seconds": 0.2, "reason": "look again"})), Reply.text_only("ok"))
    async with schedule_core(fake, settings, output) as core:
        core.engine.submit(KEY, "look again in a moment")
        requests = await fake.wait_for_requests(3)
        await asyncio.wait_for(core.engine.settle(KEY), 10)
    assert any("[wait elapsed: look again]" in text for text in user_texts(requests[2]))


async def test_a_reminder_is_posted_without_a_model_call(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    fake.script(
        Reply.tools(tool_use("schedule_reminder", {"text": "stretch!", "in_seconds": 0.2})), Reply.text_only("Set.")
    )
    async with schedule_core(fake, settings, output) as core:
        await core.engine.run_turn(KEY, "remind me to stretch in a moment")
        await output.wait_for(lambda: bool(output.reminders))
        assert await core.store.pending_reminders(KEY) == []
    assert output.reminders == [(KEY, "stretch!")]
    assert len(fake.requests) == 2  # the turn that set it; nothing when it fired


async def test_due_during_downtime_fires_once_after_a_restart_marked_late(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    clock = FakeClock()
    fake.script(
        Reply.tools(
            tool_use("schedule_reminder", {"text": "water the plants", "in_seconds": 300}),
            tool_use("wait_for", {"seconds": 600, "reason": "check the deploy"}),
            tool_use("schedule_reminder", {"text": "hourly", "cron": "0 * * * *"}),
        ),
        Reply.text_only("All set."),
    )
    async with schedule_core(fake, settings, output, clock=clock) as core:
        await core.engine.run_turn(KEY, "set things up")
        assert len(await core.store.pending_reminders(KEY)) == 3

    clock.advance(3600 * 2)  # down for two hours
    fake.script(Reply.text_only("Deploy looks fine."))
    async with schedule_core(fake, settings, output, clock=clock) as core:
        await output.wait_for(lambda: len(output.reminders) == 2)
        await output.wait_turns(KEY, 2)
        (cron,) = await core.store.pending_reminders(KEY)  # only the cron is left, moved to its next run
        assert cron.cron == "0 * * * *" and cron.due_at > clock.now
    last_hour = clock.now.replace(minute=0, second=0, microsecond=0)  # the latest run of the hourly cron
    hourly = "hourly" + judge(last_hour, clock.now, max_lateness_s=settings.bot_max_lateness_s).marker
    assert sorted(texts(output.reminders, KEY)) == sorted(["water the plants (late by 1h 55m)", hourly])
    assert fake.requests[2]["messages"][-1]["content"] == [
        {"type": "text", "text": "[wait elapsed: check the deploy] (late by 1h 50m)"}
    ]

    async with schedule_core(fake, settings, output, clock=clock) as core:  # a third start delivers nothing again
        assert [r.id for r in await core.store.pending_reminders()] == [cron.id]
    assert len(output.reminders) == 2 and len(fake.requests) == 3


async def test_beyond_max_lateness_is_reported_missed(
    fake: FakeAnthropic, make_settings: MakeSettings, output: RecordingOutput
) -> None:
    settings = make_settings(bot_max_lateness_s=1800)
    clock = FakeClock()
    fake.script(Reply.tools(tool_use("wait_for", {"seconds": 60, "reason": "too late"})), Reply.text_only("ok"))
    async with schedule_core(fake, settings, output, clock=clock) as core:
        await core.engine.run_turn(KEY, "wait a minute")
        (row,) = await core.store.pending_reminders(KEY)

    clock.advance(3600)
    async with schedule_core(fake, settings, output, clock=clock) as core:
        await output.wait_for(lambda: bool(output.notices))
        stored = await core.store.get_reminder(row.id)
    assert stored is not None and stored.status is ReminderStatus.MISSED
    (notice,) = texts(output.notices, KEY)
    assert notice.startswith("⏰ A wait was missed (due ") and notice.endswith(
        "59m ago, too late to deliver): too late"
    )
    assert len(fake.requests) == 2  # the agent was not woken


async def test_the_tools_are_offered_with_the_contract_names(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    async with schedule_core(fake, settings, output) as core:
        await core.engine.run_turn(KEY, "hi")
    names = {spec["name"] for spec in fake.requests[0]["tools"]}
    assert {"wait_for", "wait_until", "schedule_reminder", "list_reminders", "cancel_reminder"} <= names
    assert "heartbeat" not in names
    wait_for = next(spec for spec in fake.requests[0]["tools"] if spec["name"] == "wait_for")
    assert wait_for["input_schema"]["required"] == ["seconds", "reason"]
    assert timedelta(seconds=settings.bot_max_wait_s) == timedelta(days=30)
