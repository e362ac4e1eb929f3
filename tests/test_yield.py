"""Yield strategies, background delivery and the system tools, through the whole engine."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use, user_texts

from bot.app import Core
from bot.toolcall import CallStatus

KEY = "test:yield"
NOTE = "[background tool result]"


def last_user_texts(request: dict[str, Any]) -> list[str]:
    content = request["messages"][-1]["content"]
    return [b["text"] for b in content if b.get("type") == "text"]


def background_notes(fake: FakeAnthropic, call_id: str) -> list[int]:
    """Indexes of the requests whose newest user message delivers `call_id`'s late result."""
    return [
        i
        for i, request in enumerate(fake.requests)
        if any(t.startswith(NOTE) and call_id in t for t in last_user_texts(request))
    ]


def assert_never_repeated(fake: FakeAnthropic, call_id: str) -> None:
    for request in fake.requests:
        assert sum(1 for t in user_texts(request) if t.startswith(NOTE) and call_id in t) <= 1


async def test_when_all_done_waits_for_the_whole_batch(core: Core, fake: FakeAnthropic) -> None:
    short, long = tool_use("sleep_for", {"seconds": 0.1}), tool_use("sleep_for", {"seconds": 0.6})
    fake.script(Reply.tools(short, long), Reply.text_only("Both finished."))
    outcome = await core.engine.run_turn(KEY, "sleep twice")
    assert outcome is not None and outcome.text == "Both finished." and outcome.pending_call_ids == []
    assert fake.request_times[1] - fake.request_times[0] >= 0.6
    assert tool_results(fake.requests[1]) == {short["id"]: "slept for 0.1s", long["id"]: "slept for 0.6s"}
    assert fake.rejections == []


async def test_on_any_progress_yields_after_the_first_and_delivers_the_late_result_once(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_yield_strategy="on_any_progress")
    quick, slow = tool_use("sleep_for", {"seconds": 0.1}), tool_use("sleep_for", {"seconds": 1.0})
    fake.script(
        Reply.tools(quick, slow),
        Reply.text_only("The quick one is done; the slow one is still going."),
        Reply.text_only("The slow one is done too."),
        Reply.text_only("Nothing new."),
    )
    core.engine.submit(KEY, "sleep twice")
    await fake.wait_for_requests(2)
    results = tool_results(fake.requests[1])
    assert results[quick["id"]] == "slept for 0.1s"
    placeholder = json.loads(results[slow["id"]])  # the model was asked again while the slow one ran
    assert placeholder["status"] == "running" and placeholder["tool_call_id"] == slow["id"]
    # the first turn ends; when the slow call finishes, the idle session starts a turn on its own
    outcomes = await output.wait_turns(KEY, 2)
    assert outcomes[1].text == "The slow one is done too."
    assert output.names(KEY).count("turn_started") == 2
    assert background_notes(fake, slow["id"]) == [2]
    assert last_user_texts(fake.requests[2]) == [
        f"{NOTE} sleep_for (tool_call_id {slow['id']}) finished: completed\nslept for 1s"
    ]
    slow_call = await core.registry.find(slow["id"])
    assert slow_call is not None and slow_call.delivered
    # a later turn does not get it again
    await core.engine.run_turn(KEY, "anything else?")
    assert background_notes(fake, slow["id"]) == [2]
    assert_never_repeated(fake, slow["id"])
    assert background_notes(fake, quick["id"]) == []
    assert fake.rejections == [] and fake.pending == 0


async def test_result_read_with_get_tool_call_status_is_not_delivered_again(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_yield_strategy="on_any_progress")
    quick, slow = tool_use("sleep_for", {"seconds": 0.05}), tool_use("sleep_for", {"seconds": 0.6})
    status = tool_use("get_tool_call_status", {"tool_call_id": slow["id"], "wait_for_completion": True})
    fake.script(Reply.tools(quick, slow), Reply.tools(status), Reply.text_only("Both done."))
    outcome = await core.engine.run_turn(KEY, "sleep twice and wait for the slow one")
    assert outcome is not None and outcome.text == "Both done."
    view = json.loads(tool_results(fake.requests[2])[status["id"]])
    assert view["status"] == "completed" and view["result"] == "slept for 0.6s" and view["is_final"] is True
    await core.engine.settle(KEY)  # would start a delivery turn if the result were still owed
    assert len(fake.requests) == 3
    await core.engine.run_turn(KEY, "and now?")
    assert background_notes(fake, slow["id"]) == []
    assert fake.rejections == []


async def test_on_timeout_yields_when_the_time_is_up(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_yield_strategy="on_timeout:300")
    slow = tool_use("sleep_for", {"seconds": 30})
    fake.script(Reply.tools(slow), Reply.text_only("Still sleeping; I'll stop it."), Reply.text_only("Cancelled."))
    core.engine.submit(KEY, "sleep long")
    await fake.wait_for_requests(2)
    waited = fake.request_times[1] - fake.request_times[0]
    assert 0.3 <= waited < 1.0, waited
    assert json.loads(tool_results(fake.requests[1])[slow["id"]])["status"] == "running"
    await output.wait_turns(KEY, 1)
    await core.engine.cancel_calls(KEY, by="user")
    outcomes = await output.wait_turns(KEY, 2)  # the cancellation is news for the idle session
    assert outcomes[1].text == "Cancelled."
    assert last_user_texts(fake.requests[2]) == [
        f"{NOTE} sleep_for (tool_call_id {slow['id']}) finished: cancelled\ncancelled by user"
    ]
    assert fake.rejections == []


async def test_on_timeout_yields_earlier_when_a_call_finishes(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await core_factory(bot_yield_strategy="on_timeout:5000")
    quick, slow = tool_use("sleep_for", {"seconds": 0.1}), tool_use("sleep_for", {"seconds": 30})
    fake.script(Reply.tools(quick, slow), Reply.tools(tool_use("cancel_tool_call", {"tool_call_id": slow["id"]})))
    outcome = await core.engine.run_turn(KEY, "sleep twice")
    assert outcome is not None
    assert fake.request_times[1] - fake.request_times[0] < 1.0
    results = tool_results(fake.requests[1])
    assert results[quick["id"]] == "slept for 0.1s" and json.loads(results[slow["id"]])["status"] == "running"
    assert fake.rejections == []


async def test_a_single_finished_call_is_no_reason_to_wait(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    """With every call final at once (a failed entity), no strategy waits."""
    core = await core_factory(bot_yield_strategy="on_timeout:5000")
    fake.script(Reply.tools(tool_use("no_such_tool", {})), Reply.text_only("ok"))
    await core.engine.run_turn(KEY, "go")
    assert fake.request_times[1] - fake.request_times[0] < 1.0 and fake.rejections == []


async def test_background_result_of_an_idle_session_starts_a_turn(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_yield_strategy="on_timeout:100")
    sleep = tool_use("sleep_for", {"seconds": 0.5})
    fake.script(Reply.tools(sleep), Reply.text_only("I'll tell you when it's done."), Reply.text_only("Done now."))
    first = await core.engine.run_turn(KEY, "sleep in the background")
    assert first is not None and first.text == "I'll tell you when it's done."
    assert not core.engine.is_busy(KEY)
    await output.wait_turns(KEY, 2)
    assert output.finished(KEY)[1].text == "Done now."
    assert background_notes(fake, sleep["id"]) == [2]
    # the delivery turn opens with the late result alone
    assert fake.requests[2]["messages"][-1]["content"] == [
        {"type": "text", "text": f"{NOTE} sleep_for (tool_call_id {sleep['id']}) finished: completed\nslept for 0.5s"}
    ]
    assert fake.rejections == []


async def test_get_tool_call_status_with_and_without_waiting(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    # on_any_progress: the first batch yields when the quick call is done; each later batch holds one
    # status call, so the batch waits exactly as long as that call does.
    core = await core_factory(bot_yield_strategy="on_any_progress")
    quick, sleep = tool_use("sleep_for", {"seconds": 0.05}), tool_use("sleep_for", {"seconds": 1.2})
    peek = tool_use("get_tool_call_status", {"tool_call_id": sleep["id"]})
    short_wait = tool_use(
        "get_tool_call_status",
        {"tool_call_id": sleep["id"], "wait_for_completion": True, "timeout_seconds": 0.1, "include_progress": False},
    )
    wait = tool_use("get_tool_call_status", {"tool_call_id": sleep["id"], "wait_for_completion": True})
    fake.script(
        Reply.tools(quick, sleep), Reply.tools(peek), Reply.tools(short_wait), Reply.tools(wait), Reply.text_only("ok")
    )
    outcome = await core.engine.run_turn(KEY, "sleep and check")
    assert outcome is not None and outcome.text == "ok"

    running = json.loads(tool_results(fake.requests[2])[peek["id"]])
    assert set(running) == {
        "tool_call_id",
        "status",
        "tool_name",
        "started_at",
        "completed_at",
        "result",
        "progress",
        "is_final",
    }
    assert running["status"] == "running" and running["is_final"] is False and running["tool_name"] == "sleep_for"
    assert running["started_at"] and running["completed_at"] is None and running["result"] is None
    assert running["progress"][0]["kind"] == "started" and set(running["progress"][0]) == {"at", "kind", "payload"}

    still = json.loads(tool_results(fake.requests[3])[short_wait["id"]])
    assert still["status"] == "running" and "progress" not in still
    assert 0.1 <= fake.request_times[3] - fake.request_times[2] < 1.0

    done = json.loads(tool_results(fake.requests[4])[wait["id"]])
    assert done["status"] == "completed" and done["is_final"] is True and done["result"] == "slept for 1.2s"
    assert [p["payload"]["slept_s"] for p in done["progress"] if p["kind"] == "partial"] == [1.0, 1.2]
    call = await core.registry.find(sleep["id"])
    assert call is not None and call.completed_at is not None and call.delivered
    # woken by the call's completion, not by a poll
    assert fake.request_times[4] - fake.request_times[3] < 1.5
    assert background_notes(fake, sleep["id"]) == []
    assert fake.rejections == []


async def test_list_running_tool_calls_shape(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_yield_strategy="on_any_progress")
    quick, sleep = tool_use("sleep_for", {"seconds": 0.05}), tool_use("sleep_for", {"seconds": 30})
    listing = tool_use("list_running_tool_calls", {})
    cancel = tool_use("cancel_tool_call", {"tool_call_id": sleep["id"], "reason": "changed my mind"})
    fake.script(Reply.tools(quick, sleep), Reply.tools(listing), Reply.tools(cancel), Reply.text_only("Stopped it."))
    outcome = await core.engine.run_turn(KEY, "sleep, list, cancel")
    assert outcome is not None and outcome.text == "Stopped it."

    listed = json.loads(tool_results(fake.requests[2])[listing["id"]])
    (entry,) = listed["tool_calls"]  # the listing call itself is left out
    assert entry["tool_call_id"] == sleep["id"] and entry["status"] == "running" and entry["tool_name"] == "sleep_for"
    assert entry["input"] == {"seconds": 30} and entry["is_final"] is False and entry["elapsed_s"] >= 0
    assert "progress" not in entry

    cancelled = json.loads(tool_results(fake.requests[3])[cancel["id"]])
    assert cancelled == {"tool_call_id": sleep["id"], "cancelled": True, "previous_status": "running"}
    call = await core.registry.find(sleep["id"])
    assert call is not None and call.status is CallStatus.CANCELLED and call.cancelled_by == "model: changed my mind"
    # the cancelled call's final word reaches the model once, with the cancel result
    assert background_notes(fake, sleep["id"]) == [3]
    assert fake.rejections == []


async def test_cancel_tool_call_of_a_finished_call_and_of_itself(core: Core, fake: FakeAnthropic) -> None:
    count = tool_use("wordcount", {"text": "a b c"})
    cancel_done = tool_use("cancel_tool_call", {"tool_call_id": count["id"]})
    cancel_self = tool_use("cancel_tool_call", {"tool_call_id": "toolu_self"}, id="toolu_self")
    cancel_unknown = tool_use("cancel_tool_call", {"tool_call_id": "toolu_nobody"})
    fake.script(Reply.tools(count), Reply.tools(cancel_done, cancel_self, cancel_unknown), Reply.text_only("ok"))
    await core.engine.run_turn(KEY, "count then cancel")
    results = tool_results(fake.requests[2])
    assert json.loads(results[cancel_done["id"]]) == {
        "tool_call_id": count["id"],
        "cancelled": False,
        "previous_status": "completed",
    }
    assert results["toolu_self"] == "error: a call cannot cancel itself"
    assert results[cancel_unknown["id"]] == "error: no tool call 'toolu_nobody' in this conversation"
    assert fake.rejections == []


async def test_shutdown_starts_no_delivery_turn(core: Core, fake: FakeAnthropic, output: RecordingOutput) -> None:
    """A delivery check caught mid-read by a shutdown must not start a turn the shutdown never waits for."""
    busy, idle = "test:busy", "test:idle"
    hold = asyncio.Event()
    fake.script(Reply.text_only("a slow answer", hold=hold))
    core.engine.submit(busy, "talk slowly")
    await output.wait_for(lambda: "text_delta" in output.names(busy))

    gate, reading = asyncio.Event(), asyncio.Event()
    read = core.store.undelivered_calls

    async def gated_read(key: str) -> list[Any]:
        if key == idle:
            reading.set()
            await gate.wait()
        return await read(key)

    core.store.undelivered_calls = gated_read  # type: ignore[method-assign]
    await core.store.ensure_session(idle)
    failed = await core.registry.submit(
        call_id="toolu_idle_failed", session_key=idle, turn_id=f"{idle}#0", tool_name="x", tool_input={}, tool=None
    )
    assert failed.status is CallStatus.FAILED  # final and owed to an idle session: a delivery check starts
    await asyncio.wait_for(reading.wait(), 5)

    shutdown = asyncio.create_task(core.engine.shutdown(grace_s=5))
    for _ in range(5):
        await asyncio.sleep(0)
    gate.set()  # the check's read completes while the shutdown waits for the busy turn
    for _ in range(5):
        await asyncio.sleep(0)
    hold.set()
    await asyncio.wait_for(shutdown, 5)
    assert "turn_started" not in output.names(idle)
    assert not core.engine.is_busy(idle)
    assert fake.rejections == []
