"""Approvals in Slack, against the daemon as a process: the built-in policy asks before `run_command` runs.

The status line shows the exact command and Approve / Deny buttons; a stranger's click is refused privately;
the requester's decision is carried out and named on the line; a pending approval outlives a kill -9, and
its old buttons still work in the new process; nobody deciding in time is a clear result for the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest
from daemon_rig import WAIT_S, World, mention, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_results, tool_use
from test_crash import kill, restart

from bot.slack.approvals import NOT_YOURS
from bot.slack.render import APPROVE_ACTION, DENY_ACTION

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module"), pytest.mark.usefixtures("needs_bwrap")]

BUILT_IN = {"BOT_ENABLE_SHELL": "1", "BOT_POLICY_FILE": ""}


def buttons(blocks: list[dict[str, object]] | None) -> list[str]:
    return [
        str(element["action_id"])
        for block in blocks or []
        if block.get("type") == "actions"
        for element in block["elements"]  # type: ignore[union-attr]
    ]


async def shown_in_store(db: Path, call_id: str) -> None:
    """Until the daemon has recorded which message shows the call (a write just after its post lands)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
                if conn.execute("SELECT 1 FROM call_displays WHERE call_id = ?", (call_id,)).fetchone():
                    return
            await asyncio.sleep(0.05)


def result_of(world: World, prefix: str, call_id: str) -> str:
    return next(str(r[call_id]) for request in world.requests(prefix) if call_id in (r := tool_results(request)))


async def test_the_requester_approves_after_a_strangers_click_is_refused(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    daemon.env = BUILT_IN
    await daemon.start()
    await daemon.connected()
    echo = tool_use("run_command", {"command": "echo approved-in-slack && echo second-line"})
    own.script.add("please echo", Reply.tools(echo), Reply.text_only("Echoed."))
    event = await mention(slack, "C1", "please echo")
    status = await slack.wait_for(
        lambda: (m := wait_status_now(own, event["ts"])) and APPROVE_ACTION in buttons(m.blocks) and m,
        WAIT_S,
        "the ask",
    )
    assert "waiting for approval by <@U1>" in status.text
    shown = str(status.blocks)
    assert "echo approved-in-slack &amp;&amp; echo second-line" in shown, "the exact command, in full"
    assert buttons(status.blocks) == [APPROVE_ACTION, DENY_ACTION, "cancel_call"]

    stranger = slack.block_action("C1", status.ts, APPROVE_ACTION, echo["id"], user="U2")
    await slack.wait_ack(await slack.send_interactive(stranger))
    await slack.wait_for(lambda: any(e.text == NOT_YOURS for e in slack.ephemerals), WAIT_S, "not yours to approve")
    assert "waiting for approval" in status.text, "a stranger's click decides nothing"

    click = slack.block_action("C1", status.ts, APPROVE_ACTION, echo["id"], user="U1")
    await slack.wait_ack(await slack.send_interactive(click))
    await wait_text(slack, "C1", event["ts"], "Echoed.")
    await slack.wait_for(lambda: "approved by <@U1>" in status.text, WAIT_S, "the line names who approved")
    assert "approved-in-slack" in result_of(own, "please echo", echo["id"])


def wait_status_now(world: World, thread_ts: str):  # type: ignore[no-untyped-def]
    from daemon_rig import status_posts

    found = status_posts(world.slack, "C1", thread_ts)
    return found[0] if found else None


async def test_a_denial_or_a_cancel_while_waiting_reaches_the_model_and_the_line_says_who(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    daemon.env = BUILT_IN
    await daemon.start()
    await daemon.connected()
    long_command = "rm -rf ./everything " + " ".join(f"./dir-{n:04d}" for n in range(400))  # over a status line
    rm = tool_use("run_command", {"command": long_command})
    own.script.add("clean up", Reply.tools(rm), Reply.text_only("Not removed."))
    event = await mention(slack, "C1", "clean up")
    status = await wait_status(slack, "C1", event["ts"])
    await slack.wait_for(lambda: DENY_ACTION in buttons(status.blocks), WAIT_S, "the buttons")
    [file] = await slack.wait_for(lambda: slack.files.uploaded("C1", event["ts"]), WAIT_S, "the arguments as a file")
    assert (file.name, file.text) == (f"arguments-{rm['id']}.txt", long_command), "the command in full"
    click = slack.block_action("C1", status.ts, DENY_ACTION, rm["id"], user="U1")
    await slack.wait_ack(await slack.send_interactive(click))
    await wait_text(slack, "C1", event["ts"], "Not removed.")
    await slack.wait_for(lambda: "denied by <@U1>" in status.text, WAIT_S, "the line names who denied")
    assert "denied by U1; it did not run" in result_of(own, "clean up", rm["id"])

    ls = tool_use("run_command", {"command": "ls"})
    own.script.add("list it", Reply.tools(ls), Reply.text_only("Withdrawn."))
    event = await mention(slack, "C1", "list it")
    status = await wait_status(slack, "C1", event["ts"])
    await slack.wait_for(lambda: "cancel_call" in buttons(status.blocks), WAIT_S, "the buttons")
    click = slack.block_action("C1", status.ts, "cancel_call", ls["id"], user="U1")
    await slack.wait_ack(await slack.send_interactive(click))
    await wait_text(slack, "C1", event["ts"], "Withdrawn.")
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "a call cancelled while it waited")


async def test_a_pending_approval_outlives_a_kill_and_its_buttons_still_work(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    daemon.env = BUILT_IN
    await daemon.start()
    await daemon.connected()
    echo = tool_use("run_command", {"command": "echo survived-the-kill"})
    own.script.add("echo later", Reply.tools(echo))
    event = await mention(slack, "C1", "echo later")
    status = await wait_status(slack, "C1", event["ts"])
    await slack.wait_for(lambda: APPROVE_ACTION in buttons(status.blocks), WAIT_S, "the buttons")
    await shown_in_store(daemon.data_dir / "bot.db", echo["id"])  # how the next process finds the message
    await kill(daemon)
    await restart(daemon)
    own.script.add("echo later", Reply.text_only("It ran after the restart."))
    click = slack.block_action("C1", status.ts, APPROVE_ACTION, echo["id"], user="U1")
    await slack.wait_ack(await slack.send_interactive(click))
    await slack.wait_for(lambda: "approved by <@U1>" in status.text, WAIT_S, "the old message repainted")
    await slack.wait_for(
        lambda: any("survived-the-kill" in str(request["messages"]) for request in own.requests("echo later")),
        WAIT_S,
        "the result reaches the model",
    )


async def test_nobody_approving_in_time_is_a_clear_result(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    daemon.env = {**BUILT_IN, "BOT_APPROVAL_TIMEOUT_S": "1"}
    await daemon.start()
    await daemon.connected()
    ls = tool_use("run_command", {"command": "ls"})
    own.script.add("list files", Reply.tools(ls), Reply.text_only("Nobody approved."))
    event = await mention(slack, "C1", "list files")
    await wait_text(slack, "C1", event["ts"], "Nobody approved.")
    assert "nobody approved this call within 1s; it did not run" in result_of(own, "list files", ls["id"])
