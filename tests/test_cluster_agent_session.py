"""Agent sessions in a cluster: Slack's Stop, pressed where the turn does not run, reaches the replica that runs
it and cancels its call; the session ends `active`."""

from __future__ import annotations

import pytest
from cluster_rig import Cluster, rig
from daemon_rig import WAIT_S, mention, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_use

__all__ = ["rig"]  # the fixture, from cluster_rig

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster]


async def test_stop_pressed_at_another_replica_cancels_the_turn_where_it_runs(rig: Cluster) -> None:
    [owner] = await rig.start(1)
    long = tool_use("sleep_for", {"seconds": 120})
    rig.script.add("stop across", Reply.tools(long), Reply.text_only("never said"))
    event = await mention(rig.slack, "C1", "stop across replicas")
    status = await wait_status(rig.slack, "C1", event["ts"])
    [(runner,)] = await rig.query("SELECT replica FROM tool_calls WHERE id = %s", long["id"])
    session = await rig.slack.wait_for(
        lambda: (s := rig.slack.agent.session_of("C1", event["ts"])) is not None and s.status == "processing" and s,
        WAIT_S,
        "the session processing",
    )
    await rig.start(1)  # the fake routes to the newest connection: the Stop reaches this one
    stop = rig.slack.agent.agent_session_stopped("U1", "C1", event["ts"])
    envelope = await rig.slack.send_event(stop)
    await rig.slack.wait_ack(envelope)
    assert rig.slack.acked_by(envelope) != rig.slack.connections[0].id, "the replica without the turn took the Stop"
    await rig.slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the call cancelled by U1")
    await wait_text(rig.slack, "C1", event["ts"], "Stopped by")
    [(status_of, stopped_on)] = await rig.query("SELECT status, replica FROM tool_calls WHERE id = %s", long["id"])
    assert (status_of, stopped_on) == ("cancelled", runner), "the call stopped where it ran"
    await rig.slack.wait_for(lambda: session.status == "active", WAIT_S, "the session active")
    assert owner.process is not None and owner.process.returncode is None
