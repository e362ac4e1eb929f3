"""Slack files benchmark: what reading a shared file costs before the model sees it, and what an upload costs.

Run: `.venv/bin/python bench/bench_files.py`. Prints figures, asserts nothing.
(1) `FileReader.blocks` for one file (files.info skipped; download with the bot token, signature check, base64),
    for a 100 KB and a 5 MB png and a 100 KB text file. Baseline: the bare authenticated GET of the same bytes
    with the same aiohttp session, so the difference is what the reader adds.
    Also the longest stall of the event loop while the 5 MB png is read (a 1 ms ticker's worst gap), against the
    stall of the bare GET: the reading and base64 run in the loop (a thread would not help much, as base64
    holds the GIL), so this is what running calls' progress may wait.
(2) `files_upload_v2` of a 20,000-character answer (three requests: URL, bytes, complete) vs one
    `chat.postMessage` of 4,000 characters (what one part of a split answer costs).
Both against the fake Slack on 127.0.0.1 with the real slack_sdk client, so the figures are the client's and
the reader's overhead plus loopback, not Slack's latency.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import aiohttp  # noqa: E402
from fakes.slack_api import FakeSlack  # noqa: E402
from support import line  # noqa: E402

from bot.slack.client import SlackClient  # noqa: E402
from bot.slack.files import FileLimits, FileReader  # noqa: E402

ROUNDS = 30
PNG = b"\x89PNG\r\n\x1a\n"


async def timed(rounds: int, action: Callable[[], Awaitable[object]]) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await action()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def worst_stall_ms(action: Callable[[], Awaitable[object]]) -> float:
    """The longest the loop went without running a 1 ms ticker while `action` ran."""
    worst = 0.0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst, last = max(worst, (now - last) * 1000), now

    ticker = asyncio.create_task(tick())
    await action()
    done.set()
    await ticker
    return worst


async def main() -> None:
    async with FakeSlack() as slack, aiohttp.ClientSession() as session:
        client = SlackClient(token="xoxb-bench", base_url=slack.api_url, session=session)
        reader = FileReader(client, FileLimits(max_bytes=6_000_000, total_max_bytes=20_000_000, text_max_chars=200_000))
        cases = [
            ("png 100 KB", slack.files.share("a.png", PNG + bytes(100_000), "image/png")),
            ("png 5 MB", slack.files.share("b.png", PNG + bytes(5_000_000), "image/png")),
            ("text 100 KB", slack.files.share("c.txt", "log line\n" * 11_000, "text/plain")),
        ]
        print(f"(1) reading one shared file, {ROUNDS} rounds each (ms)")
        for label, item in cases:

            async def bare(url: str = item["url_private_download"]) -> bytes:
                async with session.get(url, headers={"Authorization": "Bearer xoxb-bench"}) as response:
                    return await response.read()

            line(f"{label}: bare GET (baseline)", await timed(ROUNDS, bare))
            line(f"{label}: FileReader.blocks", await timed(ROUNDS, lambda item=item: reader.blocks([item])))

        big = cases[1][1]

        async def bare_big() -> bytes:
            async with session.get(big["url_private_download"], headers={"Authorization": "Bearer xoxb-bench"}) as r:
                return await r.read()

        # The fake serves the bytes from the same loop, so part of any stall is its own; the baseline shows how much.
        line("png 5 MB: loop stall, bare GET (baseline)", [await worst_stall_ms(bare_big) for _ in range(ROUNDS)])
        stalls = [await worst_stall_ms(lambda: reader.blocks([big])) for _ in range(ROUNDS)]
        line("png 5 MB: loop stall, FileReader", stalls)

        root = slack.user_message("C1", "write a report")["ts"]
        answer = "word " * 4_000

        async def upload() -> object:
            return await client.files_upload_v2(
                channel="C1", thread_ts=root, filename="answer.md", content=answer, initial_comment="preview"
            )

        async def post() -> object:
            return await client.chat_postMessage(channel="C1", thread_ts=root, text=answer[:4_000])

        print(f"(2) sharing a 20,000-character answer, {ROUNDS} rounds each (ms)")
        line("chat.postMessage, one 4,000-char part (baseline)", await timed(ROUNDS, post))
        line("files_upload_v2, the whole answer", await timed(ROUNDS, upload))


if __name__ == "__main__":
    asyncio.run(main())
