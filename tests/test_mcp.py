"""MCP servers as tool sources, through the whole engine: a real SDK server, over stdio and streamable HTTP.

The model is the wire-level fake; the server is tests/mcp_server.py in its own process. What the
server itself saw (a handler started, cancelled, finished) is read from the file it records to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use
from mcp_support import Record, http_server, stdio_entry, write_config
from proc_groups import assert_group_gone

from bot.agent.fence import untrusted
from bot.app import Core
from bot.calls.summary import state_text
from bot.mcp import connection as mcp_connection
from bot.mcp.source import McpTools
from bot.toolcall import CallStatus

KEY = "test:mcp"
WAIT_S = 30.0  # an upper bound: generous, so a loaded machine is slow, not failing


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(tmp_path / "server-record.txt")


@contextlib.asynccontextmanager
async def server_entry(transport: str, record: Record, **extra: Any) -> AsyncIterator[dict[str, Any]]:
    if transport == "stdio":
        yield stdio_entry(record, **extra)
        return
    async with http_server(record) as url:
        yield {"type": "http", "url": url, **extra}


async def ready(core: Core) -> McpTools:
    assert core.mcp is not None
    await asyncio.wait_for(asyncio.gather(*(c.ready.wait() for c in core.mcp.connections)), WAIT_S)
    return core.mcp


@pytest.fixture(params=["stdio", "http"])
async def mcp_core(
    request: pytest.FixtureRequest, core_factory: CoreFactory, record: Record, tmp_path: Path
) -> AsyncIterator[Core]:
    async with server_entry(request.param, record) as entry:
        config = write_config(tmp_path / "mcp.json", {"test": entry})
        core = await core_factory(bot_mcp_config=config)
        await ready(core)
        yield core
        await core_factory.close(core)


async def test_tools_are_named_for_the_model_with_the_servers_schemas(mcp_core: Core, fake: FakeAnthropic) -> None:
    fake.script(Reply.text_only("ok"))
    await mcp_core.engine.run_turn(KEY, "what can you do?")
    tools = {t["name"]: t for t in fake.requests[0]["tools"]}
    mcp_names = [name for name in tools if name.startswith("mcp__")]
    assert mcp_names == sorted(mcp_names)
    assert {"mcp__test__steps", "mcp__test__fail", "mcp__test__picture", "mcp__test__huge"} <= set(mcp_names)
    steps = tools["mcp__test__steps"]
    assert steps["input_schema"]["required"] == ["n"]
    assert steps["input_schema"]["properties"]["n"]["type"] == "integer"
    assert "Work through n steps" in steps["description"]
    assert list(tools)[:3] == ["now", "wordcount", "sleep_for"]  # built-in tools first, then the system ones


async def test_progress_reaches_the_call_and_its_status_line(
    mcp_core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    use = tool_use("mcp__test__steps", {"n": 4, "interval_ms": 50})
    fake.script(Reply.tools(use), Reply.text_only("done"))
    await mcp_core.engine.run_turn(KEY, "count to four")
    call = await mcp_core.registry.find(use["id"])
    assert call is not None and call.status is CallStatus.COMPLETED
    assert call.result == "finished 4 steps"
    payloads = [entry.payload for entry in call.progress if entry.kind.value == "partial"]
    assert payloads[-1] == {"progress": 4, "total": 4, "message": "step 4 of 4"}
    running = [s.call for s in output.snapshots if s.id == use["id"] and s.status is CallStatus.RUNNING]
    assert running, "the call was published while running"
    assert tool_results(fake.requests[1]) == {use["id"]: untrusted("tool", "finished 4 steps", name=use["name"])}


def test_status_line_shows_mcp_progress_as_a_fraction_and_message() -> None:
    from bot.toolcall import ProgressKind, ToolCall

    call = ToolCall("toolu_1", KEY, "t", "mcp__ci__run_pipeline", {})
    call.transition(CallStatus.RUNNING)
    call.add_progress(ProgressKind.PARTIAL, {"progress": 3.0, "total": 10.0, "message": "deploying"})
    assert state_text(call).endswith("· 3/10 · deploying")
    call.add_progress(ProgressKind.PARTIAL, {"progress": 0.5})
    assert state_text(call).endswith("· 0.5")


async def test_cancel_reaches_the_server_handler(
    mcp_core: Core, fake: FakeAnthropic, record: Record, output: RecordingOutput
) -> None:
    use = tool_use("mcp__test__steps", {"n": 300})
    fake.script(Reply.tools(use), Reply.text_only("stopped"))
    mcp_core.engine.submit(KEY, "a long job")
    await record.wait("start steps")
    call = mcp_core.registry.get(use["id"])
    assert call is not None
    await output.wait_for(lambda: any(entry.kind.value == "partial" for entry in call.progress))
    asked = time.monotonic()
    result = await mcp_core.registry.cancel(use["id"], by="U1")
    assert result is not None and result.cancelled
    seen = await record.wait("cancelled steps")
    # Told, not waited out: the job had 30 s left. The 100 ms target is bench_mcp's figure, not a test's.
    assert seen - asked < 5, f"the server saw the cancel {seen - asked:.3f}s later"
    await fake.wait_for_requests(2)
    assert tool_results(fake.requests[1]) == {use["id"]: "cancelled by U1"}
    assert record.times("done steps") == []


async def test_error_image_and_huge_results(mcp_core: Core, fake: FakeAnthropic) -> None:
    fail = tool_use("mcp__test__fail", {"reason": "disk full"})
    picture = tool_use("mcp__test__picture", {})
    huge = tool_use("mcp__test__huge", {"chars": 50_000})
    measure = tool_use("mcp__test__measure", {"width": 3, "height": 4})
    document = tool_use("mcp__test__document", {})
    fake.script(Reply.tools(fail, picture, huge, measure, document), Reply.text_only("seen"))
    await mcp_core.engine.run_turn(KEY, "try everything")
    results = tool_results(fake.requests[1])
    assert results[fail["id"]] == untrusted("tool", "error: deliberate failure: disk full", name=fail["name"])
    failed = await mcp_core.registry.find(fail["id"])
    assert failed is not None and failed.status is CallStatus.FAILED
    caption, image = results[picture["id"]]
    assert caption == {"type": "text", "text": untrusted("tool", "one pixel", name=picture["name"])}
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert len(results[huge["id"]]) < 21_000 and "[truncated: 30000 more characters not shown]" in results[huge["id"]]
    assert results[measure["id"]] == untrusted("tool", json.dumps({"area": 12}), name=measure["name"])
    assert results[document["id"]] == untrusted(
        "tool", "[resource file:///notes.txt]\nthe notes", name=document["name"]
    )
    blocks = fake.requests[1]["messages"][-1]["content"]
    assert [b.get("is_error", False) for b in blocks] == [True, False, False, False, False]


async def test_arguments_are_validated_against_the_servers_schema(
    mcp_core: Core, fake: FakeAnthropic, record: Record
) -> None:
    use = tool_use("mcp__test__steps", {"n": "many"})
    fake.script(Reply.tools(use), Reply.text_only("oops"))
    await mcp_core.engine.run_turn(KEY, "bad arguments")
    result = tool_results(fake.requests[1])[use["id"]]
    fence = '<untrusted source="tool" name="mcp__test__steps">\n'  # an MCP tool's errors are fenced as its output
    assert result.startswith(f"{fence}error: invalid arguments for mcp__test__steps: 'many' is not of type 'integer'")
    assert record.times("start steps") == []


async def test_list_changed_refreshes_the_tools_for_the_next_request(mcp_core: Core, fake: FakeAnthropic) -> None:
    grow = tool_use("mcp__test__grow", {})
    fake.script(Reply.tools(grow), Reply.text_only("grown"))
    assert mcp_core.toolbox.get("mcp__test__extra") is None
    await mcp_core.engine.run_turn(KEY, "grow")
    mcp = mcp_core.mcp
    assert mcp is not None
    while True:
        mcp.rebuilt.clear()
        if mcp_core.toolbox.get("mcp__test__extra") is not None:
            break
        await asyncio.wait_for(mcp.rebuilt.wait(), WAIT_S)
    extra = tool_use("mcp__test__extra", {})
    fake.script(Reply.tools(extra), Reply.text_only("used it"))
    await mcp_core.engine.run_turn(KEY, "use the new one")
    assert "mcp__test__extra" in [t["name"] for t in fake.requests[2]["tools"]]
    assert tool_results(fake.requests[3]) == {extra["id"]: untrusted("tool", "extra works", name=extra["name"])}


async def test_a_timeout_cancels_the_request_on_the_server(
    core_factory: CoreFactory, fake: FakeAnthropic, record: Record, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "mcp.json", {"test": stdio_entry(record, timeoutSeconds=0.5)})
    core = await core_factory(bot_mcp_config=config)
    await ready(core)
    use = tool_use("mcp__test__steps", {"n": 100})
    fake.script(Reply.tools(use), Reply.text_only("too slow"))
    await core.engine.run_turn(KEY, "slow job")
    call = await core.registry.find(use["id"])
    assert call is not None and call.status is CallStatus.FAILED and call.timed_out
    assert call.error == "timed out after 0.5s"
    await record.wait("cancelled steps")


async def test_a_killed_server_fails_its_call_and_the_next_call_works_after_restart(
    core_factory: CoreFactory, fake: FakeAnthropic, record: Record, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "mcp.json", {"test": stdio_entry(record)})
    core = await core_factory(bot_mcp_config=config)
    mcp = await ready(core)
    use = tool_use("mcp__test__steps", {"n": 300})
    fake.script(Reply.tools(use), Reply.text_only("it died"))
    core.engine.submit(KEY, "long job")
    await record.wait("start steps")
    [pid] = record.pids()
    os.killpg(pid, signal.SIGKILL)
    await fake.wait_for_requests(2)
    call = await core.registry.find(use["id"])
    assert call is not None and call.status is CallStatus.FAILED
    assert call.error == "MCP server 'test' stopped during the call; it is being restarted"
    await asyncio.wait_for(mcp.connections[0].ready.wait(), WAIT_S)
    assert len(record.pids()) == 2
    again = tool_use("mcp__test__steps", {"n": 2, "interval_ms": 10})
    fake.script(Reply.tools(again), Reply.text_only("works again"))
    await core.engine.run_turn(KEY, "try again")
    assert tool_results(fake.requests[3]) == {again["id"]: untrusted("tool", "finished 2 steps", name=again["name"])}


async def test_tools_of_a_server_that_is_down_answer_unavailable(
    core_factory: CoreFactory, fake: FakeAnthropic, record: Record, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_connection, "FIRST_BACKOFF_S", 60.0)  # keep it down for the test
    config = write_config(tmp_path / "mcp.json", {"test": stdio_entry(record)})
    core = await core_factory(bot_mcp_config=config)
    mcp = await ready(core)
    connection = mcp.connections[0]
    [pid] = record.pids()
    os.killpg(pid, signal.SIGKILL)
    await asyncio.wait_for(connection.down.wait(), WAIT_S)
    use = tool_use("mcp__test__echo", {"text": "hello"})
    fake.script(Reply.tools(use), Reply.text_only("down"))
    await core.engine.run_turn(KEY, "echo")
    result = tool_results(fake.requests[1])[use["id"]]
    assert result.startswith(
        '<untrusted source="tool" name="mcp__test__echo">\nerror: MCP server \'test\' is unavailable ('
    )
    assert result.endswith("); try again later\n</untrusted>")


async def test_shutdown_cancels_calls_on_the_server_and_leaves_no_process(
    core_factory: CoreFactory, fake: FakeAnthropic, record: Record, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "mcp.json", {"test": stdio_entry(record)})
    core = await core_factory(bot_mcp_config=config)
    await ready(core)
    use = tool_use("mcp__test__steps", {"n": 300})
    fake.script(Reply.tools(use))
    core.engine.submit(KEY, "long job")
    await record.wait("start steps")
    [pid] = record.pids()
    await core_factory.close(core)
    await record.wait("cancelled steps")
    await assert_group_gone(pid)


async def test_allow_and_deny_lists_and_disabled_servers(
    core_factory: CoreFactory, fake: FakeAnthropic, record: Record, tmp_path: Path
) -> None:
    servers = {
        "only": stdio_entry(record, allowedTools=["echo", "fail"], deniedTools=["fail"]),
        "off": stdio_entry(record, enabled=False),
    }
    core = await core_factory(bot_mcp_config=write_config(tmp_path / "mcp.json", servers))
    mcp = await ready(core)
    assert [c.name for c in mcp.connections] == ["only"]
    assert [name for name in core.toolbox.names if name.startswith("mcp__")] == ["mcp__only__echo"]


async def test_a_server_that_cannot_start_blocks_nothing(
    core_factory: CoreFactory, fake: FakeAnthropic, record: Record, tmp_path: Path
) -> None:
    silent = {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"], "startupTimeoutSeconds": 60}
    servers = {"broken": {"command": "/nonexistent/mcp-server"}, "test": stdio_entry(record), "silent": silent}
    core = await core_factory(bot_mcp_config=write_config(tmp_path / "mcp.json", servers))
    assert core.mcp is not None
    good = core.mcp.connections[1]
    await asyncio.wait_for(good.ready.wait(), WAIT_S)
    broken = core.mcp.connections[0]
    assert not broken.ready.is_set()
    await asyncio.wait_for(broken.down.wait(), WAIT_S)
    fake.script(Reply.text_only("fine"))
    outcome = await core.engine.run_turn(KEY, "hello")
    assert outcome is not None and outcome.text == "fine"
    assert broken.reason == "command not found: /nonexistent/mcp-server"
    assert not core.mcp.connections[2].ready.is_set()  # still waiting for its handshake, delaying nothing
