"""The turn loop end to end: open_core + the real anthropic SDK against the fake Messages API.

Every request the engine sends is validated by the fake (tool_use/tool_result pairing, alternating
roles, no sampling parameters), so each test also checks the protocol; each ends by asserting the
fake rejected nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import Failure, FakeAnthropic, Reply, system_text, text, tool_results, tool_use, user_texts

from bot.agent.engine import Delivery
from bot.agent.protocol import INJECTION_PREFIX
from bot.agent.turn import CONTINUE_NOTE
from bot.app import Core
from bot.toolcall import CallStatus
from bot.types import OwedPost

STOPS_S = 2.0
"""How soon cancelled work must be over in these tests: far inside the 30 s it would take, loose enough for a
loaded machine. The 100 ms target is a figure that bench/bench_calls.py prints, not a test's to time."""

KEY = "test:turns"
CONTRACT_TOOLS = {
    "now",
    "wordcount",
    "sleep_for",
    "get_tool_call_status",
    "list_running_tool_calls",
    "cancel_tool_call",
}


def last_user(request: dict[str, object]) -> list[dict[str, object]]:
    messages = request["messages"]
    assert isinstance(messages, list) and messages[-1]["role"] == "user"
    content = messages[-1]["content"]
    return [text(content)] if isinstance(content, str) else content


async def test_plain_turn(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    fake.script(Reply.text_only("Hello there, human."))
    outcome = await core.engine.run_turn(KEY, "hello")
    assert outcome is not None
    assert (outcome.text, outcome.stop_reason, outcome.error, outcome.iterations) == (
        "Hello there, human.",
        "end_turn",
        None,
        1,
    )
    assert output.text(KEY) == "Hello there, human."
    names = output.names(KEY)
    assert names[0] == "turn_started" and names[-2:] == ["text_done", "turn_finished"]
    assert names.count("text_delta") > 1  # streamed in pieces
    (request,) = fake.requests
    assert request["model"] == "claude-sonnet-5-5" and request["stream"] is True and request["max_tokens"] == 1024
    assert not {"temperature", "top_p", "top_k"} & set(request)
    assert "threadbot" in system_text(request)
    names = {t["name"] for t in request["tools"]}
    assert names >= CONTRACT_TOOLS and "run_command" not in names  # no shell unless enabled
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    history = await core.store.load_messages(KEY)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert fake.rejections == [] and fake.pending == 0


async def test_shell_tool_is_offered_only_when_enabled(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await core_factory(bot_enable_shell=True)
    await core.engine.run_turn(KEY, "hi")
    assert "run_command" in {t["name"] for t in fake.requests[0]["tools"]}


async def test_tool_turn_text_then_tools_then_answer(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    count = tool_use("wordcount", {"text": "one two three"})
    fake.script(Reply.tools(count, text="Counting."), Reply.text_only("Three words."))
    outcome = await core.engine.run_turn(KEY, "count 'one two three'")
    assert outcome is not None and outcome.text == "Three words." and outcome.iterations == 2
    assert json.loads(tool_results(fake.requests[1])[count["id"]]) == {"words": 3}
    assert output.text(KEY) == "Counting.Three words."
    assert ("calls_started", (KEY, [count["id"]])) in output.events
    names = [name for name in output.names(KEY) if name in {"model_call_started", "text_delta", "calls_started"}]
    squeezed = [name for i, name in enumerate(names) if i == 0 or name != names[i - 1]]
    assert squeezed == ["model_call_started", "text_delta", "calls_started", "model_call_started", "text_delta"], (
        "the edge hears of each model call before it streams"
    )
    assert output.statuses(count["id"])[-1] is CallStatus.COMPLETED
    assert fake.rejections == []


async def test_two_sleeps_in_one_turn_run_concurrently(core: Core, fake: FakeAnthropic) -> None:
    duration = 1.0
    first, second = tool_use("sleep_for", {"seconds": duration}), tool_use("sleep_for", {"seconds": duration})
    fake.script(Reply.tools(first, second), Reply.text_only("Both done."))
    outcome = await core.engine.run_turn(KEY, "sleep twice")
    assert outcome is not None and outcome.text == "Both done."
    between = fake.request_times[1] - fake.request_times[0]
    assert duration <= between < 1.8 * duration, between
    results = tool_results(fake.requests[1])
    assert results == {first["id"]: "slept for 1s", second["id"]: "slept for 1s"}
    assert fake.rejections == []


async def test_injection_reaches_the_next_request_after_the_tool_result(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_yield_on_injection=False)
    sleep = tool_use("sleep_for", {"seconds": 0.5})
    fake.script(Reply.tools(sleep), Reply.text_only("Noted."))
    assert core.engine.submit(KEY, "sleep a bit").value == "started"
    await output.wait_status(sleep["id"], CallStatus.RUNNING)
    assert core.engine.submit(KEY, "also, make it quick") is Delivery.INJECTED
    (outcome,) = await output.wait_turns(KEY, 1)
    assert outcome.text == "Noted."
    content = last_user(fake.requests[1])
    assert content == [
        {"type": "tool_result", "tool_use_id": sleep["id"], "content": "slept for 0.5s"},
        {"type": "text", "text": f"{INJECTION_PREFIX} also, make it quick"},
    ]
    assert fake.rejections == []


async def test_injection_yields_at_once_with_a_placeholder(
    core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    sleep = tool_use("sleep_for", {"seconds": 1.5})
    fake.script(Reply.tools(sleep), Reply.text_only("Will do, once it finishes."), Reply.text_only("All done."))
    core.engine.submit(KEY, "sleep, then report")
    await output.wait_status(sleep["id"], CallStatus.RUNNING)
    assert core.engine.submit(KEY, "actually, tell me when it is done") is Delivery.INJECTED
    await fake.wait_for_requests(2)
    content = last_user(fake.requests[1])
    assert content[0]["type"] == "tool_result" and content[0]["tool_use_id"] == sleep["id"]
    placeholder = json.loads(content[0]["content"])  # type: ignore[arg-type]
    # still running when the model was asked again: the injection did not wait for the 1.5 s tool
    assert placeholder["status"] == "running" and placeholder["tool_call_id"] == sleep["id"]
    assert "get_tool_call_status" in placeholder["message"]
    assert content[1:] == [{"type": "text", "text": f"{INJECTION_PREFIX} actually, tell me when it is done"}]
    # the call goes on in the background; when it finishes the idle session gets a turn of its own
    outcomes = await output.wait_turns(KEY, 2)
    assert [o.text for o in outcomes] == ["Will do, once it finishes.", "All done."]
    notes = [t for t in user_texts(fake.requests[2]) if t.startswith("[background tool result]")]
    assert notes == [
        f"[background tool result] sleep_for (tool_call_id {sleep['id']}) finished: completed\nslept for 1.5s"
    ]
    assert fake.rejections == []


async def test_cancel_running_sleep_stops_it_mid_sleep(
    core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    sleep = tool_use("sleep_for", {"seconds": 30})
    fake.script(Reply.tools(sleep), Reply.text_only("Stopped, as you asked."))
    core.engine.submit(KEY, "sleep a long time")
    await output.wait_status(sleep["id"], CallStatus.RUNNING)
    start = time.perf_counter()
    results = await core.engine.cancel_calls(KEY, by="user")
    assert time.perf_counter() - start < STOPS_S
    assert [(r.tool_call_id, r.cancelled, r.previous_status) for r in results] == [
        (sleep["id"], True, CallStatus.RUNNING)
    ]
    (outcome,) = await output.wait_turns(KEY, 1)
    assert outcome.text == "Stopped, as you asked." and outcome.cancelled_by is None
    block = last_user(fake.requests[1])[0]
    assert block == {
        "type": "tool_result",
        "tool_use_id": sleep["id"],
        "content": "cancelled by user",
        "is_error": True,
    }
    assert fake.rejections == []


async def test_cancel_turn_stops_calls_and_the_turn(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    sleep = tool_use("sleep_for", {"seconds": 30})
    fake.script(Reply.tools(sleep))
    core.engine.submit(KEY, "sleep a long time")
    await output.wait_status(sleep["id"], CallStatus.RUNNING)
    start = time.perf_counter()
    await core.engine.cancel_turn(KEY, by="user")
    (outcome,) = await output.wait_turns(KEY, 1)
    assert time.perf_counter() - start < STOPS_S
    assert outcome.cancelled_by == "user" and len(fake.requests) == 1
    history = await core.store.load_messages(KEY)
    assert history[-1] == {"role": "assistant", "content": [{"type": "text", "text": "(turn cancelled by user)"}]}
    # the session stays usable and its history valid
    fake.script(Reply.text_only("Back."))
    again = await core.engine.run_turn(KEY, "hello again")
    assert again is not None and again.text == "Back." and again.cancelled_by is None
    assert fake.rejections == []


async def test_cancel_turn_while_the_model_streams(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    fake.script(Reply.text_only("This answer never ends.", hold=asyncio.Event()))
    core.engine.submit(KEY, "talk")
    await output.wait_for(lambda: "text_delta" in output.names(KEY))
    start = time.perf_counter()
    await core.engine.cancel_turn(KEY, by="user")
    (outcome,) = await output.wait_turns(KEY, 1)
    assert time.perf_counter() - start < STOPS_S and outcome.cancelled_by == "user"
    await core.engine.run_turn(KEY, "hello?")
    assert fake.rejections == []


async def test_unknown_tool_and_bad_arguments_are_error_results(core: Core, fake: FakeAnthropic) -> None:
    unknown = tool_use("teleport", {"to": "mars"})
    bad = tool_use("wordcount", {"txt": "typo"})
    fake.script(Reply.tools(unknown, bad), Reply.text_only("Sorry about that."))
    outcome = await core.engine.run_turn(KEY, "go")
    assert outcome is not None and outcome.text == "Sorry about that." and outcome.error is None
    blocks = {b["tool_use_id"]: b for b in last_user(fake.requests[1])}
    assert blocks[unknown["id"]]["is_error"] is True
    fence = '<untrusted source="tool" name="teleport">\n'  # a tool not the daemon's own: its errors are fenced
    assert str(blocks[unknown["id"]]["content"]).startswith(f"{fence}error: unknown tool 'teleport'")
    assert blocks[bad["id"]]["is_error"] is True
    assert "invalid arguments for wordcount" in str(blocks[bad["id"]]["content"])
    assert fake.rejections == []


async def test_overloaded_then_success_is_retried_by_the_sdk(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await core_factory(max_retries=2)
    fake.script(Failure(529), Reply.text_only("Made it."))
    outcome = await core.engine.run_turn(KEY, "hi")
    assert outcome is not None and outcome.text == "Made it." and outcome.error is None
    assert len(fake.requests) == 2 and fake.rejections == []


async def test_model_failure_after_retries_ends_the_turn_and_the_session_recovers(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(max_retries=2)
    fake.script(Failure(529), Failure(529), Failure(529))
    outcome = await core.engine.run_turn(KEY, "hi")
    assert outcome is not None and len(fake.requests) == 3
    assert outcome.error == "the model is overloaded right now; please try again in a minute"
    assert output.notices == [(KEY, "⚠️ Model error: the model is overloaded right now; please try again in a minute")]
    fake.script(Reply.text_only("I am back."))
    again = await core.engine.run_turn(KEY, "hi again")
    assert again is not None and again.text == "I am back." and again.error is None
    assert [m["role"] for m in fake.requests[-1]["messages"]] == ["user", "assistant", "user"]
    assert fake.rejections == []


async def test_rejected_request_is_a_clear_error(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    fake.script(Failure(400, "invalid_request_error", "max_tokens: must be at most 64000"))
    outcome = await core.engine.run_turn(KEY, "hi")
    assert outcome is not None
    assert outcome.error == "the model rejected the request: max_tokens: must be at most 64000"
    assert output.notices[-1][1].startswith("⚠️ Model error: the model rejected the request")


async def test_too_long_is_compacted_and_asked_again_once(
    core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    too_long = Failure(400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum")
    fake.script(too_long, Reply.text_only("fits now"))
    outcome = await core.engine.run_turn(KEY, "hi")
    assert outcome is not None and outcome.text == "fits now" and outcome.error is None
    # Now there is an earlier turn to summarise: refused, summary written, refused again → one clear line.
    fake.script(too_long, Reply.text_only("they said hi"), too_long)
    outcome = await core.engine.run_turn(KEY, "hi again")
    assert outcome is not None and outcome.error == "this conversation no longer fits the model's context window"
    assert "they said hi" in user_texts(fake.requests[-1])[0]


async def test_tool_arguments_that_are_not_an_object_fail_that_call_not_the_turn(
    core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    # The SDK's typed stream raised while partly parsing `"not json at all"`, which ended the whole turn.
    bad = tool_use("wordcount", "not json at all")  # type: ignore[arg-type]
    fake.script(Reply.tools(bad), Reply.text_only("Fine now."))
    outcome = await core.engine.run_turn(KEY, "hi")
    assert outcome is not None and outcome.error is None and outcome.text == "Fine now."
    assert tool_results(fake.requests[1]) == {
        bad["id"]: "error: the tool call was malformed (missing id or arguments not a JSON object)"
    }
    assert output.notices == [] and fake.rejections == []


async def test_max_tokens_is_continued(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    fake.script(Reply.text_only("The first half, ", stop_reason="max_tokens"), Reply.text_only("the second half."))
    outcome = await core.engine.run_turn(KEY, "write a lot")
    assert outcome is not None and outcome.stop_reason == "end_turn"
    assert outcome.text == "The first half, the second half."
    assert user_texts(fake.requests[1])[-1] == CONTINUE_NOTE
    assert fake.requests[1]["messages"][-2] == {"role": "assistant", "content": [text("The first half, ")]}
    assert output.notices == [] and fake.rejections == []


async def test_max_tokens_gives_up_after_two_continuations(
    core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    fake.script(*(Reply.text_only(f"part {i} ", stop_reason="max_tokens") for i in range(3)))
    outcome = await core.engine.run_turn(KEY, "write forever")
    assert outcome is not None and outcome.stop_reason == "max_tokens" and len(fake.requests) == 3
    assert output.notices == [(KEY, "The answer was cut off at the output limit.")]
    assert fake.rejections == []


async def test_max_tokens_after_a_whole_tool_call_runs_it(core: Core, fake: FakeAnthropic) -> None:
    """Only a call whose JSON was cut off is refused; one the model finished before the limit runs."""
    whole = tool_use("wordcount", {"text": "one two"})
    fake.script(Reply([text("Counting."), whole], "max_tokens"), Reply.text_only("Two words."))
    outcome = await core.engine.run_turn(KEY, "go")
    assert outcome is not None and outcome.text == "Two words."
    call = await core.registry.find(whole["id"])
    assert call is not None and call.status is CallStatus.COMPLETED
    assert whole["id"] in tool_results(fake.requests[1]) and fake.rejections == []


async def test_refusal(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    fake.script(Reply.text_only("I can't help with that.", stop_reason="refusal"))
    outcome = await core.engine.run_turn(KEY, "something bad")
    assert outcome is not None and outcome.stop_reason == "refusal" and outcome.text == "I can't help with that."
    assert output.notices == [(KEY, "The model declined to continue with this request.")]
    fake.script(Reply.text_only("Sure."))
    again = await core.engine.run_turn(KEY, "something fine")
    assert again is not None and again.text == "Sure." and fake.rejections == []


async def test_pause_turn_is_resumed(core: Core, fake: FakeAnthropic) -> None:
    fake.script(Reply.text_only("Working on it…", stop_reason="pause_turn"), Reply.text_only("Finished."))
    outcome = await core.engine.run_turn(KEY, "long task")
    assert outcome is not None and outcome.text == "Working on it…Finished." and len(fake.requests) == 2
    assert fake.requests[1]["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Working on it…"}],
    }
    await core.engine.run_turn(KEY, "and then?")  # the paused reply and its continuation are stored as one message
    assert [m["role"] for m in fake.requests[2]["messages"]] == ["user", "assistant", "user"]
    assert fake.rejections == []


async def test_iteration_cap(core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput) -> None:
    core = await core_factory(bot_max_iterations=2)
    fake.script(Reply.tools(tool_use("now", {})), Reply.tools(tool_use("now", {})))
    outcome = await core.engine.run_turn(KEY, "loop forever")
    assert outcome is not None and outcome.error == "iteration limit reached" and len(fake.requests) == 2
    assert output.notices == [(KEY, "Stopped after 2 steps without finishing.")]
    await core.engine.run_turn(KEY, "and now?")  # the closed history is valid
    assert fake.rejections == []


async def test_tool_results_are_truncated(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await core_factory(bot_enable_shell=True, bot_tool_result_max_chars=200)
    seq = tool_use("run_command", {"command": "seq 1 500"})
    fake.script(Reply.tools(seq), Reply.text_only("Long."))
    await core.engine.run_turn(KEY, "count")
    content = tool_results(fake.requests[1])[seq["id"]]
    opening = '<untrusted source="tool" name="run_command">\n'
    assert content.startswith(opening) and content.endswith("\n</untrusted>"), "the shell's output is fenced"
    head, _, note = content.removeprefix(opening).removesuffix("\n</untrusted>").partition("\n[truncated: ")
    assert len(head) == 200 and note.endswith(" more characters not shown]")
    assert fake.rejections == []


async def test_history_survives_a_restart_of_the_store(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    first = await core_factory()
    count = tool_use("wordcount", {"text": "a b"})
    fake.script(Reply.tools(count), Reply.text_only("Two words. I'll remember 42."))
    await first.engine.run_turn(KEY, "count 'a b' and remember 42")
    before = fake.requests[-1]["messages"] + [{"role": "assistant", "content": [text("Two words. I'll remember 42.")]}]
    await core_factory.close(first)

    second = await core_factory(settings=first.settings)
    fake.script(Reply.text_only("You said 42."))
    outcome = await second.engine.run_turn(KEY, "what number?")
    assert outcome is not None and outcome.text == "You said 42."
    messages = fake.requests[-1]["messages"]
    assert messages[:-1] == before
    assert messages[-1] == {"role": "user", "content": [text("what number?")]}
    assert fake.rejections == []


async def test_injections_fuse_caps_notes_per_turn(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_max_injections_per_turn=2, bot_yield_on_injection=False)
    sleep = tool_use("sleep_for", {"seconds": 0.3})
    fake.script(Reply.tools(sleep), Reply.text_only("first"), Reply.text_only("second"), Reply.text_only("third"))
    core.engine.submit(KEY, "sleep")
    await output.wait_status(sleep["id"], CallStatus.RUNNING)
    for i in range(5):
        assert core.engine.submit(KEY, f"note {i}") is Delivery.INJECTED
    outcomes = await output.wait_turns(KEY, 3)
    assert [o.text for o in outcomes] == ["first", "second", "third"]
    per_request = [[t for t in user_texts(r) if t.startswith(INJECTION_PREFIX)] for r in fake.requests]
    new_per_request = [len(now) - len(before) for before, now in zip([[], *per_request], per_request, strict=False)]
    assert new_per_request == [0, 2, 2, 1]  # at most two new notes per turn, every note once
    assert per_request[-1] == [f"{INJECTION_PREFIX} note {i}" for i in range(5)]
    assert fake.rejections == []


async def test_adjacent_user_content_is_merged(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    core.engine.submit(KEY, "hello")
    assert core.engine.submit(KEY, "and one more thing") is Delivery.INJECTED  # before the first request goes out
    await output.wait_turns(KEY, 1)
    assert fake.requests[0]["messages"] == [
        {"role": "user", "content": [text("hello"), text(f"{INJECTION_PREFIX} and one more thing")]}
    ]
    assert fake.rejections == []


@pytest.mark.parametrize("content", ["plain", [text("as"), text("blocks")]])
async def test_content_as_text_or_blocks(core: Core, fake: FakeAnthropic, content: object) -> None:
    await core.engine.run_turn(KEY, content)  # type: ignore[arg-type]
    expected = [text("plain")] if content == "plain" else content
    assert fake.requests[0]["messages"] == [{"role": "user", "content": expected}]


async def test_a_turn_that_fails_before_the_model_is_reported_and_the_session_recovers(
    core: Core, fake: FakeAnthropic, output: RecordingOutput, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(key: str) -> list[dict[str, object]]:
        raise OSError("disk unplugged")

    with monkeypatch.context() as patch:
        patch.setattr(core.store, "load_messages", broken)
        outcome = await core.engine.run_turn(KEY, "hello?")
    assert outcome is not None and outcome.error == "internal error (OSError)"
    assert output.notices and "went wrong" in output.notices[-1][1]
    assert output.outcomes[-1] is outcome, "the edge hears the turn ended (Slack clears 'is thinking…')"
    fake.script(Reply.text_only("Back."))
    again = await core.engine.run_turn(KEY, "and now?")
    assert again is not None and again.text == "Back." and fake.rejections == []


async def test_the_last_save_owes_what_the_edge_still_holds_and_names_it_to_the_edge(
    core: Core, output: RecordingOutput, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`EngineOutput.owed_posts` is owed by the turn's last save (bot/agent/turn.py); when that save fails, the
    posts are still owed on their own, so a store that fails once does not silence the answer."""
    output.unsent = [OwedPost(KEY, "C1", "1.0", "the answer")]
    outcome = await core.engine.run_turn(KEY, "hello")
    assert outcome is not None and outcome.owed_posts
    assert [(m.id, m.text) for m in await core.store.owed_messages()] == [(outcome.owed_posts[0], "the answer")]

    append = core.store.append_messages
    failures = []

    async def fails_once(*args: Any, **kwargs: Any) -> list[int]:
        if kwargs.get("owed") and not failures:  # the turn's last save, once
            failures.append(kwargs)
            raise OSError("disk hiccup")
        return await append(*args, **kwargs)

    monkeypatch.setattr(core.store, "append_messages", fails_once)
    output.unsent = [OwedPost(KEY, "C1", "1.0", "the next answer")]
    outcome = await core.engine.run_turn(KEY, "again")
    assert failures and outcome is not None and len(outcome.owed_posts) == 1
    assert [m.text for m in await core.store.owed_messages()] == ["the answer", "the next answer"]
