"""Garbage-collection pauses on the daemon's start-up heap, beside the same heap frozen as `run` freezes it.

Run: `.venv/bin/python bench/bench_gc.py`. Prints figures, asserts nothing (issue 18: full collections of
150-250 ms landed on the event loop). The daemon's modules are imported and its Slack app, clients and
engine modules built, as `run` has them once it is up; then a full collection is timed a few times
(the baseline: the heap as it was), the heap is frozen (`bot.slack.daemon._freeze_start_up`), and the
same collection timed again.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

ROUNDS = 5


def full_collections_ms() -> list[float]:
    timings = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        gc.collect()
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def main() -> None:
    started = time.perf_counter()
    import anthropic  # noqa: F401

    import bot.console.chat
    import bot.mcp.source  # noqa: F401
    from bot.slack import daemon

    print(f"start-up imports: {time.perf_counter() - started:.2f}s, {len(gc.get_objects()):,} objects tracked")
    baseline = full_collections_ms()
    asyncio.run(daemon._freeze_start_up())
    frozen = full_collections_ms()
    print(
        f"full collection, start-up heap as it is (baseline): median {statistics.median(baseline):.1f} ms, "
        f"max {max(baseline):.1f} ms"
    )
    print(
        f"full collection, start-up heap frozen:             median {statistics.median(frozen):.1f} ms, "
        f"max {max(frozen):.1f} ms ({gc.get_freeze_count():,} objects frozen)"
    )


if __name__ == "__main__":
    main()
