"""Reminders in a cluster through a kill and a full stop: each run fires once, on whichever replica holds it.

Its own file so that the suite's workers can run it beside the other cluster tests (a minute-long test).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from cluster_rig import Cluster, rig
from daemon_rig import mention, wait_text
from fakes.anthropic_api import Reply, tool_use
from fakes.slack_api import StoredMessage

__all__ = ["rig"]  # the fixture, from cluster_rig

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster]


def reminder_texts(rig: Cluster, channel: str, thread_ts: str) -> list[str]:
    return [m.text for m in rig.slack.posts_in_thread(channel, thread_ts) if "⏰" in m.text]


async def test_reminders_fire_once_through_a_kill_and_a_full_stop(rig: Cluster) -> None:
    await rig.start(3, BOT_MAX_REMINDERS_PER_USER="200")  # one person sets all 101
    started = time.time()
    roots = []
    for n in range(20):  # 100 reminders due 10-30 s from now, five per thread (Slack paces posts per channel)
        due = [10 + (n * 5 + k) * 0.2 for k in range(5)]
        tools = [tool_use("schedule_reminder", {"text": f"r{n:02d}-{k}", "in_seconds": s}) for k, s in enumerate(due)]
        if n == 0:
            tools.append(tool_use("schedule_reminder", {"text": "every minute", "cron": "* * * * *"}))
        rig.script.add(f"plan {n:02d}.", Reply.tools(*tools), Reply.text_only("Set."))
        roots.append(await mention(rig.slack, f"R{n:02d}", f"plan {n:02d}."))
    for root in roots:
        await wait_text(rig.slack, root["channel"], root["ts"], "Set.")

    def fired() -> int:
        return sum(len(reminder_texts(rig, root["channel"], root["ts"])) for root in roots)

    await rig.slack.wait_for(lambda: fired() >= 10, 40, "the first reminders")
    await rig.kill(rig.replicas[0])
    await rig.slack.wait_for(lambda: fired() >= 40, 40, "more reminders, from the two left")
    for daemon in rig.replicas[1:]:
        assert await daemon.stop() == 0
    await asyncio.sleep(20)  # the scenario itself: every replica down while reminders come due
    await rig.start(3)
    for n, root in enumerate(roots):
        wanted = {f"r{n:02d}-{k}" for k in range(5)}
        await rig.slack.wait_for(
            lambda root=root, wanted=wanted: wanted <= _fired_texts(rig, root), 40, f"every reminder of thread {n}"
        )
    for n, root in enumerate(roots):
        posted = [t for t in _fired_texts_list(rig, root) if t.startswith("r")]
        assert sorted(posted) == sorted(f"r{n:02d}-{k}" for k in range(5)), posted
    posts = [
        _owed_post_of(m)
        for m in rig.slack.posts_in_thread(roots[0]["channel"], roots[0]["ts"])
        if "⏰ every minute" in m.text
    ]
    assert len(posts) == len(set(posts)), posts  # no owed post delivered twice
    # Never two posts for one run of the cron: no more posts than minutes began since it was set.
    assert len(posts) <= int(time.time() // 60) - int(started // 60), posts
    states = await rig.query("SELECT status, count(*) FROM reminders WHERE cron IS NULL GROUP BY status")
    assert states == [("fired", 100)]


def _fired_texts_list(rig: Cluster, root: dict[str, Any]) -> list[str]:
    """The reminder texts posted in a thread, without the mention and the lateness note."""
    return [t.split("⏰ ", 1)[1].split(" (", 1)[0] for t in reminder_texts(rig, root["channel"], root["ts"])]


def _owed_post_of(post: StoredMessage) -> int:
    """Which owed post (outbox row) a Slack message delivers, from the metadata every owed post carries."""
    return int(post.extra["metadata"]["event_payload"]["post"])


def _fired_texts(rig: Cluster, root: dict[str, Any]) -> set[str]:
    return set(_fired_texts_list(rig, root))
