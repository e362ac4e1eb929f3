"""Slack surfaces side by side: what one tool turn costs in Slack calls, classic mode against agent mode.

Run: `.venv/bin/python bench/bench_surface.py [turns]` (about a minute). Prints figures; asserts nothing.
For each mode a real daemon (`python -m bot run`, Socket Mode) answers `turns` mentions in one channel, each a
tool turn: the model says a few words, calls `sleep_for` for 3 s, then answers. Counted from the fake Slack:
posts (`chat.postMessage`), edits (`chat.update`) and stream calls (`chat.startStream` / `appendStream` /
`stopStream`) per turn, the messages each thread ends with, and how long after the call ended (taken as the model's next
request, which follows the call's end by a few milliseconds) its final state was visible. Agent
mode is measured twice: with a stream that lives through the turn, and with Slack ending every stream after
1.5 s (the stream limit, in seconds instead of five minutes), where the message is kept by `chat.update`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from daemon_rig import Daemon, mention, status_posts  # noqa: E402
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts  # noqa: E402
from fakes.slack_api import FakeSlack  # noqa: E402
from fakes.slack_streams import task_cards  # noqa: E402

METHODS = ("chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream", "chat.stopStream")


def _final(slack: FakeSlack, thread_ts: str, agent: bool) -> float | None:
    """When the thread first showed its call as done (fake's clock), or None."""
    posts = slack.posts_in_thread("C1", thread_ts)
    for message in posts if not agent else posts[-1:]:
        for revision in message.history:
            done = (
                any(status == "complete" for _, status, _ in task_cards(revision.blocks))
                if agent
                else "✅" in revision.text
            )
            if done:
                return revision.time
    return None


async def run(mode: str, turns: int, stream_limit_s: float | None) -> dict[str, float]:
    async with FakeSlack() as slack, FakeAnthropic() as model:
        if stream_limit_s is not None:
            slack.streams.limit_s = stream_limit_s

        def script(request: dict[str, object]) -> Reply:
            asked = len([m for m in request["messages"] if m["role"] == "assistant"])  # type: ignore[index, union-attr]
            if asked == 0:
                return Reply.tools(tool_use("sleep_for", {"seconds": 3}), text="Let me sleep on it.")
            return Reply.text_only(f"Rested: {user_texts(request)[0][:20]}")

        model.default = script
        with tempfile.TemporaryDirectory() as data:
            daemon = Daemon(slack, model, Path(data), env={"BOT_SLACK_SURFACE": mode})
            await daemon.start()
            try:
                await daemon.connected()
                before = {method: len(slack.calls_to(method)) for method in METHODS}
                events = [await mention(slack, "C1", f"turn {i}") for i in range(turns)]
                agent = mode == "agent"

                def done() -> bool:
                    return all(_final(slack, e["ts"], agent) is not None for e in events) and all(
                        any("Rested" in m.text for m in slack.posts_in_thread("C1", e["ts"])) for e in events
                    )

                await slack.wait_for(lambda: done() or None, 120, "every turn done")
                await asyncio.sleep(3)  # a benchmark may wait: late edits land before counting
                counts = {method: (len(slack.calls_to(method)) - before[method]) / turns for method in METHODS}
                posts = [len(slack.posts_in_thread("C1", e["ts"])) for e in events]
                statuses = [len(status_posts(slack, "C1", e["ts"])) for e in events]
                lags = []
                for event in events:
                    words = f"turn {events.index(event)}"
                    asked_again = [
                        at
                        for request, at in zip(model.requests, model.request_times, strict=True)
                        if words in user_texts(request)[0] and len(request["messages"]) > 1
                    ]
                    seen = _final(slack, event["ts"], agent)
                    if asked_again and seen is not None:
                        lags.append(seen - asked_again[0])
                return {
                    **counts,
                    "final visible after call, ms p50": statistics.median(lags) * 1000,
                    "final visible after call, ms max": max(lags) * 1000,
                    "messages per turn": statistics.mean(posts),
                    "status messages per turn": statistics.mean(statuses),
                }
            finally:
                await daemon.stop()


async def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rows = {
        "classic": await run("classic", turns, None),
        "agent": await run("agent", turns, None),
        "agent, stream ends at 1.5 s": await run("agent", turns, 1.5),
    }
    names = list(next(iter(rows.values())))
    print(f"per tool turn ({turns} turns in one channel, sleep_for 3 s each)")
    print(f"{'':32}" + "".join(f"{mode:>30}" for mode in rows))
    for name in names:
        print(f"{name:32}" + "".join(f"{rows[mode][name]:>30.1f}" for mode in rows))


if __name__ == "__main__":
    asyncio.run(main())
