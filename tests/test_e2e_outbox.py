"""Nothing the daemon owes a thread is lost when it is stopped or killed: the daemon as a process (`python -m bot
run`), stopped with SIGTERM or SIGKILL at a chosen point, then started again on the same data dir.

The points are chosen by holding or failing the fake Slack's calls, and reached by waiting on the daemon's own
database (the outbox rows it writes before it tries Slack), never by sleeping.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from daemon_rig import WAIT_S, Daemon, Script, bot_posts, mention, status_posts, wait_text
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use
from fakes.slack_api import FakeSlack

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

THREADS = 20
CHANNELS = [f"C{i}" for i in range(1, 6)]  # four threads a channel: posts stay within ~1/s a channel


@pytest_asyncio.fixture(loop_scope="module")
async def rig(tmp_path: Path) -> AsyncIterator[tuple[FakeSlack, Script, Daemon]]:
    async with FakeSlack() as slack, FakeAnthropic() as model:
        script = Script()
        model.default = script
        # Every thread here is U1's, standing for many people: one person's cap on running tools would say so.
        daemon = Daemon(slack, model, tmp_path, env={"BOT_MAX_CONCURRENT_TOOLS_PER_USER": "1000"})
        try:
            yield slack, script, daemon
        finally:
            if daemon.process is not None and daemon.process.returncode is None:
                daemon.process.kill()
                await daemon.process.wait()


def owed(daemon: Daemon, *, edits: bool) -> int:
    """Rows in the daemon's outbox: final edits (a message's ts is known) or posts."""
    with sqlite3.connect(daemon.data_dir / "bot.db") as db:
        try:
            sql = f"SELECT COUNT(*) FROM outbox WHERE ts IS {'NOT ' if edits else ''}NULL"
            return int(db.execute(sql).fetchone()[0])
        except sqlite3.OperationalError:  # not migrated yet
            return 0


def integrity(daemon: Daemon) -> str:
    with sqlite3.connect(daemon.data_dir / "bot.db") as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


async def kill(daemon: Daemon) -> None:
    assert daemon.process is not None
    daemon.process.kill()
    await daemon.process.wait()
    daemon.process = None


async def start_threads(
    slack: FakeSlack,
    script: Script,
    words: str,
    replies: Callable[[], list[Reply]],
    channels: list[str] = CHANNELS,
) -> list[tuple[str, str]]:
    """`THREADS` mentions, each scripted with its own `replies()` (a tool_use id is unique to one call)."""
    threads = []
    for i in range(THREADS):
        words_i = f"{words} #{i}."  # the script matches by prefix: "#1." is not in "#10."
        script.add(words_i, *replies())
        event = await mention(slack, channels[i % len(channels)], words_i)
        threads.append((event["channel"], event["ts"]))
    return threads


async def test_answers_owed_when_killed_mid_post_are_posted_once_after_the_restart(
    rig: tuple[FakeSlack, Script, Daemon],
) -> None:
    slack, script, daemon = rig
    await daemon.start()
    await daemon.connected()
    slack.hold("chat.postMessage")  # every answer reaches the wire and gets no answer
    threads = await start_threads(slack, script, "answer me", lambda: [Reply.text_only("Here you are.")])
    await slack.wait_for(lambda: owed(daemon, edits=False) == THREADS, WAIT_S, "every answer owed in the store")
    await kill(daemon)
    assert integrity(daemon) == "ok"

    slack.clear_failures()
    slack.hold("chat.postMessage").set()
    await daemon.start()
    await daemon.connected(total=2)
    for channel, ts in threads:
        await wait_text(slack, channel, ts, "Here you are.")
    await slack.wait_for(lambda: owed(daemon, edits=False) == 0, WAIT_S, "the outbox emptied")
    for channel, ts in threads:
        assert [m.text for m in bot_posts(slack, channel, ts)] == ["Here you are."], "once, not twice"


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
async def test_final_states_owed_at_a_stop_are_painted_after_the_restart(
    rig: tuple[FakeSlack, Script, Daemon], stop: str
) -> None:
    slack, script, daemon = rig
    daemon.env["BOT_STOP_FLUSH_S"] = "2"  # a stop tries the finals that long, in vain, and keeps them owed
    await daemon.start()
    await daemon.connected()
    slack.fail("chat.update", status=500, times=None)  # no status message can show its end
    threads = await start_threads(
        slack,
        script,
        "nap",
        lambda: [Reply.tools(tool_use("sleep_for", {"seconds": 1})), Reply.text_only("Awake.")],
    )
    for channel, ts in threads:
        await wait_text(slack, channel, ts, "Awake.")
    # Each thread owes its status message's final; the answer was posted with its feedback buttons.
    await slack.wait_for(lambda: owed(daemon, edits=True) == THREADS, WAIT_S, "every final owed in the store")
    if stop == "SIGTERM":
        assert await daemon.stop(timeout_s=60) == 0
        assert "kept in the store for the next start" in daemon.log()
    else:
        await kill(daemon)
    assert integrity(daemon) == "ok" and owed(daemon, edits=True) == THREADS

    slack.clear_failures()
    await daemon.start()
    await daemon.connected(total=2)
    for channel, ts in threads:
        [status] = status_posts(slack, channel, ts)
        await slack.wait_for(lambda: "✅" in status.text, 60, "the final state, after the restart")  # noqa: B023
        answers = bot_posts(slack, channel, ts)[1:]
        assert [m.text for m in answers] == ["Awake."]
        answer = answers[0]
        await slack.wait_for(
            lambda: any(b.get("type") == "context_actions" for b in answer.blocks or []),  # noqa: B023
            60,
            "its feedback buttons",
        )
    await slack.wait_for(lambda: owed(daemon, edits=True) == 0, WAIT_S, "the outbox emptied")
    assert await daemon.stop() == 0


async def test_posts_within_slacks_per_channel_limit_are_all_delivered_once(
    rig: tuple[FakeSlack, Script, Daemon],
) -> None:
    """Slack's ~1 post a second per channel, 429 + Retry-After beyond a short burst: ten threads a channel, each with
    a status message and an answer, lose nothing (the SDK's three retries used to give some up, silently)."""
    slack, script, daemon = rig
    slack.limit_posts_like_slack(burst=3)
    await daemon.start()
    await daemon.connected()
    threads = await start_threads(
        slack,
        script,
        "count",
        lambda: [Reply.tools(tool_use("wordcount", {"text": "a b c"})), Reply.text_only("Three.")],
        channels=["C1", "C2"],
    )
    for channel, ts in threads:
        await slack.wait_for(lambda: "Three." in [m.text for m in bot_posts(slack, channel, ts)], 60, "the answer")  # noqa: B023
    for channel, ts in threads:
        [status, answer] = bot_posts(slack, channel, ts)
        assert answer.text == "Three." and "wordcount" in status.text
    await slack.wait_for(lambda: owed(daemon, edits=False) == 0, WAIT_S, "every owed post settled")
    # One refusal a channel at most: the queue believes in Slack's usual burst (10) until this fake says 3.
    assert "not delivered" not in daemon.log() and slack.rate_limited["chat.postMessage"] <= 2
    assert await daemon.stop() == 0
