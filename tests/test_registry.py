"""The tool-call registry: lifecycle, caps, cancel of every kind of tool, timeouts, progress, orphans, isolation."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use
from proc_groups import ECHO_PGID, assert_group_gone
from proc_groups import UNFENCED_SHELL as run_command

from bot.app import Core
from bot.calls.registry import CancelResult
from bot.toolcall import PROGRESS_LOG_LIMIT, PROGRESS_PAYLOAD_MAX_CHARS, CallStatus, ProgressKind, ToolCall
from tools.base import Tool, ToolContext, tool
from tools.sleep_for import sleep_for

STOPS_S = 2.0
"""How soon cancelled work must be over in these tests: far inside the 30 s it would take, loose enough for a
loaded machine. The 100 ms target is a figure that bench/bench_calls.py prints, not a test's to time."""

KEY = "test:registry"
OTHER = "test:other"


def new_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:20]}"


async def submit(
    core: Core, item: Tool | None, args: dict[str, Any] | None = None, *, session: str = KEY, name: str | None = None
) -> ToolCall:
    await core.store.ensure_session(session)
    return await core.registry.submit(
        call_id=new_id(),
        session_key=session,
        turn_id=f"{session}#1",
        tool_name=name or (item.name if item else "missing"),
        tool_input=args or {},
        tool=item,
    )


class Gates:
    """An async tool whose calls each wait for their own release; counts how many run at once."""

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.release: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.saw_cancel: set[str] = set()
        self.running = 0
        self.max_running = 0
        self.any_started = asyncio.Event()

        @tool("gated", "Waits until the test releases it.", {"label": {"type": "string"}})
        async def gated(args: dict[str, Any], ctx: ToolContext) -> str:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.started[ctx.call_id].set()
            self.any_started.set()
            try:
                await self.release[ctx.call_id].wait()
            except asyncio.CancelledError:
                self.saw_cancel.add(ctx.call_id)
                raise
            finally:
                self.running -= 1
            return f"released {args.get('label', '')}".strip()

        self.tool = gated

    async def wait_started(self, call_id: str) -> None:
        async with asyncio.timeout(10):
            await self.started[call_id].wait()


@pytest.fixture
def gates() -> Gates:
    return Gates()


async def stored(core: Core, call_id: str) -> ToolCall:
    row = await core.store.load_call(call_id)
    assert row is not None
    return row


# --- lifecycle -------------------------------------------------------------------------------


async def test_lifecycle_is_published_and_written_through(core: Core, gates: Gates, output: RecordingOutput) -> None:
    call = await submit(core, gates.tool, {"label": "a"})
    assert (await stored(core, call.id)).status is CallStatus.PENDING
    await gates.wait_started(call.id)
    await output.wait_status(call.id, CallStatus.RUNNING)
    running = await stored(core, call.id)
    assert running.status is CallStatus.RUNNING and running.started_at is not None
    assert running.progress[0].kind is ProgressKind.STARTED
    gates.release[call.id].set()
    await core.registry.wait_final(call.id, 5)
    assert output.statuses(call.id) == [CallStatus.PENDING, CallStatus.RUNNING, CallStatus.COMPLETED]
    row = await stored(core, call.id)
    assert row.status is CallStatus.COMPLETED and row.result == "released a"
    assert row.created_at <= row.started_at <= row.completed_at  # type: ignore[operator]
    assert row.status_view() == call.status_view()


def test_transition_is_one_way() -> None:
    call = ToolCall("toolu_x", KEY, "t", "now", {})
    assert call.transition(CallStatus.RUNNING) and call.started_at is not None
    assert not call.transition(CallStatus.RUNNING)
    assert call.transition(CallStatus.CANCELLED) and call.completed_at is not None
    for status in CallStatus:
        assert not call.transition(status)
    assert call.status is CallStatus.CANCELLED
    fresh = ToolCall("toolu_y", KEY, "t", "now", {})
    assert fresh.transition(CallStatus.CANCELLED)  # a pending call may be cancelled before it runs
    assert not fresh.transition(CallStatus.RUNNING)


async def test_late_completion_never_overwrites_cancelled(core: Core, output: RecordingOutput) -> None:
    """A thread that ignores the cancel signal and returns later leaves the call cancelled."""
    release, returned = threading.Event(), threading.Event()
    entered = asyncio.Event()
    loop = asyncio.get_running_loop()

    @tool("stubborn", "Ignores cancel.")
    def stubborn(args: dict[str, Any], ctx: ToolContext) -> str:
        loop.call_soon_threadsafe(entered.set)
        release.wait(10)
        returned.set()
        return "late result"

    call = await submit(core, stubborn)
    await asyncio.wait_for(entered.wait(), 5)
    outcome = await core.registry.cancel(call.id, by="user")
    assert outcome == CancelResult(call.id, True, CallStatus.RUNNING)
    release.set()
    assert await asyncio.to_thread(returned.wait, 5)
    # the worker thread's result is dropped by the cancelled to_thread future; give the loop a few turns
    for _ in range(5):
        await asyncio.sleep(0)
    assert call.status is CallStatus.CANCELLED and call.result is None and call.cancelled_by == "user"
    row = await stored(core, call.id)
    assert row.status is CallStatus.CANCELLED and row.result is None
    assert CallStatus.COMPLETED not in output.statuses(call.id)


async def test_cancel_of_a_completed_call_reports_it_was_not_cancelled(core: Core) -> None:
    from tools.now import now

    call = await submit(core, now)
    await core.registry.wait_final(call.id, 5)
    result = await core.registry.cancel(call.id, by="user")
    assert result == CancelResult(call.id, False, CallStatus.COMPLETED)
    assert result.to_json() == {"tool_call_id": call.id, "cancelled": False, "previous_status": "completed"}
    assert call.status is CallStatus.COMPLETED and call.cancelled_by is None
    assert (await stored(core, call.id)).status is CallStatus.COMPLETED


async def test_cancel_of_an_unknown_call_is_none(core: Core) -> None:
    assert await core.registry.cancel("toolu_nope") is None


# --- concurrency caps ----------------------------------------------------------------------------


async def test_global_cap_keeps_the_rest_visibly_pending(
    core_factory: CoreFactory, gates: Gates, output: RecordingOutput
) -> None:
    core = await core_factory(bot_max_concurrent_tools=2)
    calls = [await submit(core, gates.tool, {"label": str(i)}) for i in range(5)]
    ids = [c.id for c in calls]
    completed: list[str] = []
    for _ in range(5):
        await output.wait_for(lambda: sum(c.status is CallStatus.RUNNING for c in calls) == min(2, 5 - len(completed)))
        for _ in range(3):  # a cap that leaked would start more on the next loop turns
            await asyncio.sleep(0)
        running = [c for c in calls if c.status is CallStatus.RUNNING]
        pending = [c for c in calls if c.status is CallStatus.PENDING]
        assert len(running) == min(2, 5 - len(completed))
        assert len(pending) == 5 - len(completed) - len(running)
        for call in pending:
            assert (await stored(core, call.id)).status is CallStatus.PENDING
            assert call.started_at is None
        gates.release[running[0].id].set()
        await core.registry.wait_final(running[0].id, 5)
        completed.append(running[0].id)
    assert gates.max_running == 2
    assert all(c.status is CallStatus.COMPLETED for c in calls)
    for call_id in ids:
        assert output.statuses(call_id) == [CallStatus.PENDING, CallStatus.RUNNING, CallStatus.COMPLETED]


async def test_per_session_cap(core_factory: CoreFactory, output: RecordingOutput) -> None:
    core = await core_factory(bot_max_concurrent_tools=10, bot_max_concurrent_tools_per_session=1)
    per_session: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)
    release = asyncio.Event()
    both_running = asyncio.Event()

    @tool("held", "Waits for the test.")
    async def held(args: dict[str, Any], ctx: ToolContext) -> None:
        per_session[ctx.session_key] += 1
        peak[ctx.session_key] = max(peak[ctx.session_key], per_session[ctx.session_key])
        if sum(per_session.values()) == 2:
            both_running.set()
        try:
            await release.wait()
        finally:
            per_session[ctx.session_key] -= 1

    calls = [await submit(core, held, session=s) for s in (KEY, KEY, OTHER, OTHER)]
    await asyncio.wait_for(both_running.wait(), 5)  # the two sessions run side by side
    for _ in range(3):
        await asyncio.sleep(0)
    assert [c.status for c in calls].count(CallStatus.RUNNING) == 2
    assert {c.session_key for c in calls if c.status is CallStatus.RUNNING} == {KEY, OTHER}
    release.set()
    for call in calls:
        assert await core.registry.wait_final(call.id, 5)
    assert dict(peak) == {KEY: 1, OTHER: 1}
    assert all(c.status is CallStatus.COMPLETED for c in calls)


async def test_cancel_of_a_pending_call_waiting_for_a_slot(
    core_factory: CoreFactory, gates: Gates, output: RecordingOutput
) -> None:
    core = await core_factory(bot_max_concurrent_tools=1)
    first = await submit(core, gates.tool)
    await gates.wait_started(first.id)
    waiting = await submit(core, gates.tool)
    for _ in range(3):
        await asyncio.sleep(0)
    assert waiting.status is CallStatus.PENDING
    start = time.perf_counter()
    result = await core.registry.cancel(waiting.id, by="user")
    assert time.perf_counter() - start < STOPS_S
    assert result == CancelResult(waiting.id, True, CallStatus.PENDING)
    assert waiting.status is CallStatus.CANCELLED and waiting.started_at is None
    assert (await stored(core, waiting.id)).status is CallStatus.CANCELLED
    assert output.statuses(waiting.id) == [CallStatus.PENDING, CallStatus.CANCELLED]
    assert not gates.started[waiting.id].is_set()
    # the slot it waited for is not leaked: the first finishes and a third call still gets to run
    gates.release[first.id].set()
    await core.registry.wait_final(first.id, 5)
    third = await submit(core, gates.tool)
    await gates.wait_started(third.id)
    gates.release[third.id].set()
    assert await core.registry.wait_final(third.id, 5) and third.status is CallStatus.COMPLETED


async def test_cancel_right_after_submit_before_the_task_ran(core: Core, gates: Gates) -> None:
    call = await submit(core, gates.tool)
    result = await core.registry.cancel(call.id, by="user")
    assert result == CancelResult(call.id, True, CallStatus.PENDING)
    assert call.status is CallStatus.CANCELLED and await core.registry.wait_final(call.id, 1)
    assert not gates.started[call.id].is_set()
    assert core.registry.open_calls(KEY) == []


async def test_cancel_session_cancels_every_call_of_that_session_only(core: Core, gates: Gates) -> None:
    mine = [await submit(core, gates.tool) for _ in range(3)]
    theirs = await submit(core, gates.tool, session=OTHER)
    for call in [*mine, theirs]:
        await gates.wait_started(call.id)
    results = await core.registry.cancel_session(KEY, by="user")
    assert sorted(r.tool_call_id for r in results) == sorted(c.id for c in mine)
    assert all(r.cancelled and r.previous_status is CallStatus.RUNNING for r in results)
    assert all(c.status is CallStatus.CANCELLED for c in mine)
    assert theirs.status is CallStatus.RUNNING
    gates.release[theirs.id].set()
    assert await core.registry.wait_final(theirs.id, 5) and theirs.status is CallStatus.COMPLETED


# --- timeouts ------------------------------------------------------------------------------------


async def test_per_call_timeout_fails_the_call(core_factory: CoreFactory, gates: Gates) -> None:
    core = await core_factory(bot_tool_timeout_s=0.3)
    start = time.perf_counter()
    call = await submit(core, gates.tool)
    assert await core.registry.wait_final(call.id, 5)
    assert 0.25 < time.perf_counter() - start < 2.0
    assert call.status is CallStatus.FAILED and call.timed_out
    assert call.error == "timed out after 0.3s"
    assert call.id in gates.saw_cancel  # the work itself was stopped
    row = await stored(core, call.id)
    assert row.status is CallStatus.FAILED and row.timed_out and row.error == "timed out after 0.3s"
    assert call.status_view()["error"] == "timed out after 0.3s"


async def test_tool_timeout_overrides_the_default(core: Core) -> None:
    @tool("quick_timeout", "Never finishes in time.", timeout_s=0.2)
    async def quick_timeout(args: dict[str, Any], ctx: ToolContext) -> None:
        await asyncio.Event().wait()

    call = await submit(core, quick_timeout)
    assert await core.registry.wait_final(call.id, 5)
    assert call.status is CallStatus.FAILED and call.timed_out and call.error == "timed out after 0.2s"


async def test_timeout_error_raised_by_a_tool_is_not_a_timeout(core: Core) -> None:
    @tool("raises_timeout", "Raises TimeoutError itself.")
    async def raises_timeout(args: dict[str, Any], ctx: ToolContext) -> None:
        raise TimeoutError

    call = await submit(core, raises_timeout)
    assert await core.registry.wait_final(call.id, 5)
    assert call.status is CallStatus.FAILED and not call.timed_out
    assert call.error == "TimeoutError raised by the tool"


async def test_crashing_and_tool_error_tools_fail_with_their_message(core: Core) -> None:
    from tools.base import ToolError

    @tool("crashes", "Raises.")
    def crashes(args: dict[str, Any], ctx: ToolContext) -> None:
        raise RuntimeError("disk on fire")

    @tool("refuses", "Raises ToolError.")
    async def refuses(args: dict[str, Any], ctx: ToolContext) -> None:
        raise ToolError("no such file: x.txt")

    crashed, refused = await submit(core, crashes), await submit(core, refuses)
    for call in (crashed, refused):
        assert await core.registry.wait_final(call.id, 5)
    assert crashed.status is CallStatus.FAILED and crashed.error == "RuntimeError: disk on fire"
    assert refused.status is CallStatus.FAILED and refused.error == "no such file: x.txt"


# --- cancel that really stops work -----------------------------------------------------------------


async def test_cancel_async_tool(core: Core, gates: Gates, output: RecordingOutput) -> None:
    call = await submit(core, gates.tool)
    await gates.wait_started(call.id)
    start = time.perf_counter()
    result = await core.registry.cancel(call.id, by="user")
    assert time.perf_counter() - start < STOPS_S
    assert result == CancelResult(call.id, True, CallStatus.RUNNING)
    assert call.id in gates.saw_cancel and gates.running == 0
    assert call.status is CallStatus.CANCELLED and call.cancelled_by == "user"
    assert output.statuses(call.id)[-1] is CallStatus.CANCELLED
    assert (await stored(core, call.id)).status is CallStatus.CANCELLED


async def test_cancel_threaded_tool(core: Core) -> None:
    entered = asyncio.Event()
    exited = threading.Event()
    loop = asyncio.get_running_loop()

    @tool("spinner", "A sync tool that watches its cancel signal.")
    def spinner(args: dict[str, Any], ctx: ToolContext) -> str:
        loop.call_soon_threadsafe(entered.set)
        while not ctx.cancelled.wait(0.01):
            pass
        exited.set()
        return "stopped"

    call = await submit(core, spinner)
    await asyncio.wait_for(entered.wait(), 5)
    result = await core.registry.cancel(call.id, by="user")
    assert result == CancelResult(call.id, True, CallStatus.RUNNING)
    assert await asyncio.to_thread(exited.wait, STOPS_S)  # the thread itself stopped
    assert call.status is CallStatus.CANCELLED and call.result is None


async def test_cancel_subprocess_tool_kills_the_process_group(core: Core, output: RecordingOutput) -> None:
    call = await submit(core, run_command, {"command": f"{ECHO_PGID}; sleep 30 & sleep 30; wait"})
    await output.wait_for(lambda: any(e.kind is ProgressKind.LOG for e in call.progress))
    line = next(e.payload for e in call.progress if e.kind is ProgressKind.LOG)
    pgid = int(line.split()[1])
    start = time.perf_counter()
    result = await core.registry.cancel(call.id, by="user")
    assert time.perf_counter() - start < STOPS_S
    assert result == CancelResult(call.id, True, CallStatus.RUNNING)
    assert call.status is CallStatus.CANCELLED
    await assert_group_gone(pgid)


async def test_run_command_through_the_registry(core: Core, output: RecordingOutput) -> None:
    call = await submit(core, run_command, {"command": "echo hello; echo world; exit 2"})
    assert await core.registry.wait_final(call.id, 5)
    assert call.status is CallStatus.COMPLETED
    assert call.result == {"exit_code": 2, "output": "hello\nworld\n", "truncated": False}
    assert [e.payload for e in call.progress if e.kind is ProgressKind.LOG] == ["hello", "world"]
    assert (core.settings.bot_data_dir / "work").is_dir()


# --- progress ------------------------------------------------------------------------------------


async def test_progress_log_is_capped_newest_kept(core: Core, output: RecordingOutput) -> None:
    @tool("chatty", "Reports a lot.")
    async def chatty(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.log("x" * (PROGRESS_PAYLOAD_MAX_CHARS + 500))
        for i in range(PROGRESS_LOG_LIMIT + 50):
            ctx.progress({"i": i})
        ctx.progress({"i": "odd"}, kind="no-such-kind")
        return "done"

    call = await submit(core, chatty)
    assert await core.registry.wait_final(call.id, 5)
    assert len(call.progress) == PROGRESS_LOG_LIMIT
    assert call.progress[-1].payload == {"i": "odd"} and call.progress[-1].kind is ProgressKind.LOG
    assert call.progress[-2].payload == {"i": PROGRESS_LOG_LIMIT + 49}
    assert call.progress[0].payload == {"i": 51}  # the oldest (started, the long line, 0..50) were dropped
    row = await stored(core, call.id)
    assert [e.to_json() for e in row.progress] == [e.to_json() for e in call.progress]


async def test_long_progress_payload_is_cut(core: Core) -> None:
    @tool("long_line", "One long line.")
    async def long_line(args: dict[str, Any], ctx: ToolContext) -> None:
        ctx.log("y" * (PROGRESS_PAYLOAD_MAX_CHARS + 500))

    call = await submit(core, long_line)
    assert await core.registry.wait_final(call.id, 5)
    payload = call.progress[-1].payload
    assert payload == "y" * PROGRESS_PAYLOAD_MAX_CHARS + "…"


async def test_progress_from_a_thread_is_published_and_none_after_final(core: Core, output: RecordingOutput) -> None:
    @tool("threaded_progress", "Reports from its thread.")
    def threaded_progress(args: dict[str, Any], ctx: ToolContext) -> str:
        for i in range(3):
            ctx.progress({"step": i})
        return "ok"

    call = await submit(core, threaded_progress)
    assert await core.registry.wait_final(call.id, 5)
    await output.wait_for(lambda: sum(1 for e in call.progress if e.kind is ProgressKind.PARTIAL) == 3)
    assert [e.payload for e in call.progress if e.kind is ProgressKind.PARTIAL] == [{"step": i} for i in range(3)]
    count = len(call.progress)
    core.registry._progress(call, "log", "after the end")
    assert len(call.progress) == count


# --- orphans -------------------------------------------------------------------------------------


async def test_orphaned_after_restart_on_the_same_database(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    first = await core_factory()
    settings = first.settings
    await first.store.ensure_session(KEY)
    running = ToolCall(new_id(), KEY, f"{KEY}#1", "sleep_for", {"seconds": 30}, status=CallStatus.RUNNING)
    pending = ToolCall(new_id(), KEY, f"{KEY}#1", "sleep_for", {"seconds": 30})
    for call in (running, pending):
        await first.store.save_call(call)
    # the crash left the assistant's tool_use without a result in the history
    await first.store.append_messages(
        KEY,
        [
            {"role": "user", "content": [{"type": "text", "text": "sleep twice"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": running.id, "name": "sleep_for", "input": {"seconds": 30}},
                    {"type": "tool_use", "id": pending.id, "name": "sleep_for", "input": {"seconds": 30}},
                ],
            },
        ],
    )
    await core_factory.close(first)

    second = await core_factory(settings=settings)
    for call in (running, pending):
        found = await second.registry.find(call.id, session_key=KEY)
        assert found is not None and found.status is CallStatus.ORPHANED and found.is_final
        assert found.error

    status_id = new_id()
    fake.script(
        Reply.tools(tool_use("get_tool_call_status", {"tool_call_id": running.id}, id=status_id)),
        Reply.text_only("It was orphaned."),
    )
    outcome = await second.engine.run_turn(KEY, "what happened to my sleep?")
    assert outcome is not None and outcome.error is None and outcome.text == "It was orphaned."
    first_request, second_request = fake.requests
    # every tool_use of the history still has its result: the orphaned calls are answered at once
    last = first_request["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "tool_result", "text"]
    assert all(b["is_error"] and "orphaned" in b["content"] for b in last["content"][:2])
    view = json.loads(tool_results(second_request)[status_id])
    assert view["status"] == "orphaned" and view["is_final"] is True and view["tool_call_id"] == running.id
    assert fake.rejections == []


async def test_abandon_leaves_running_calls_orphaned(core: Core, gates: Gates) -> None:
    call = await submit(core, gates.tool)
    await gates.wait_started(call.id)
    await core.registry.abandon()
    assert call.status is CallStatus.ORPHANED and call.error
    assert (await stored(core, call.id)).status is CallStatus.ORPHANED


# --- isolation and system tools -------------------------------------------------------------------


async def test_cross_session_isolation(core: Core, gates: Gates, fake: FakeAnthropic) -> None:
    secret = await submit(core, gates.tool, {"label": "top-secret-input"}, session=OTHER)
    await gates.wait_started(secret.id)
    assert await core.registry.find(secret.id, session_key=KEY) is None
    assert await core.registry.cancel(secret.id, session_key=KEY) is None
    assert core.registry.open_calls(KEY) == []

    status_id, cancel_id, list_id = new_id(), new_id(), new_id()
    fake.script(
        Reply.tools(
            tool_use("get_tool_call_status", {"tool_call_id": secret.id, "wait_for_completion": True}, id=status_id),
            tool_use("cancel_tool_call", {"tool_call_id": secret.id}, id=cancel_id),
        ),
        Reply.tools(tool_use("list_running_tool_calls", {}, id=list_id)),
        Reply.text_only("nothing to see"),
    )
    outcome = await core.engine.run_turn(KEY, "peek at the other thread")
    assert outcome is not None and outcome.text == "nothing to see"
    results = tool_results(fake.requests[1])
    assert results[status_id] == f"error: no tool call {secret.id!r} in this conversation"
    assert results[cancel_id] == f"error: no tool call {secret.id!r} in this conversation"
    assert json.loads(tool_results(fake.requests[2])[list_id]) == {"tool_calls": []}
    everything = json.dumps(fake.requests)
    assert "top-secret-input" not in everything and "gated" not in everything
    assert secret.status is CallStatus.RUNNING and secret.id not in gates.saw_cancel
    gates.release[secret.id].set()
    assert fake.rejections == []


async def test_malformed_calls_become_failed_entities(core: Core, fake: FakeAnthropic) -> None:
    unknown, bad_args, not_object, good = new_id(), new_id(), new_id(), new_id()
    fake.script(
        Reply.tools(
            tool_use("launch_rockets", {"count": 3}, id=unknown),
            tool_use("sleep_for", {"seconds": "soon"}, id=bad_args),
            tool_use("wordcount", [1, 2], id=not_object),  # type: ignore[arg-type]
            tool_use("wordcount", {"text": "still works"}, id=good),
        ),
        Reply.text_only("understood"),
    )
    outcome = await core.engine.run_turn(KEY, "do odd things")
    assert outcome is not None and outcome.error is None and outcome.text == "understood"
    results = tool_results(fake.requests[1])
    fence = '<untrusted source="tool" name="launch_rockets">\n'  # not the daemon's own tool: fenced
    assert results[unknown].startswith(f"{fence}error: unknown tool 'launch_rockets'; available tools: now, wordcount")
    assert results[bad_args].startswith("error: invalid arguments for sleep_for: 'soon' is not of type 'number'")
    assert results[not_object] == ("error: the tool call was malformed (missing id or arguments not a JSON object)")
    assert json.loads(results[good]) == {"words": 2}
    result_blocks = fake.requests[1]["messages"][-1]["content"]
    assert [b.get("is_error", False) for b in result_blocks] == [True, True, True, False]
    for call_id in (unknown, bad_args, not_object):
        call = await core.registry.find(call_id)
        assert call is not None and call.status is CallStatus.FAILED and call.error and call.delivered
    # the stored history is valid for the API: the malformed input was stored as an object
    history = await core.store.load_messages(KEY)
    uses = [b for m in history if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert all(isinstance(b["input"], dict) for b in uses)
    assert fake.rejections == []


async def test_submit_without_a_tool_is_a_failed_entity(core: Core, output: RecordingOutput) -> None:
    call = await submit(core, None, name="ghost")
    assert call.status is CallStatus.FAILED and call.error == "unknown tool 'ghost'"
    assert await core.registry.wait_final(call.id, 0.1)
    assert (await stored(core, call.id)).status is CallStatus.FAILED
    assert output.statuses(call.id) == [CallStatus.FAILED]


async def test_a_call_whose_final_save_is_pending_is_not_listed_as_open(core: Core, gates: Gates) -> None:
    call = await submit(core, gates.tool)
    await gates.wait_started(call.id)
    gate, saving = asyncio.Event(), asyncio.Event()
    save = core.store.save_calls

    async def gated_save(items: Sequence[ToolCall]) -> None:
        if any(item.id == call.id and item.is_final for item in items):
            saving.set()
            await gate.wait()
        await save(items)

    core.store.save_calls = gated_save  # type: ignore[method-assign]
    gates.release[call.id].set()
    await asyncio.wait_for(saving.wait(), 5)
    assert call.status is CallStatus.COMPLETED  # final in memory, its row not written yet
    assert core.registry.open_calls(KEY) == []
    gate.set()
    assert await core.registry.wait_final(call.id, 5)


async def test_a_call_that_cannot_be_recorded_fails_instead_of_hanging(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(calls: Sequence[ToolCall]) -> None:
        raise OSError("database is locked")

    monkeypatch.setattr(core.store, "save_calls", broken)
    call = await submit(core, sleep_for, {"seconds": 30})
    assert call.status is CallStatus.FAILED and "could not be recorded" in (call.error or "")
    assert core.registry.open_calls(KEY) == [] and await core.registry.wait_final(call.id, 1)
