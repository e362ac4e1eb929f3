"""Slack hears its ack however busy the daemon is: Socket Mode runs on a thread of its own.

The daemon's event loop is held, provably, by a tool of the operator's that spins on the CPU until the
test lets it go; an event sent meanwhile is acked all the same, and handled once the loop is free. On one
loop the ack would wait for the tool (and Slack would deliver the event again after 3 s).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from daemon_rig import WAIT_S, World, mention, wait_text
from fakes.anthropic_api import Reply, tool_use

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

HOG = """
import os
from tools.base import tool

@tool("hog_the_loop", "Spins on the daemon's event loop until told to stop.", {{}})
async def hog_the_loop(args, ctx):
    open({held!r}, "w").close()
    while not os.path.exists({release!r}):
        sum(range(10_000))  # CPU, not a sleep: the loop and the GIL are this tool's until the file appears
    return "let go"
"""


async def test_an_event_is_acked_while_the_daemons_loop_is_held(own: World, tmp_path: Path) -> None:
    held, release = tmp_path / "held", tmp_path / "release"
    (tmp_path / "loop_hog.py").write_text(textwrap.dedent(HOG.format(held=str(held), release=str(release))))
    own.daemon.env["BOT_TOOL_MODULES"] = "loop_hog"
    own.script.add("hog it", Reply.tools(tool_use("hog_the_loop", {})), Reply.text_only("The loop is free."))
    own.script.add("meanwhile", Reply.text_only("Heard you meanwhile."))
    await own.daemon.start()
    await own.daemon.connected()
    slack = own.slack

    first = await mention(slack, "C1", "hog it")
    await slack.wait_for(held.exists, WAIT_S, "the tool holding the daemon's loop")

    event = slack.mention("C2", "meanwhile")
    latency_s = await slack.wait_ack(await slack.send_event(event), WAIT_S)
    assert not release.exists()  # the loop is still held: the ack came from the socket's own thread
    assert latency_s < WAIT_S

    release.touch()
    await wait_text(slack, "C1", first["ts"], "The loop is free.")
    await wait_text(slack, "C2", event["ts"], "Heard you meanwhile.")
    assert not [e for e in slack.envelopes if e.retry_attempt]  # each acked at once: none delivered again
