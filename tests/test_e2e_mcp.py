"""MCP tools end to end: the daemon as a process, the fake Slack, the fake model and a real MCP server.

The daemon starts tests/mcp_server.py itself, from BOT_MCP_CONFIG, as it would in production.
"""

from __future__ import annotations

import os
import re
import signal

import pytest
from daemon_rig import WAIT_S, World, mention, reply, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_results, tool_use
from mcp_support import Record, stdio_entry, wait_until, write_config
from proc_groups import assert_group_gone

from bot.agent.fence import untrusted

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]


async def start_with_mcp(world: World) -> Record:
    record = Record(world.daemon.data_dir / "mcp-record.txt")
    config = write_config(world.daemon.data_dir / "mcp.json", {"test": stdio_entry(record)})
    world.daemon.env["BOT_MCP_CONFIG"] = str(config)
    await world.daemon.start()
    await world.daemon.connected()
    await ready(world, 1)
    return record


async def ready(world: World, times: int) -> None:
    """The daemon has logged the server as ready `times` times (a restart logs it again)."""
    await wait_until(lambda: world.daemon.log().count("MCP server 'test' ready") >= times, "the MCP server ready")


async def test_progress_of_an_mcp_call_shows_on_the_status_message(own: World) -> None:
    slack = own.slack
    record = await start_with_mcp(own)
    use = tool_use("mcp__test__steps", {"n": 10, "interval_ms": 300})
    own.script.add("count with mcp", Reply.tools(use), Reply.text_only("Counted."))
    event = await mention(slack, "C1", "count with mcp")
    status = await wait_status(slack, "C1", event["ts"])
    await wait_text(slack, "C1", event["ts"], "Counted.")
    await slack.wait_for(lambda: "✅" in status.text, WAIT_S, "the final status")
    revisions = [revision.text for revision in status.history]
    progress = re.compile(r"⏳ `mcp__test__steps\(n=10, interval_ms=300\)` — running \d+s · (\d+)/10 · step \1 of 10")
    assert any(progress.search(text) for text in revisions), revisions
    finished = untrusted("tool", "finished 10 steps", name="mcp__test__steps")
    assert tool_results(own.requests("count with mcp")[1]) == {use["id"]: finished}
    assert "[test] threadbot-test MCP server starting" in own.daemon.log()  # its stderr, in our log
    [pid] = record.pids()
    assert await own.daemon.stop() == 0
    await assert_group_gone(pid)


async def test_a_cancel_reaction_cancels_the_mcp_request_on_the_server(own: World) -> None:
    slack = own.slack
    record = await start_with_mcp(own)
    use = tool_use("mcp__test__steps", {"n": 300})
    own.script.add("long mcp job", Reply.tools(use), Reply.text_only("Stopped it."))
    event = await mention(slack, "C1", "long mcp job")
    status = await wait_status(slack, "C1", event["ts"])
    await record.wait("start steps")
    await slack.send_event(slack.reaction_added("U1", "x", "C1", status.ts))
    await record.wait("cancelled steps")
    await wait_text(slack, "C1", event["ts"], "Stopped it.")
    assert tool_results(own.requests("long mcp job")[1]) == {use["id"]: "cancelled by U1"}
    await slack.wait_for(lambda: "🚫" in status.text, WAIT_S, "the cancelled status")
    assert record.times("done steps") == []


async def test_a_server_killed_mid_call_fails_the_call_and_the_next_call_works(own: World) -> None:
    slack = own.slack
    record = await start_with_mcp(own)
    first = tool_use("mcp__test__steps", {"n": 300})
    again = tool_use("mcp__test__steps", {"n": 2, "interval_ms": 10})
    own.script.add("fragile job", Reply.tools(first), Reply.text_only("It crashed."))
    own.script.add("fragile job", Reply.tools(again), Reply.text_only("Worked this time."))
    event = await mention(slack, "C1", "fragile job")
    status = await wait_status(slack, "C1", event["ts"])
    await record.wait("start steps")
    [pid] = record.pids()
    os.killpg(pid, signal.SIGKILL)
    await wait_text(slack, "C1", event["ts"], "It crashed.")
    assert tool_results(own.requests("fragile job")[1]) == {
        first["id"]: untrusted(
            "tool", "error: MCP server 'test' stopped during the call; it is being restarted", name="mcp__test__steps"
        )
    }
    await slack.wait_for(lambda: "❌" in status.text and "stopped during the call" in status.text, WAIT_S, "❌")
    await ready(own, 2)
    await reply(slack, "C1", event["ts"], "try again")
    await wait_text(slack, "C1", event["ts"], "Worked this time.")
    finished = untrusted("tool", "finished 2 steps", name="mcp__test__steps")
    assert tool_results(own.requests("fragile job")[3]) == {again["id"]: finished}
