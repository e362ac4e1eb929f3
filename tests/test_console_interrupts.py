"""Ctrl-C in the console, on a real engine: calls first, then the turn, and "leave" only when nothing runs."""

from __future__ import annotations

import asyncio

from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use

from bot.console.interrupts import Interrupts
from bot.toolcall import CallStatus

KEY = "console:t"


async def test_ctrl_c_cancels_the_calls_then_the_turn(
    fake: FakeAnthropic, core_factory: CoreFactory, output: RecordingOutput
) -> None:
    first, second = tool_use("sleep_for", {"seconds": 30}), tool_use("sleep_for", {"seconds": 30})
    fake.script(Reply.tools(first), Reply.tools(second), Reply.text_only("never asked for"))
    core = await core_factory()
    said: list[str] = []
    interrupts = Interrupts(KEY, engine=core.engine, registry=core.registry, say=said.append)
    assert interrupts.press() is False, "nothing runs: Ctrl-C means leave"

    turn = asyncio.ensure_future(core.engine.run_turn(KEY, "sleep"))
    await output.wait_status(first["id"], CallStatus.RUNNING)
    assert interrupts.press() is True
    await output.wait_status(first["id"], CallStatus.CANCELLED)
    assert said == ["(cancelling running tool calls — Ctrl-C again stops the whole turn)"]

    await output.wait_status(second["id"], CallStatus.RUNNING)  # the model went on after the cancel
    assert interrupts.press() is True
    outcome = await asyncio.wait_for(turn, 10)
    assert outcome is not None and outcome.cancelled_by == "you (Ctrl-C)"
    assert output.statuses(second["id"])[-1] is CallStatus.CANCELLED
    assert len(fake.requests) == 2


async def test_ctrl_c_between_turns_cancels_calls_still_running_in_the_background(
    fake: FakeAnthropic, core_factory: CoreFactory, output: RecordingOutput
) -> None:
    sleep = tool_use("sleep_for", {"seconds": 30})
    fake.script(Reply.tools(sleep, tool_use("now", {})), Reply.text_only("Now is known."), Reply.text_only("Noted."))
    core = await core_factory(bot_yield_strategy="on_any_progress")
    said: list[str] = []
    interrupts = Interrupts(KEY, engine=core.engine, registry=core.registry, say=said.append)
    await core.engine.run_turn(KEY, "sleep and tell the time")
    assert not core.engine.is_busy(KEY) and core.registry.open_calls(KEY)
    assert interrupts.press() is True
    await output.wait_status(sleep["id"], CallStatus.CANCELLED)
    assert said == ["(cancelling the tool calls still running in the background)"]


async def test_ctrl_c_while_the_model_thinks_says_it_stops_nothing_yet(
    fake: FakeAnthropic, core_factory: CoreFactory, output: RecordingOutput
) -> None:
    thinking = asyncio.Event()
    fake.script(Reply.text_only("never finished", hold=thinking))
    core = await core_factory()
    said: list[str] = []
    interrupts = Interrupts(KEY, engine=core.engine, registry=core.registry, say=said.append)
    turn = asyncio.ensure_future(core.engine.run_turn(KEY, "think"))
    await fake.wait_for_requests(1)
    assert interrupts.press() is True
    assert said == ["(no tool call is running — Ctrl-C again stops the whole turn)"]
    assert core.engine.is_busy(KEY), "the first press stops nothing"
    assert interrupts.press() is True
    outcome = await asyncio.wait_for(turn, 10)
    assert outcome is not None and outcome.cancelled_by == "you (Ctrl-C)"
    assert len(said) == 1
    thinking.set()
