"""Tool-call registry benchmark: cancel per kind, 1,000 concurrent calls, injection latency under a long tool.

Run: `.venv/bin/python bench/bench_calls.py`. Prints figures, asserts nothing (targets from issue 3):
(1) cancel latency, p99 ≤ 100 ms, for an async tool (task cancel), a threaded tool (cancel event) and a
    subprocess tool (`run_command`: SIGTERM to the process group). Baseline: the classic threaded tool that
    sleeps in 1 s steps and checks a cancel flag between them.
(2) 1,000 concurrent `sleep_for(1)` calls across 100 sessions (cap 1,000, 10 per session): wall time until
    all are final, ≤ 1.5 s, and peak RSS. Baseline: 1,000 bare `asyncio.sleep(1)` in the same loop.
(3) injection-to-model latency while a 30 s tool runs, ≤ 0.5 s. Baseline: a loop that drains injections only
    after the tool batch finishes; its figure is the batch's length, so it is measured with a 2 s tool
    (a 30 s tool would give ~30 s) to keep the run short.
(4) caps that fit the work (issue 9): 100 threads each running one `sleep_for`, default settings (global cap
    16). Baseline: the same with `sleep_for` capped like a thread or subprocess, as every call was before;
    the issue measured 70 s instead of 11 s for 10 s sleeps. Scaled to 2 s sleeps to keep the run short.
Everything runs as the daemon wires it (`open_core`) on a temporary SQLite file; (3) talks to the fake
Messages API through the real anthropic SDK over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import anthropic  # noqa: E402
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use  # noqa: E402
from support import Edge, classic_cancel_latencies, line, pct  # noqa: E402

from bot.app import Core, open_core  # noqa: E402
from bot.calls.registry import CallRegistry  # noqa: E402
from bot.config import load_settings  # noqa: E402
from bot.model.anthropic import AnthropicProvider  # noqa: E402
from bot.store import SqliteStore  # noqa: E402
from bot.toolcall import CallStatus, ToolCall  # noqa: E402
from bot.types import ModelReply, ModelRequest, TextSink  # noqa: E402
from tools.base import Tool, ToolContext, ToolKind, tool  # noqa: E402
from tools.run_command import run_command  # noqa: E402
from tools.sleep_for import sleep_for  # noqa: E402

CANCEL_RUNS = 50
CONCURRENT_CALLS = 1_000
SESSIONS = 100
INJECTION_RUNS = 10
BASELINE_TOOL_S = 2.0
BASELINE_RUNS = 3
CAPS_SLEEP_S = 2.0


class InstantModel:
    """Answers at once: a cancelled call's result is news, and the idle session gets a turn to hear it."""

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        return ModelReply([{"type": "text", "text": "ok"}], "end_turn")


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


_ids = iter(range(10**9))


async def submit(core: Core, item: Tool, args: dict[str, Any], session: str) -> ToolCall:
    return await core.registry.submit(
        call_id=f"toolu_bench{next(_ids):08d}",
        session_key=session,
        turn_id=f"{session}#1",
        tool_name=item.name,
        tool_input=args,
        tool=item,
    )


# --- (1) cancel latency per kind ----------------------------------------------------------------------


@tool("wait_forever", "An async tool that waits until cancelled.")
async def wait_forever(args: dict[str, Any], ctx: ToolContext) -> None:
    await asyncio.Event().wait()


def threaded_tool(exits: dict[str, float], edge: Edge) -> Tool:
    @tool("spin", "A threaded tool that watches its cancel event.")
    def spin(args: dict[str, Any], ctx: ToolContext) -> None:
        while not ctx.cancelled.wait(0.01):
            pass
        exits[ctx.call_id] = time.perf_counter()
        ctx.loop.call_soon_threadsafe(edge.poke)

    return spin


async def cancel_latencies(core: Core, edge: Edge) -> dict[str, list[float]]:
    exits: dict[str, float] = {}
    spin = threaded_tool(exits, edge)
    kinds: dict[str, tuple[Tool, dict[str, Any]]] = {
        "async tool (task cancelled)": (wait_forever, {}),
        "threaded tool (cancel event)": (spin, {}),
        "subprocess tool (process group killed)": (run_command, {"command": "sleep 30 & sleep 30; wait"}),
    }
    session = "bench:cancel"
    await core.store.ensure_session(session)
    results: dict[str, list[float]] = {}
    for label, (item, args) in kinds.items():
        latencies = []
        for _ in range(CANCEL_RUNS):
            call = await submit(core, item, args, session)
            await edge.until(lambda c=call: edge.running(c.id))
            await asyncio.sleep(random.uniform(0, 0.02))  # cancel at a random point of its work
            start = time.perf_counter()
            outcome = await core.registry.cancel(call.id, by="bench")
            done = time.perf_counter()
            assert outcome is not None and outcome.cancelled, outcome
            if item is spin:
                await edge.until(lambda c=call: c.id in exits)
                done = max(done, exits[call.id])  # the thread itself has stopped
            latencies.append((done - start) * 1000)
        results[label] = latencies
    return results


# --- (2) 1,000 concurrent calls -------------------------------------------------------------------------


class NoWriteStore(SqliteStore):
    """Diagnostic: a store whose call writes return at once, to show what the write-through costs."""

    async def save_calls(self, calls: Sequence[ToolCall]) -> None:
        return None


async def thousand_sleeps_registry(data_dir: Path, *, writes: bool = True) -> float:
    """The registry alone (no turns around the calls): submit 1,000 calls, wait until every one is final."""
    store = await (SqliteStore if writes else NoWriteStore).open(data_dir / "bot.db")
    registry = CallRegistry(
        store=store,
        work_dir=data_dir / "work",
        max_concurrent=CONCURRENT_CALLS,
        max_per_session=10,
        max_io=CONCURRENT_CALLS,
        default_timeout_s=600,
    )
    sessions = [f"bench:many:{i}" for i in range(SESSIONS)]
    for session in sessions:
        await store.ensure_session(session)
    start = time.perf_counter()
    calls = await asyncio.gather(
        *(
            registry.submit(
                call_id=f"toolu_many{i:06d}",
                session_key=sessions[i % SESSIONS],
                turn_id="t",
                tool_name="sleep_for",
                tool_input={"seconds": 1},
                tool=sleep_for,
            )
            for i in range(CONCURRENT_CALLS)
        )
    )
    await asyncio.gather(*(registry.wait_final(call.id) for call in calls))
    wall = time.perf_counter() - start
    assert all(call.status is CallStatus.COMPLETED for call in calls)
    await registry.shutdown(grace_s=1)
    await store.close()
    return wall


class TenSleepsModel:
    """Each turn's first answer asks for ten sleep_for(1) calls; the second one ends the turn."""

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        last = request.messages[-1]["content"]
        if any(block.get("type") == "tool_result" for block in last):
            return ModelReply([{"type": "text", "text": "all slept"}], "end_turn")
        uses = [
            {"type": "tool_use", "id": f"toolu_{next(_ids):010d}", "name": "sleep_for", "input": {"seconds": 1}}
            for _ in range(CONCURRENT_CALLS // SESSIONS)
        ]
        return ModelReply(uses, "tool_use")


async def thousand_sleeps_engine(data_dir: Path) -> float:
    """The same 1,000 calls as 100 turns of ten calls each, through the whole engine (instant model)."""
    settings = load_settings(
        _env_file=None,
        bot_data_dir=data_dir,
        bot_max_concurrent_tools=CONCURRENT_CALLS,
        bot_max_concurrent_tools_per_session=10,
    )
    edge = Edge()
    async with open_core(settings, edge, provider=TenSleepsModel()) as core:  # type: ignore[arg-type]
        start = time.perf_counter()
        for i in range(SESSIONS):
            core.engine.submit(f"bench:turns:{i}", "sleep ten times")
        await asyncio.gather(*(core.engine.settle(f"bench:turns:{i}") for i in range(SESSIONS)))
        wall = time.perf_counter() - start
        assert all(edge.finished.get(f"bench:turns:{i}") == 1 for i in range(SESSIONS)), edge.finished
    return wall


async def thousand_bare_sleeps() -> float:
    start = time.perf_counter()
    await asyncio.gather(*(asyncio.sleep(1) for _ in range(CONCURRENT_CALLS)))
    return time.perf_counter() - start


# --- (4) I/O waits are not throttled like threads ---------------------------------------------------------


class OneSleepModel:
    """Each turn's first answer asks for one sleep_for; the second one ends the turn."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        last = request.messages[-1]["content"]
        if any(block.get("type") == "tool_result" for block in last):
            return ModelReply([{"type": "text", "text": "slept"}], "end_turn")
        call_id = f"toolu_{next(_ids):010d}"
        use = {"type": "tool_use", "id": call_id, "name": "sleep_for", "input": {"seconds": self._seconds}}
        return ModelReply([use], "tool_use")


async def hundred_threads_sleeping(data_dir: Path, *, seconds: float, capped_like_threads: bool) -> float:
    """100 sessions, one sleep_for each, default caps: wall time until every turn is done."""
    settings = load_settings(_env_file=None, bot_data_dir=data_dir)
    edge = Edge()
    async with open_core(settings, edge, provider=OneSleepModel(seconds)) as core:  # type: ignore[arg-type]
        if capped_like_threads:
            core.toolbox.add(dataclasses.replace(sleep_for, kind=ToolKind.PROCESS))
        start = time.perf_counter()
        for i in range(SESSIONS):
            core.engine.submit(f"bench:caps:{i}", "sleep")
        await asyncio.gather(*(core.engine.settle(f"bench:caps:{i}") for i in range(SESSIONS)))
        wall = time.perf_counter() - start
        assert all(edge.finished.get(f"bench:caps:{i}") == 1 for i in range(SESSIONS)), edge.finished
    return wall


# --- (3) injection while a long tool runs ---------------------------------------------------------------


async def injection_latency(
    fake: FakeAnthropic, data_dir: Path, *, tool_s: float, runs: int, yield_now: bool
) -> list[float]:
    edge = Edge()
    settings = load_settings(_env_file=None, bot_data_dir=data_dir, bot_yield_on_injection=yield_now)
    client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="bench", max_retries=0)
    provider = AnthropicProvider(model="claude-sonnet-5-5", max_tokens=1024, client=client)
    latencies = []
    async with open_core(settings, edge, provider=provider) as core:  # type: ignore[arg-type]
        for i in range(runs):
            key = f"bench:inject:{i}"
            use = tool_use("sleep_for", {"seconds": tool_s})
            fake.script(Reply.tools(use), Reply.text_only("noted"))
            before = len(fake.requests)
            core.engine.submit(key, "sleep")
            await edge.until(lambda u=use: edge.running(u["id"]))
            injected = time.perf_counter()
            core.engine.submit(key, "change of plan")  # a turn runs: this joins it
            await fake.wait_for_requests(before + 2, timeout=tool_s + 10)
            latencies.append((fake.request_times[before + 1] - injected) * 1000)
            await edge.until(lambda k=key: edge.finished.get(k) == 1, timeout_s=tool_s + 10)
            await core.engine.cancel_calls(key, by="bench")
            await core.engine.settle(key)
    await client.close()
    return latencies


async def main() -> None:
    random.seed(7)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        edge = Edge()
        settings = load_settings(
            _env_file=None,
            bot_data_dir=data_dir / "registry",
            bot_max_concurrent_tools=CONCURRENT_CALLS,
            bot_max_concurrent_tools_per_session=10,
        )
        async with open_core(settings, edge, provider=InstantModel()) as core:  # type: ignore[arg-type]
            print(f"(1) cancel latency, {CANCEL_RUNS} runs each (until the work itself stopped)")
            for label, values in (await cancel_latencies(core, edge)).items():
                line(label, values, "p99 ≤ 100 ms")
            line("baseline: thread, flag checked each second", await classic_cancel_latencies(CANCEL_RUNS))

        print(f"\n(2) {CONCURRENT_CALLS:,} concurrent sleep_for(1), {SESSIONS} sessions, cap 1,000 (10 a session)")
        rss_before = rss_mb()
        registry_wall = await thousand_sleeps_registry(data_dir / "many")
        rss_registry = rss_mb()
        no_write_wall = await thousand_sleeps_registry(data_dir / "no-writes", writes=False)
        engine_wall = await thousand_sleeps_engine(data_dir / "turns")
        rss_engine = rss_mb()
        bare = await thousand_bare_sleeps()
        print(f"  {'registry: submitted → all final':<46} {registry_wall:6.2f} s   target ≤ 1.5 s")
        print(f"  {'  the same, call writes skipped (diagnostic)':<46} {no_write_wall:6.2f} s")
        print(f"  {'engine: 100 turns × 10 calls → all turns done':<46} {engine_wall:6.2f} s")
        print(f"  {'baseline: 1,000 bare asyncio.sleep(1)':<46} {bare:6.2f} s")
        rss = f"{rss_before:.1f} → {rss_registry:.1f} → {rss_engine:.1f} MB"
        print(f"  {'peak RSS: before → registry → engine':<46} {rss}")

        async with FakeAnthropic() as fake:
            print(f"\n(3) injection → next model request, while a 30 s tool runs ({INJECTION_RUNS} runs)")
            values = await injection_latency(fake, data_dir / "inject", tool_s=30, runs=INJECTION_RUNS, yield_now=True)
            line("threadbot (a note yields the turn at once)", values, "≤ 500 ms")
            baseline = await injection_latency(
                fake, data_dir / "drain-after", tool_s=BASELINE_TOOL_S, runs=BASELINE_RUNS, yield_now=False
            )
            line(f"baseline: drained after the batch ({BASELINE_TOOL_S:g} s tool)", baseline)
            print(f"  {'':<46} (with the 30 s tool: ~{pct(baseline, 50) / 1000 / BASELINE_TOOL_S * 30:.0f} s)")

        print(f"\n(4) {SESSIONS} threads × sleep_for({CAPS_SLEEP_S:g}), default caps (16 for threads/processes)")
        after = await hundred_threads_sleeping(data_dir / "caps-io", seconds=CAPS_SLEEP_S, capped_like_threads=False)
        before = await hundred_threads_sleeping(data_dir / "caps-old", seconds=CAPS_SLEEP_S, capped_like_threads=True)
        print(f"  {'threadbot (sleep_for is an I/O call)':<46} {after:6.2f} s   target ≈ {CAPS_SLEEP_S:g} s")
        print(f"  {'baseline: sleep_for capped like a thread':<46} {before:6.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
