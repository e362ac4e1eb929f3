"""A replica killed while it runs 20 threads: their calls end orphaned, their turns resume on the others.

Its own file so that the suite's workers can run it beside the other cluster tests (a minute-long test).
"""

from __future__ import annotations

import json
import time

import pytest
from cluster_rig import Cluster, rig
from daemon_rig import WAIT_S, mention, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_use, user_texts

__all__ = ["rig"]  # the fixture, from cluster_rig

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster]


async def test_killing_the_replica_that_runs_20_threads_orphans_their_calls_and_resumes_them_elsewhere(
    rig: Cluster,
) -> None:
    [owner] = await rig.start(1)  # alone at first, so every thread's turn runs on it
    for n in range(20):
        sleep = tool_use("sleep_for", {"seconds": 120})
        rig.script.add(f"long job {n:02d}.", Reply.tools(sleep), Reply.text_only(f"ok {n:02d}"))
    # A channel each: Slack takes about one post a second per channel, and the daemon paces itself to it.
    roots = [await mention(rig.slack, f"C{n:02d}", f"long job {n:02d}.") for n in range(20)]
    statuses = [await wait_status(rig.slack, root["channel"], root["ts"]) for root in roots]
    for status in statuses:  # the first progress edit comes after the post's place is stored
        await rig.slack.wait_for(lambda status=status: status.edits, WAIT_S, "the call running")
    await rig.start(2)
    await rig.kill(owner)
    killed_at = time.monotonic()
    for n, root in enumerate(roots):
        await wait_text(rig.slack, root["channel"], root["ts"], f"ok {n:02d}")
    took = time.monotonic() - killed_at
    assert took < 15, f"every thread resumed elsewhere only after {took:.1f}s"
    calls = await rig.query("SELECT status, count(*) FROM tool_calls GROUP BY status")
    assert calls == [("orphaned", 20)]
    # The repaints are edits, and the workspace's edit budget (about 50 a minute, split across the live
    # replicas) is what paces them: 20 of them need most of a minute.
    for status in statuses:
        await rig.slack.wait_for(lambda status=status: "👻" in status.text, 60, "the call repainted as orphaned")
    for n in range(20):
        requests = [r for r in rig.model.requests if f"long job {n:02d}." in user_texts(r)[0]]
        assert len(requests) == 2 and "orphaned" in json.dumps(requests[1]["messages"][-1])
