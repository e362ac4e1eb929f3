"""Cluster mode end to end: `threadbot run` replicas on one PostgreSQL, the fake Slack and the fake model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cluster_rig import Cluster, cluster
from fakes.anthropic_api import Reply, tool_use, user_texts
from test_e2e_slack import mention, reply, wait_status, wait_text

pytestmark = [pytest.mark.timeout(120), pytest.mark.cluster]


@pytest.fixture
async def rig(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    async with cluster(pg_dsn, tmp_path) as made:
        yield made


async def test_one_replica_answers_and_takes_an_injection(rig: Cluster) -> None:
    await rig.start(1)
    rig.script.add(
        "count down", Reply.tools(tool_use("sleep_for", {"seconds": 30})), Reply.text_only("Heard you, done.")
    )
    event = await mention(rig.slack, "C1", "count down")
    await wait_status(rig.slack, "C1", event["ts"])
    await reply(rig.slack, "C1", event["ts"], "hurry up")
    await wait_text(rig.slack, "C1", event["ts"], "Heard you, done.")
    second = [r for r in rig.model.requests if "count down" in user_texts(r)[0]][1]
    assert "[mid-turn user note] hurry up" in user_texts(second)
    await reply(rig.slack, "C1", event["ts"], "stop")
