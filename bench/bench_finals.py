"""Final states under the edit budget: how long after a call ends its final state is visible, at scale.

Run: `.venv/bin/python bench/bench_finals.py` (about a minute). Prints figures; asserts nothing.

At 100, 300 and 1,000 concurrent threads, each with one status message, every call reports progress each
second until it ends, at a random moment within the first minute; `chat.update` is limited to 50 a minute
(burst 10) by the fake Slack, and the `EditScheduler` is given the same budget. Time is scaled (the fake's
`time_scale`, the scheduler's rate and spacing) so that a minute passes in half a second; every figure below
is converted back to real Slack time. For each run: when the final state became visible, after the call ended
(p50/p99/max), how many finals were lost (not visible by the deadline), how many progress edits went out, and
the floor: with 50 edits a minute, N finals that all come due within a minute cannot all be shown sooner than
about (N - burst) / 50 minutes after the first, whatever the scheduler does.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE.parent)]

from fakes.slack_api import FakeSlack  # noqa: E402
from support import pct  # noqa: E402

from bot.slack.client import SlackClient  # noqa: E402
from bot.slack.edits import EditScheduler  # noqa: E402

SCALE = 120.0  # a real minute in 0.5 s
PER_MINUTE = 50
BURST = 10
END_WINDOW_S = 60.0  # calls end within this (real) time
THREAD_COUNTS = (100, 300, 1_000)


def real(seconds: float) -> float:
    return seconds * SCALE


async def run(threads: int) -> None:
    async with FakeSlack() as slack:
        client = SlackClient(token="xoxb-bench", base_url=slack.api_url)
        messages = []
        for start in range(0, threads, 100):
            batch = range(start, min(threads, start + 100))
            posted = await asyncio.gather(*(client.chat_postMessage(channel=f"C{i % 20}", text="⏳") for i in batch))
            messages += [(str(p["channel"]), str(p["ts"])) for p in posted]
        # The fake enforces the budget with a little slack for timer jitter: its Retry-After is whole (unscaled)
        # seconds, so a 429 caused by jitter alone would pause every edit for two scaled minutes.
        slack.rate_limit("chat.update", per_minute=PER_MINUTE, burst=BURST + 5, time_scale=SCALE)
        edits = EditScheduler(
            client, per_minute=PER_MINUTE * SCALE, burst=BURST, min_interval_s=1.0 / SCALE, call_timeout_s=5.0
        )
        await edits.start()
        rng = random.Random(threads)
        began = time.perf_counter()
        ends = {m: began + rng.uniform(0, END_WINDOW_S / SCALE) for m in messages}
        ended: dict[tuple[str, str], float] = {}
        tick = 0
        while len(ended) < len(messages):  # one progress tick a (real) second for every call still running
            tick += 1
            now = time.perf_counter()
            for message, end in ends.items():
                if message in ended:
                    continue
                if now >= end:
                    edits.update(*message, text="✅ done", final=True)
                    ended[message] = now
                else:
                    edits.update(*message, text=f"⏳ running {tick}s")
            await asyncio.sleep(1.0 / SCALE)
        floor_s = max(0.0, (threads - BURST) / PER_MINUTE * 60 - END_WINDOW_S)
        deadline_s = (threads / PER_MINUTE * 60 + 120) / SCALE
        with contextlib.suppress(TimeoutError):  # what is not shown by then counts as lost
            await edits.idle(deadline_s)
        latencies, lost = [], 0
        for message, end in ended.items():
            shown = next((r.time for r in slack.message(*message).history if r.text == "✅ done"), None)
            if shown is None:
                lost += 1
            else:
                latencies.append(real(max(0.0, shown - end)))
        progress_sent = edits.stats.sent - (threads - lost)
        await edits.close(1)
    print(
        f"  {threads:>5} threads: final visible after the call ended p50 {pct(latencies, 50):7.1f} s  "
        f"p99 {pct(latencies, 99):7.1f} s  max {max(latencies):7.1f} s | lost {lost} | "
        f"progress edits sent {progress_sent}, 429s {slack.rate_limited['chat.update']} | "
        f"floor for the last final ≈ {floor_s:6.0f} s"
    )


async def main() -> None:
    print(f"final states under a {PER_MINUTE}/min chat.update budget (burst {BURST}), time scaled ×{SCALE:g}:")
    for threads in THREAD_COUNTS:
        await run(threads)


if __name__ == "__main__":
    asyncio.run(main())
