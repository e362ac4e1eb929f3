"""`ask_user` in a cluster: a click on another replica, and the requester's reply there, reach the replica that
holds the waiting question, as an approval's click does."""

from __future__ import annotations

import pytest
from cluster_rig import Cluster, decision, rig
from daemon_rig import mention, reply, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_use

from bot.slack.render import ANSWER_ACTION

__all__ = ["rig"]  # the fixture, from cluster_rig

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster]


async def test_a_click_and_a_reply_on_another_replica_answer_where_the_questions_wait(rig: Cluster) -> None:
    [owner] = await rig.start(1)
    pick = tool_use("ask_user", {"question": "Ship it?", "options": ["yes", "no"]})
    free = tool_use("ask_user", {"question": "Release notes?"})
    rig.script.add("ship across", Reply.tools(pick, free), Reply.text_only("Asked both."))
    event = await mention(rig.slack, "C1", "ship across")
    status = await wait_status(rig.slack, "C1", event["ts"])
    await wait_text(rig.slack, "C1", event["ts"], "Asked both.")
    await rig.start(1)  # the fake routes to the newest connection: the click and the reply reach this one
    rig.script.add("ship across", Reply.text_only("Shipping."), Reply.text_only("Noted."))
    click = rig.slack.block_action("C1", status.ts, f"{ANSWER_ACTION}:0", pick["id"], user="U1")
    await rig.slack.wait_ack(await rig.slack.send_interactive(click))

    async def picked() -> bool:
        return await decision(rig, pick["id"]) == ("completed", "answered", "U1")

    await rig.wait_db(picked, "the click answers on the replica that holds the question")
    await reply(rig.slack, "C1", event["ts"], "fixes the login bug", user="U1")

    async def written() -> bool:
        return await decision(rig, free["id"]) == ("completed", "answered", "U1")

    await rig.wait_db(written, "the reply answers on the replica that holds the question")
    [(result,)] = await rig.query("SELECT result FROM tool_calls WHERE id = %s", free["id"])
    assert "fixes the login bug" in str(result)
    assert owner.process is not None and owner.process.returncode is None
