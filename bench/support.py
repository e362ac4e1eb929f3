"""What the benchmarks share: an edge that can be waited on, percentiles, the seed's classic baselines, and a
feed of the fake Slack's calls.

Imported by the bench scripts after they put the repository and tests/ on `sys.path`.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import anthropic
from fakes.anthropic_api import FakeAnthropic
from fakes.slack_api import ApiCall, FakeSlack

from bot.model.anthropic import AnthropicProvider
from bot.model.caching import CacheTTL
from bot.toolcall import CallStatus, ToolCall
from bot.types import TurnOutcome


class Edge:
    """An `EngineOutput` that keeps the latest state of each call and counts finished turns; wakes waiters."""

    def __init__(self) -> None:
        self.calls: dict[str, ToolCall] = {}
        self.finished: dict[str, int] = {}
        self._changed = asyncio.Event()

    def call_changed(self, call: ToolCall) -> None:
        self.calls[call.id] = call
        self._changed.set()

    def turn_finished(self, outcome: TurnOutcome) -> None:
        self.finished[outcome.session_key] = self.finished.get(outcome.session_key, 0) + 1
        self._changed.set()

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None

    def poke(self) -> None:
        self._changed.set()

    def running(self, call_id: str) -> bool:
        return call_id in self.calls and self.calls[call_id].status is CallStatus.RUNNING

    async def until(self, predicate: Callable[[], bool], timeout_s: float = 30) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def line(label: str, values_ms: list[float], target: str = "") -> None:
    p50, p99 = pct(values_ms, 50), pct(values_ms, 99)
    extra = f"   target {target}" if target else ""
    print(f"  {label:<46} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms   max {max(values_ms):8.1f} ms{extra}")


def sdk_provider(fake: FakeAnthropic, cache_ttl: CacheTTL | None = "5m") -> AnthropicProvider:
    client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="bench", max_retries=0)
    return AnthropicProvider(model="claude-sonnet-5-5", max_tokens=1024, client=client, cache_ttl=cache_ttl)


def classic_sleep(seconds: float, stop: threading.Event) -> float:
    """The seed's threaded sleep_for: one-second steps, the cancel flag checked between them."""
    for _ in range(int(seconds)):
        if stop.is_set():
            break
        time.sleep(1.0)
    return time.perf_counter()


async def classic_cancel_latencies(runs: int) -> list[float]:
    """Cancel latency (ms) of the classic threaded sleep, cancelled at a random moment."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=runs)

    async def one() -> float:
        stop = threading.Event()
        future = loop.run_in_executor(pool, classic_sleep, 30.0, stop)
        await asyncio.sleep(random.uniform(0.1, 1.1))
        requested = time.perf_counter()
        stop.set()
        return (await future - requested) * 1000

    latencies = await asyncio.gather(*(one() for _ in range(runs)))
    pool.shutdown()
    return list(latencies)


class CallFeed:
    """The fake Slack's answered calls since it was last asked: a wait over thousands of calls reads each once."""

    def __init__(self, slack: FakeSlack) -> None:
        self._slack = slack
        self._seen = 0

    def new(self) -> list[ApiCall]:
        calls = self._slack.calls[self._seen :]
        self._seen += len(calls)
        return calls
