"""A Slack storm loses nothing: 20% of `chat.*` calls fail (half HTTP 500, half 429 with `Retry-After: 1`) while
twenty threads each run a tool and answer. Every answer and every final state lands, each exactly once.

The daemon runs as a process (`python -m bot run`) against the fake Slack and the fake Messages API; the storm is
the fake's seeded `fail_randomly`, one seed a repetition. Every wait is on a condition the fakes observe.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from daemon_rig import WAIT_S, Daemon, Script, bot_posts, mention, status_posts
from fakes.anthropic_api import Reply, tool_use
from fakes.slack_api import FakeSlack
from test_e2e_outbox import owed, rig

__all__ = ["rig"]  # the fixture, shared with test_e2e_outbox

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

THREADS = 20
CHANNELS = [f"C{i}" for i in range(1, 6)]  # four threads a channel: the daemon paces posts ~1/s a channel
DELIVERED_S = 90.0  # generous: 429s pause a channel for a second, 500s back off, finals wait for the edit budget


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
async def test_a_storm_of_500s_and_429s_on_chat_loses_and_doubles_nothing(
    rig: tuple[FakeSlack, Script, Daemon], seed: int
) -> None:
    slack, script, daemon = rig
    await daemon.start()
    await daemon.connected()
    started = time.perf_counter()
    slack.fail_randomly("chat.", rate=0.2, seed=seed)
    threads: dict[tuple[str, str], str] = {}
    for i in range(THREADS):
        words = f"storm {seed} count #{i}."  # the script matches by prefix: "#1." is not in "#10."
        answer = f"Counted for thread {seed}-{i}."
        script.add(words, Reply.tools(tool_use("wordcount", {"text": f"a b c {i}"})), Reply.text_only(answer))
        event = await mention(slack, CHANNELS[i % len(CHANNELS)], words)
        threads[(event["channel"], event["ts"])] = answer

    def undelivered() -> list[tuple[str, str]]:
        missing = []
        for (channel, ts), answer in threads.items():
            posts = bot_posts(slack, channel, ts)
            statuses = status_posts(slack, channel, ts)
            if not any(m.text == answer for m in posts) or not statuses or "✅" not in statuses[0].text:
                missing.append((channel, ts))
        return missing

    try:
        await slack.wait_for(lambda: not undelivered(), DELIVERED_S, "every answer and every final state")
        await slack.wait_for(lambda: owed(daemon, edits=False) + owed(daemon, edits=True) == 0, WAIT_S, "no debt")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\nundelivered: {undelivered()}\nlog:\n{daemon.log()}") from None
    took = time.perf_counter() - started
    slack.fail_randomly(rate=0)

    for (channel, ts), answer in threads.items():
        posts = bot_posts(slack, channel, ts)
        [status] = status_posts(slack, channel, ts)
        assert [m.text for m in posts if m is not status] == [answer], (channel, ts, [m.text for m in posts])
        assert "✅" in status.text and "wordcount" in status.text, status.text
        assert posts[0] is status
    failed = Counter((c.method, c.status) for c in slack.calls if c.status in (429, 500))
    print(f"\nseed {seed}: delivered in {took:.1f}s; chat.* calls {_chat_calls(slack)}, failed {dict(failed)}")
    assert slack.random_failures[500] > 0 and slack.random_failures[429] > 0, slack.random_failures
    assert sum(slack.random_failures.values()) == failed.total()  # the storm's, and no other failure
    assert await daemon.stop(timeout_s=60) == 0


def _chat_calls(slack: FakeSlack) -> int:
    return sum(1 for c in slack.calls if c.method.startswith("chat."))
