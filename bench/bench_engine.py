"""Turn-loop benchmark: wake-up delay, cancel latency and CPU per turn, each beside a baseline.

Run: `.venv/bin/python bench/bench_engine.py`. Prints figures, asserts nothing (targets from issue 2):
(a) tool call finishes, with an injection queued → next model request arrives at the fake: ≤ 20 ms.
    Baseline: the classic thread-pool loop that checks its futures every 0.1 s, run against the same fake.
(b) cancel latency of a running `sleep_for`: p99 ≤ 100 ms.
    Baseline: the classic threaded sleep that sleeps in 1 s steps and checks a cancel flag between them.
(c) loop CPU per simple turn, model time excluded (an in-process provider answering at once): ≤ 5 ms.
    Baseline: the same turns' store work alone (the floor any persistent loop pays).
The engine runs exactly as the daemon wires it (`open_core`), on a temporary SQLite file; (a) and (b) talk
to the fake Messages API through the real anthropic SDK over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.anthropic_api import FakeAnthropic, Reply, tool_use  # noqa: E402
from support import Edge, classic_cancel_latencies, line, sdk_provider  # noqa: E402

from bot.app import Core, open_core  # noqa: E402
from bot.config import load_settings  # noqa: E402
from bot.toolcall import CallStatus  # noqa: E402
from bot.types import ModelReply, ModelRequest, Provider, TextSink  # noqa: E402
from tools.base import ToolContext, tool  # noqa: E402

WAKE_RUNS = 30
CANCEL_RUNS = 50
CPU_TURNS = 300
CLASSIC_TICK_S = 0.1


# --- (a) tool finished → next model request ----------------------------------------------------------


async def wake_delay_engine(fake: FakeAnthropic, data_dir: Path) -> list[float]:
    finished_at: dict[str, float] = {}

    @tool("work", "Works for a while.", {"seconds": {"type": "number"}}, required=("seconds",))
    async def work(args: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(args["seconds"])
        finished_at[ctx.call_id] = time.perf_counter()
        return "done"

    edge = Edge()
    settings = load_settings(_env_file=None, bot_data_dir=data_dir, bot_yield_on_injection=False)
    provider = sdk_provider(fake)
    delays: list[float] = []
    async with open_core(settings, edge, provider=provider) as core:  # type: ignore[arg-type]
        core.toolbox.add(work)
        for i in range(WAKE_RUNS):
            key = f"bench:wake:{i}"
            use = tool_use("work", {"seconds": random.uniform(0.03, 0.08)})
            fake.script(Reply.tools(use), Reply.text_only("ok"))
            before = len(fake.requests)
            core.engine.submit(key, "work, please")
            await edge.until(lambda u=use: u["id"] in edge.calls and edge.calls[u["id"]].status is CallStatus.RUNNING)
            core.engine.submit(key, "and then tell me")  # a turn runs: this joins it
            await edge.until(lambda k=key: edge.finished.get(k) == 1)
            delays.append((fake.request_times[before + 1] - finished_at[use["id"]]) * 1000)
    await provider.close()
    return delays


async def wake_delay_classic(fake: FakeAnthropic) -> list[float]:
    """The classic design: tools in a thread pool, a loop that looks at its futures every 0.1 s."""
    provider = sdk_provider(fake)
    pool = ThreadPoolExecutor(max_workers=4)
    delays: list[float] = []
    injections: list[str] = []

    def work(seconds: float) -> float:
        time.sleep(seconds)
        return time.perf_counter()

    for _ in range(WAKE_RUNS):
        future = pool.submit(work, random.uniform(0.03, 0.08))
        injections.append("and then tell me")
        while not future.done():  # noqa: ASYNC110 - polling is the point of this baseline
            await asyncio.sleep(CLASSIC_TICK_S)
        notes, injections[:] = [f"[mid-turn user note] {n}" for n in injections], []
        content = [{"type": "text", "text": "work, please"}, *({"type": "text", "text": n} for n in notes)]
        before = len(fake.requests)
        await provider.complete(ModelRequest(system="bench", messages=[{"role": "user", "content": content}], tools=[]))
        delays.append((fake.request_times[before] - future.result()) * 1000)
    pool.shutdown()
    await provider.close()
    return delays


# --- (b) cancel latency ------------------------------------------------------------------------------


async def cancel_latency_engine(fake: FakeAnthropic, data_dir: Path) -> list[float]:
    edge = Edge()
    settings = load_settings(_env_file=None, bot_data_dir=data_dir)
    provider = sdk_provider(fake)
    latencies: list[float] = []
    async with open_core(settings, edge, provider=provider) as core:  # type: ignore[arg-type]
        for i in range(CANCEL_RUNS):
            key = f"bench:cancel:{i}"
            use = tool_use("sleep_for", {"seconds": 30})
            fake.script(Reply.tools(use), Reply.text_only("stopped"))
            core.engine.submit(key, "sleep")
            await edge.until(lambda u=use: u["id"] in edge.calls and edge.calls[u["id"]].status is CallStatus.RUNNING)
            await asyncio.sleep(random.uniform(0, 0.05))  # cancel at a random point of the sleep
            start = time.perf_counter()
            await core.engine.cancel_calls(key, by="bench")
            latencies.append((time.perf_counter() - start) * 1000)
            assert edge.calls[use["id"]].status is CallStatus.CANCELLED
            await edge.until(lambda k=key: edge.finished.get(k) == 1)
    await provider.close()
    return latencies


# --- (c) CPU per turn ---------------------------------------------------------------------------------


class InstantProvider:
    """A model that answers at once, so only the loop's own work is measured."""

    def __init__(self, *, with_tool: bool = False) -> None:
        self.with_tool = with_tool

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        if on_text is not None:
            on_text("ok")
        last = request.messages[-1]["content"]
        answered = any(block.get("type") == "tool_result" for block in last)
        if self.with_tool and not answered:
            return ModelReply(
                [{"type": "tool_use", "id": f"toolu_{time.perf_counter_ns()}", "name": "now", "input": {}}], "tool_use"
            )
        return ModelReply([{"type": "text", "text": "ok"}], "end_turn")


async def cpu_per_turn(data_dir: Path, provider: Provider, label: str) -> tuple[float, float]:
    settings = load_settings(_env_file=None, bot_data_dir=data_dir / label)
    async with open_core(settings, Edge(), provider=provider) as core:  # type: ignore[arg-type]
        await run_turns(core, 30, f"warm:{label}")
        cpu, wall = time.process_time(), time.perf_counter()
        await run_turns(core, CPU_TURNS, label)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / CPU_TURNS * 1000, wall / CPU_TURNS * 1000


async def run_turns(core: Core, count: int, prefix: str) -> None:
    for i in range(count):
        outcome = await core.engine.run_turn(f"{prefix}:{i % 100}", "hello")
        assert outcome is not None and outcome.error is None


async def cpu_store_floor(data_dir: Path) -> float:
    """What one simple turn must persist, done directly on the store: the floor under any persistent loop."""
    from bot.store import SqliteStore

    store = await SqliteStore.open(data_dir / "floor" / "bot.db")
    pair = [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]

    async def turns(count: int, prefix: str) -> None:
        for i in range(count):
            key = f"{prefix}:{i % 100}"
            await store.ensure_session(key)
            await store.next_turn(key)
            await store.load_messages(key)
            await store.undelivered_calls(key)  # late results to open the turn with
            await store.append_messages(key, pair)
            await store.undelivered_calls(key)  # anything owed once the turn is over

    await turns(30, "warm")
    cpu = time.process_time()
    await turns(CPU_TURNS, "floor")
    cpu = time.process_time() - cpu
    await store.close()
    return cpu / CPU_TURNS * 1000


async def main() -> None:
    random.seed(7)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        async with FakeAnthropic() as fake:
            print(f"(a) tool finished (injection queued) → next model request at the fake, {WAKE_RUNS} runs")
            line("threadbot (event-driven wait)", await wake_delay_engine(fake, data_dir / "a"), "≤ 20 ms")
            line(f"baseline: futures checked every {CLASSIC_TICK_S:g} s", await wake_delay_classic(fake))

            print(f"\n(b) cancel latency of a running sleep_for, {CANCEL_RUNS} runs")
            line("threadbot (task cancel)", await cancel_latency_engine(fake, data_dir / "b"), "p99 ≤ 100 ms")
            line("baseline: thread, flag checked each second", await classic_cancel_latencies(CANCEL_RUNS))

        print(f"\n(c) CPU per turn, model time excluded (instant in-process provider), {CPU_TURNS} turns")
        cpu, wall = await cpu_per_turn(data_dir, InstantProvider(), "plain")
        floor = await cpu_store_floor(data_dir)
        print(f"  {'threadbot, simple turn':<44} CPU {cpu:6.2f} ms/turn   wall {wall:6.2f} ms/turn   target ≤ 5 ms")
        share = f"(the loop's own share: {cpu - floor:.2f} ms)"
        print(f"  {'baseline: its store work alone':<44} CPU {floor:6.2f} ms/turn   {share}")
        cpu, wall = await cpu_per_turn(data_dir, InstantProvider(with_tool=True), "tool")
        print(f"  {'threadbot, turn with one `now` call':<44} CPU {cpu:6.2f} ms/turn   wall {wall:6.2f} ms/turn")


if __name__ == "__main__":
    asyncio.run(main())
