"""App Home in a cluster: the replica Slack's event reaches shows a call another replica runs, and its Cancel
reaches the call there, for its requester only."""

from __future__ import annotations

from typing import Any

import pytest
from cluster_rig import WAIT_S, Cluster, rig
from daemon_rig import mention, wait_status
from fakes.anthropic_api import Reply, tool_use

from bot.slack.render import CANCEL_ACTION

__all__ = ["rig"]  # the fixture, from cluster_rig

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster]


def _cancels(view: dict[str, Any] | None) -> list[str]:
    return [
        block["accessory"]["value"]
        for block in (view or {}).get("blocks", [])
        if (block.get("accessory") or {}).get("action_id") == CANCEL_ACTION
    ]


async def test_a_home_on_another_replica_shows_the_call_and_cancels_it(rig: Cluster) -> None:
    # The home refreshes what another replica changed every BOT_HOME_REFRESH_S: short, so that is no wait.
    [owner] = await rig.start(1, BOT_HOME_REFRESH_S="1")
    long = tool_use("sleep_for", {"seconds": 120})
    rig.script.add("far call", Reply.tools(long), Reply.text_only("Cancelled from home."))
    event = await mention(rig.slack, "C1", "far call")
    status = await wait_status(rig.slack, "C1", event["ts"])
    await rig.start(1, BOT_HOME_REFRESH_S="1")  # the fake routes to the newest connection: never the owner's
    await rig.slack.send_event(rig.slack.agent.app_home_opened("U1"))
    await rig.slack.wait_for(lambda: _cancels(rig.slack.agent.home_of("U1")) == [long["id"]], WAIT_S, "U1's home")

    forged = rig.slack.agent.home_action("U2", CANCEL_ACTION, long["id"], view_of="U1")
    await rig.slack.wait_ack(await rig.slack.send_interactive(forged), WAIT_S)
    await rig.slack.wait_ack(
        await rig.slack.send_interactive(rig.slack.agent.home_action("U1", CANCEL_ACTION, long["id"])), WAIT_S
    )
    await rig.slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the call cancelled by U1")
    assert await rig.query("SELECT cancelled_by FROM tool_calls WHERE id = %s", long["id"]) == [("U1",)]
    await rig.slack.wait_for(lambda: not _cancels(rig.slack.agent.home_of("U1")), WAIT_S, "U1's home without it")
    assert owner.process is not None and owner.process.returncode is None
