"""A model stream that hangs, pings without progress, or breaks off mid-tool-input, through the real SDK.

Each case ends with one clear line for the session, within the configured bound, and the session
answers its next message: a stuck or cut-off answer costs that turn, never the thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, text, tool_results, tool_use
from test_console import bot_env, run_bot

from bot.agent.turn import INCOMPLETE_CALL
from bot.app import Core
from bot.model.stream_reader import StreamReader, StreamStalled, ToolInputs
from bot.toolcall import CallStatus
from tools.base import Tool, ToolContext

KEY = "test:stream"
IDLE_S = 0.4
SLACK_S = 5.0
"""Generous room over a bound on a loaded machine: the point is that it ends, not to time it."""


async def _hung_turn_ends(core: Core, fake: FakeAnthropic, output: RecordingOutput, how: str) -> None:
    fake.script(Reply.stalled(how))  # type: ignore[arg-type]
    started = time.monotonic()
    outcome = await core.engine.run_turn(KEY, "hello?")
    elapsed = time.monotonic() - started
    assert outcome is not None and outcome.error is not None
    assert f"nothing for {IDLE_S:g}s" in outcome.error
    assert output.notices == [(KEY, f"⚠️ Model error: {outcome.error}")]
    assert fake.stalls == 1 and len(fake.requests) == 1
    assert IDLE_S <= elapsed < IDLE_S + SLACK_S
    fake.script(Reply.text_only("Here I am."))
    again = await core.engine.run_turn(KEY, "still there?")
    assert again is not None and again.text == "Here I am." and again.error is None
    assert fake.rejections == []


async def test_a_silent_stream_ends_with_a_clear_line(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_model_idle_timeout_s=IDLE_S)
    await _hung_turn_ends(core, fake, output, "silent")


async def test_a_stream_of_only_pings_is_no_progress(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_model_idle_timeout_s=IDLE_S)
    await _hung_turn_ends(core, fake, output, "pings")


async def test_the_request_deadline_bounds_a_slow_trickle(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    # 2 s, not less: the answer after it must fit the same deadline on a loaded machine.
    core = await core_factory(bot_model_idle_timeout_s=30, bot_model_timeout_s=2)
    fake.script(Reply.stalled("pings"))
    started = time.monotonic()
    outcome = await core.engine.run_turn(KEY, "hello?")
    assert time.monotonic() - started < 2 + SLACK_S
    assert outcome is not None and outcome.error == "the model did not finish its answer within 2s; please try again"
    assert output.notices == [(KEY, f"⚠️ Model error: {outcome.error}")]
    fake.script(Reply.text_only("Back."))
    again = await core.engine.run_turn(KEY, "again")
    assert again is not None and again.text == "Back."


async def test_a_stall_before_any_content_is_retried(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_model_idle_timeout_s=IDLE_S, max_retries=1)
    fake.script(Reply([], stall="silent"), Reply.text_only("Second time lucky."))
    outcome = await core.engine.run_turn(KEY, "hello?")
    assert outcome is not None and outcome.text == "Second time lucky." and outcome.error is None
    assert len(fake.requests) == 2 and output.notices == []


# --- incomplete tool input never runs ---------------------------------------------------------


def _spy_sleep_for(core: Core) -> list[dict[str, Any]]:
    """Replace `sleep_for` by a tool with the same schema that records each run instead of sleeping."""
    runs: list[dict[str, Any]] = []
    real = core.toolbox.get("sleep_for")
    assert real is not None

    async def record(args: dict[str, Any], ctx: ToolContext) -> str:
        runs.append(args)
        return "slept"

    core.toolbox.add(Tool(real.name, real.description, real.input_schema, record))
    return runs


async def _cut_call_is_an_error_result(core: Core, fake: FakeAnthropic, *, disconnect: bool) -> None:
    runs = _spy_sleep_for(core)
    cut = tool_use("sleep_for", {"seconds": 10})  # `{"seconds": 1` is what arrives: valid-looking, and wrong
    fake.script(Reply.cut_tool_input(cut, keep_chars=13, disconnect=disconnect), Reply.text_only("Trying again."))
    outcome = await core.engine.run_turn(KEY, "sleep ten seconds")
    assert outcome is not None and outcome.text == "Trying again." and outcome.error is None
    assert runs == []
    call = await core.registry.find(cut["id"])
    assert call is not None and call.status is CallStatus.FAILED and call.started_at is None
    assert call.error == INCOMPLETE_CALL
    follow_up = fake.requests[1]
    assert tool_results(follow_up) == {cut["id"]: f"error: {INCOMPLETE_CALL}"}
    result = follow_up["messages"][-1]["content"][0]
    assert result["is_error"] is True
    assert fake.rejections == []


def test_each_call_input_is_parsed_once_when_its_block_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda text: parsed.append(text) or loads(text))
    inputs = ToolInputs()
    for index, partial in enumerate(['{"a": 1}', '{"a": ', "", '{"b"']):
        inputs.start(index, {"type": "tool_use", "id": f"t{index}"})
        inputs.add(index, partial)
    for index in (0, 1, 2):  # t3 is cut off before its block closes
        inputs.close(index)
    assert inputs.inputs() == {0: {"a": 1}, 1: {}, 3: {}}, "t2 streamed no input: its own stands"
    assert inputs.incomplete() == {"t1", "t3"}
    assert parsed == ['{"a": 1}', '{"a": '], "each closed input parsed once, however often it is asked for"


async def test_a_tool_call_cut_by_the_output_limit_is_not_run(core: Core, fake: FakeAnthropic) -> None:
    await _cut_call_is_an_error_result(core, fake, disconnect=False)


async def test_a_tool_call_cut_by_a_broken_stream_is_not_run(core: Core, fake: FakeAnthropic) -> None:
    await _cut_call_is_an_error_result(core, fake, disconnect=True)


async def test_the_whole_calls_of_a_cut_reply_still_run(core: Core, fake: FakeAnthropic) -> None:
    runs = _spy_sleep_for(core)
    whole, cut = tool_use("now", {}), tool_use("sleep_for", {"seconds": 10})
    fake.script(Reply.cut_tool_input(whole, cut, keep_chars=5, disconnect=True), Reply.text_only("Done."))
    outcome = await core.engine.run_turn(KEY, "time, then sleep")
    assert outcome is not None and outcome.text == "Done." and runs == []
    results = tool_results(fake.requests[1])
    assert results[cut["id"]] == f"error: {INCOMPLETE_CALL}"
    assert not str(results[whole["id"]]).startswith("error")
    assert fake.rejections == []


async def test_a_broken_stream_without_tool_calls_is_a_clear_error(
    core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    fake.script(Reply([text("The answer is")], disconnect=True))
    outcome = await core.engine.run_turn(KEY, "tell me")
    assert outcome is not None and outcome.error == "the model's answer broke off mid-stream; please try again"
    fake.script(Reply.text_only("The answer is 42."))
    again = await core.engine.run_turn(KEY, "tell me again")
    assert again is not None and again.text == "The answer is 42." and fake.rejections == []


async def test_oneshot_reports_a_hung_stream_and_the_session_goes_on(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(Reply.stalled("silent"), Reply.text_only("Answered."))
    env = bot_env(fake, tmp_path, BOT_MODEL_IDLE_TIMEOUT_S="0.5")
    code, out, err = await run_bot("oneshot", "--session", "hang", "hello?", env=env, cwd=tmp_path)
    report = json.loads(out)
    assert code == 1, err
    assert report["error"] == "the model stopped sending its answer (nothing for 0.5s); please try again"
    code, out, err = await run_bot("oneshot", "--session", "hang", "hello again", env=env, cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["text"] == "Answered."


# --- the idle bound is per event ----------------------------------------------------------------------


async def _trickle(gap_s: float, count: int, then_silent: bool) -> AsyncIterator[dict[str, Any]]:
    yield {"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 1}}}
    yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    for k in range(count):
        await asyncio.sleep(gap_s)
        yield {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"{k} "}}
    if then_silent:
        await asyncio.Event().wait()
    yield {"type": "message_stop"}


async def test_a_stream_that_keeps_coming_is_never_idle_however_long_it_takes() -> None:
    reader = StreamReader(on_text=None)
    started = time.monotonic()
    await reader.read(_trickle(IDLE_S / 4, 12, then_silent=False), IDLE_S)  # 3 idle bounds in all
    assert time.monotonic() - started >= 3 * IDLE_S
    assert reader.finished and reader.content() == [text("0 1 2 3 4 5 6 7 8 9 10 11 ")]


async def test_the_idle_bound_counts_from_the_last_event() -> None:
    reader = StreamReader(on_text=None)
    started = time.monotonic()
    with pytest.raises(StreamStalled):
        await reader.read(_trickle(IDLE_S / 4, 8, then_silent=True), IDLE_S)
    assert time.monotonic() - started >= 2 * IDLE_S + IDLE_S  # 2 bounds of events, then one of silence
    assert reader.produced and not reader.finished
