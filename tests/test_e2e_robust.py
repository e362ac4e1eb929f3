"""Robustness of the Slack daemon as a real process: bad bytes in an event, and no stray processes.

Reuses the daemon and helpers of `test_e2e_slack`; each test starts its own daemon (`own`), since
one needs the shell and a SIGKILL.
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from daemon_rig import U1, WAIT_S, World, mention, reply, status_posts, wait_text
from fakes.anthropic_api import Reply, tool_use, user_texts
from fakes.slack_api import FakeSlack
from proc_groups import ECHO_PGID, assert_group_gone, group_exists, live_members

from bot.agent.fence import said
from bot.text import REPLACEMENT

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]
LIFELINE_S = 5.0
"""The watcher sends SIGTERM at once; a loaded machine may take a moment to schedule it."""


async def test_an_event_with_a_lone_surrogate_is_answered(own: World) -> None:
    slack, channel = own.slack, own.channel
    await own.daemon.start()
    await own.daemon.connected()
    own.script.add("odd bytes", Reply.text_only("I read it."))
    # json.dumps writes the surrogate as the escape `\ud800`, as Slack would; the client decodes it back.
    event = await mention(slack, channel, "odd bytes \ud800 here")
    await wait_text(slack, channel, event["ts"], "I read it.")
    [request] = own.requests("odd bytes")
    assert user_texts(request) == [said(U1, f"odd bytes {REPLACEMENT} here", ts=event["ts"])]
    assert not any("not valid JSON" in m.text for m in slack.posts_in_thread(channel, event["ts"]))


def _pgid_shown(slack: FakeSlack, channel: str, thread_ts: str) -> int | None:
    """The process group a run_command call printed, as its status message shows it."""
    for message in slack.posts_in_thread(channel, thread_ts):
        found = re.search(r"pgid (\d+)", message.text + json.dumps(message.blocks or []))
        if found:
            return int(found.group(1))
    return None


async def test_a_killed_daemon_leaves_no_command_running(own: World) -> None:
    slack, daemon, channel = own.slack, own.daemon, own.channel
    daemon.env.update(BOT_ENABLE_SHELL="1", BOT_SHELL_SANDBOX="none")  # group ids as seen from here
    await daemon.start()
    await daemon.connected()
    use = tool_use("run_command", {"command": f"{ECHO_PGID}; sleep 600 & sleep 600; wait"})
    own.script.add("run forever", Reply.tools(use))
    event = await mention(slack, channel, "run forever")
    pgid = await slack.wait_for(lambda: _pgid_shown(slack, channel, event["ts"]), WAIT_S, "the command's pgid")
    assert group_exists(pgid) and len(live_members(pgid)) >= 3  # supervisor, watcher, shell and its sleeps
    assert daemon.process is not None
    daemon.process.kill()  # SIGKILL: no shutdown code runs
    await daemon.process.wait()
    # The lifeline: the kernel closed the daemon's end, the group's watcher ended the group.
    await assert_group_gone(pgid, live_within_s=LIFELINE_S)
    await daemon.start()
    await daemon.connected(total=2)

    def orphaned() -> bool:
        return any("orphaned" in m.text for m in status_posts(slack, channel, event["ts"]))

    await slack.wait_for(orphaned, WAIT_S, "the call repainted as orphaned")
    with sqlite3.connect(daemon.data_dir / "bot.db") as db:
        assert db.execute("SELECT count(*) FROM call_processes").fetchone() == (0,)


async def test_a_hung_model_stream_ends_with_one_line_in_the_thread(own: World) -> None:
    slack, daemon, channel = own.slack, own.daemon, own.channel
    daemon.env.update(BOT_MODEL_IDLE_TIMEOUT_S="0.5")
    await daemon.start()
    await daemon.connected()
    own.script.add("are you there", Reply.stalled("pings"), Reply.text_only("Yes, now I am."))
    event = await mention(slack, channel, "are you there")
    line = await wait_text(slack, channel, event["ts"], "⚠️ Model error")
    assert line.text == "⚠️ Model error: the model stopped sending its answer (nothing for 0.5s); please try again"
    await reply(slack, channel, event["ts"], "try again")
    await wait_text(slack, channel, event["ts"], "Yes, now I am.")
    errors = [m for m in slack.posts_in_thread(channel, event["ts"]) if "Model error" in m.text]
    assert len(errors) == 1
