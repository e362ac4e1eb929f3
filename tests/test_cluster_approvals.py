"""Approvals in a cluster: a click reaches the replica that holds the waiting call, whichever replica Slack
gives it to, and a pending approval outlives the replica that asked for it."""

from __future__ import annotations

import pytest
from cluster_rig import Cluster, decision, rig
from daemon_rig import WAIT_S, mention, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_use

from bot.slack.render import APPROVE_ACTION

__all__ = ["rig"]  # the fixture, from cluster_rig

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster, pytest.mark.usefixtures("needs_bwrap")]

BUILT_IN = {"BOT_ENABLE_SHELL": "1", "BOT_POLICY_FILE": ""}


async def test_an_approval_clicked_on_another_replica_runs_the_call_where_it_waits(rig: Cluster) -> None:
    [owner] = await rig.start(1, **BUILT_IN)
    echo = tool_use("run_command", {"command": "echo approved-across-replicas"})
    rig.script.add("echo across", Reply.tools(echo), Reply.text_only("Echoed across."))
    event = await mention(rig.slack, "C1", "echo across")
    status = await wait_status(rig.slack, "C1", event["ts"])
    await rig.slack.wait_for(lambda: "waiting for approval" in status.text, WAIT_S, "the ask")
    await rig.start(1, **BUILT_IN)  # the fake routes to the newest connection: the click reaches this one
    click = rig.slack.block_action("C1", status.ts, APPROVE_ACTION, echo["id"], user="U1")
    await rig.slack.wait_ack(await rig.slack.send_interactive(click))
    await wait_text(rig.slack, "C1", event["ts"], "Echoed across.")
    assert await decision(rig, echo["id"]) == ("completed", "approved", "U1")
    assert owner.process is not None and owner.process.returncode is None


async def test_a_pending_approval_outlives_the_replica_that_asked(rig: Cluster) -> None:
    [first] = await rig.start(1, **BUILT_IN)
    echo = tool_use("run_command", {"command": "echo outlived-its-replica"})
    rig.script.add("echo later", Reply.tools(echo))
    event = await mention(rig.slack, "C1", "echo later")
    status = await wait_status(rig.slack, "C1", event["ts"])
    await rig.slack.wait_for(lambda: "waiting for approval" in status.text, WAIT_S, "the ask")
    [(asker,)] = await rig.query("SELECT replica FROM tool_calls WHERE id = %s", echo["id"])
    await rig.start(1, **BUILT_IN)
    await rig.kill(first)

    async def adopted() -> bool:
        rows = await rig.query("SELECT replica FROM tool_calls WHERE id = %s", echo["id"])
        return rows[0][0] != asker

    await rig.wait_db(adopted, "the survivor takes the pending approval up")
    assert await decision(rig, echo["id"]) == ("pending", "asked", None)
    rig.script.add("echo later", Reply.text_only("It ran on the survivor."))
    click = rig.slack.block_action("C1", status.ts, APPROVE_ACTION, echo["id"], user="U1")
    await rig.slack.wait_ack(await rig.slack.send_interactive(click))

    async def ran() -> bool:
        return await decision(rig, echo["id"]) == ("completed", "approved", "U1")

    await rig.wait_db(ran, "the approved call runs on the survivor")
