"""Agent sessions and feedback against the daemon as a process: a long call keeps the thread `processing` (with
its title), a wait leaves it `suspended`, the end makes it `active`; Slack's Stop cancels a running call (only
for whoever may stop it); a final answer carries feedback buttons whose clicks are stored and counted; an app
Slack does not take for an agent says so once and answers as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from daemon_rig import WAIT_S, World, mention, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_use
from fakes.slack_agent import AgentSession
from fakes.slack_api import FakeSlack, StoredMessage
from test_crash import kill, restart

from bot.slack.cancel import NOT_ADMITTED, NOT_YOURS

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]


async def session_in(slack: FakeSlack, channel: str, thread_ts: str, status: str) -> AgentSession:
    """The thread's agent session once its latest status is `status`."""

    def check() -> AgentSession | None:
        session = slack.agent.session_of(channel, thread_ts)
        return session if session is not None and session.status == status else None

    return await slack.wait_for(check, WAIT_S, f"the session {status}")


def feedback_of(message: StoredMessage) -> dict[str, Any] | None:
    blocks = [block for block in message.blocks or [] if block.get("type") == "context_actions"]
    return blocks[0]["elements"][0] if blocks else None


async def rows(db: Path, sql: str, count: int) -> list[tuple[Any, ...]]:
    """The rows `sql` finds in the daemon's database, once there are `count` of them (its write follows the ack)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
                found = conn.execute(sql).fetchall()
            if len(found) >= count:
                return found
            await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_long_call_keeps_processing_and_the_end_is_active(world: World) -> None:
    slack, channel = world.slack, world.channel
    long = tool_use("sleep_for", {"seconds": 2})
    world.script.add("session sleep", Reply.tools(long), Reply.text_only("Slept well."))
    event = await mention(slack, channel, "session sleep a while")
    status = await wait_status(slack, channel, event["ts"])
    session = await session_in(slack, channel, event["ts"], "processing")
    assert (session.title, session.initiator) == ("session sleep a while", "U1")
    answer = await wait_text(slack, channel, event["ts"], "Slept well.")
    await session_in(slack, channel, event["ts"], "active")
    assert session.statuses == ["processing", "active"], "the running call kept Stop on screen until the end"
    buttons = await slack.wait_for(lambda: feedback_of(answer), WAIT_S, "the answer's feedback buttons")
    assert buttons["type"] == "feedback_buttons"
    assert not feedback_of(status), "only the final answer is rated"


async def test_a_wait_leaves_the_session_suspended(world: World) -> None:
    slack, channel = world.slack, world.channel
    wait = tool_use("wait_for", {"seconds": 600, "reason": "look at the build again"})
    world.script.add("session wait", Reply.tools(wait), Reply.text_only("I'll look again in ten minutes."))
    event = await mention(slack, channel, "session wait for the build")
    await wait_text(slack, channel, event["ts"], "look again in ten minutes")
    session = await session_in(slack, channel, event["ts"], "suspended")
    assert "active" not in session.statuses


async def test_stop_cancels_the_running_call_for_whoever_may_stop_it(world: World) -> None:
    slack, channel = world.slack, world.channel
    long = tool_use("sleep_for", {"seconds": 60})
    world.script.add("session stop", Reply.tools(long), Reply.text_only("never said"))
    event = await mention(slack, channel, "session stop me")
    status = await wait_status(slack, channel, event["ts"])
    await session_in(slack, channel, event["ts"], "processing")

    await slack.wait_ack(await slack.send_event(slack.agent.agent_session_stopped("U2", channel, event["ts"])))
    await slack.wait_for(
        lambda: any(e.user == "U2" and e.text == NOT_YOURS for e in slack.ephemerals), WAIT_S, "not U2's to stop"
    )
    assert "cancelled" not in status.text

    await slack.wait_ack(await slack.send_event(slack.agent.agent_session_stopped("U1", channel, event["ts"])))
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the call cancelled by U1")
    await wait_text(slack, channel, event["ts"], "Stopped by")
    session = await session_in(slack, channel, event["ts"], "active")
    assert session.statuses[-1] == "active"


async def test_feedback_is_stored_with_the_turn_and_model_and_counted(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    port = free_port()
    daemon.env.update(BOT_METRICS_PORT=str(port), BOT_ALLOWED_USERS="U1,U3")
    own.script.add("rate me", Reply.text_only("Here is an answer."))
    await daemon.start()
    await daemon.connected()
    event = await mention(slack, "C1", "rate me please")
    answer = await wait_text(slack, "C1", event["ts"], "Here is an answer.")
    await slack.wait_for(lambda: feedback_of(answer), WAIT_S, "the answer's feedback buttons")

    stranger = slack.agent.feedback_click("C1", answer.ts, user="U2")
    await slack.wait_ack(await slack.send_interactive(stranger))
    await slack.wait_for(
        lambda: any(e.user == "U2" and e.text == NOT_ADMITTED for e in slack.ephemerals), WAIT_S, "U2 refused"
    )
    for user, positive in (("U1", False), ("U3", True), ("U1", False)):  # the last one repeats U1's: not counted
        click = slack.agent.feedback_click("C1", answer.ts, user=user, positive=positive)
        await slack.wait_ack(await slack.send_interactive(click))
    sql = "SELECT turn_id, user_id, model, rating FROM feedback ORDER BY user_id"
    found = await rows(daemon.data_dir / "bot.db", sql, 2)
    turn = f"slack:T1:C1:{event['ts']}#1"
    assert found == [(turn, "U1", "claude-sonnet-5-5", "bad"), (turn, "U3", "claude-sonnet-5-5", "good")]
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        metrics = await response.text()
    assert 'threadbot_feedback_total{rating="bad"} 1.0' in metrics
    assert 'threadbot_feedback_total{rating="good"} 1.0' in metrics
    sent = [line for line in metrics.splitlines() if line.startswith("threadbot_agent_session_statuses_sent ")]
    assert sent and float(sent[0].split()[1]) >= 1.0, "the thread's session status went out"


async def test_an_app_that_is_no_agent_says_so_once_and_answers_as_before(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    slack.agent.refuse_agent_methods = "not_authorized"
    own.script.add("plain one", Reply.text_only("First answer."))
    own.script.add("plain two", Reply.text_only("Second answer."))
    await daemon.start()
    await daemon.connected()
    first = await mention(slack, "C1", "plain one")
    await wait_text(slack, "C1", first["ts"], "First answer.")
    second = await mention(slack, "C1", "plain two")
    await wait_text(slack, "C1", second["ts"], "Second answer.")
    assert len(slack.calls_to("agents.sessions.setStatus")) == 1, "refused once, never tried again"
    assert not slack.agent.agent_sessions
    lines = [line for line in daemon.log().splitlines() if "agents.sessions.setStatus" in line]
    assert len(lines) == 1 and "not declared an agent" in lines[0], daemon.log()
    assert json.dumps(slack.calls_to("assistant.threads.setStatus")[0].params), "the thinking status as before"


async def test_after_a_kill_a_thread_left_processing_is_settled(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    daemon.env.update(BOT_YIELD_STRATEGY="on_timeout:200")
    long = tool_use("sleep_for", {"seconds": 120})
    own.script.add("orphan sleep", Reply.tools(long), Reply.text_only("It runs in the background."))
    await daemon.start()
    await daemon.connected()
    event = await mention(slack, "C1", "orphan sleep")
    await wait_text(slack, "C1", event["ts"], "It runs in the background.")
    session = await session_in(slack, "C1", event["ts"], "processing")
    assert session.statuses == ["processing"], "the turn ended, its call runs on: Stop stays"
    await kill(daemon)
    await restart(daemon)
    await session_in(slack, "C1", event["ts"], "active")
