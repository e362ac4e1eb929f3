"""MCP benchmark: call overhead and cancel latency to the server, over stdio and streamable HTTP.

Run: `.venv/bin/python bench/bench_mcp.py`. Prints figures, asserts nothing (targets from issue 10):
(1) call overhead: a registry call of `mcp__test__echo` (request → server handler → result → final),
    beside the same echo as an in-process async tool through the same registry (the baseline), and the
    bare SDK `call_tool` without the registry.
(2) cancel latency: a running `mcp__test__steps` is cancelled at a random moment; measured are the time
    until the call is final (what the model waits for, p99 ≤ 100 ms) and until the SERVER's handler
    records its cancellation (within 100 ms). The server is tests/mcp_server.py, a real SDK server in
    its own process; both clocks are the system's monotonic clock, so they compare across processes.
Everything runs as the daemon wires it (`open_core`) on a temporary SQLite file.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from mcp_support import Record, http_server, stdio_entry, write_config  # noqa: E402
from support import Edge, line  # noqa: E402

from bot.app import Core, open_core  # noqa: E402
from bot.config import load_settings  # noqa: E402
from bot.toolcall import CallStatus  # noqa: E402
from bot.types import ModelReply, ModelRequest, TextSink  # noqa: E402
from tools.base import JSON, Tool, ToolContext, tool  # noqa: E402

CALL_RUNS = 100
CANCEL_RUNS = 20


class InstantModel:
    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        return ModelReply([{"type": "text", "text": "ok"}], "end_turn")


@tool("echo_in_process", "Echo, in this process.", {"text": {"type": "string"}}, required=("text",))
async def echo_in_process(args: dict[str, JSON], ctx: ToolContext) -> JSON:
    return args["text"]


_ids = iter(range(10**9))


async def run_call(core: Core, edge: Edge, item: Tool, args: dict[str, Any]) -> float:
    """Submit → final, in ms."""
    call_id = f"toolu_bench{next(_ids):08d}"
    started = time.perf_counter()
    await core.registry.submit(
        call_id=call_id, session_key="bench:mcp", turn_id="bench:mcp#1", tool_name=item.name, tool_input=args, tool=item
    )
    await core.registry.wait_final(call_id)
    elapsed = (time.perf_counter() - started) * 1000
    call = core.registry.get(call_id)
    assert call is not None and call.status is CallStatus.COMPLETED, call
    return elapsed


@contextlib.asynccontextmanager
async def mcp_core(transport: str, work: Path) -> AsyncIterator[tuple[Core, Edge, Record]]:
    record = Record(work / f"{transport}-record.txt")
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            entry = stdio_entry(record)
        else:
            entry = {"type": "http", "url": await stack.enter_async_context(http_server(record))}
        config = write_config(work / f"{transport}.json", {"test": entry})
        settings = load_settings(_env_file=None, bot_data_dir=work / transport, bot_mcp_config=config)
        edge = Edge()
        core = await stack.enter_async_context(open_core(settings, edge, provider=InstantModel()))  # type: ignore[arg-type]
        assert core.mcp is not None
        await asyncio.wait_for(core.mcp.connections[0].ready.wait(), 30)
        await core.store.ensure_session("bench:mcp")
        yield core, edge, record


async def overhead(core: Core, edge: Edge, transport: str) -> None:
    mcp_echo = core.toolbox.get("mcp__test__echo")
    assert mcp_echo is not None
    for _ in range(10):  # warm up both paths
        await run_call(core, edge, mcp_echo, {"text": "warm"})
        await run_call(core, edge, echo_in_process, {"text": "warm"})
    local = [await run_call(core, edge, echo_in_process, {"text": "hello"}) for _ in range(CALL_RUNS)]
    remote = [await run_call(core, edge, mcp_echo, {"text": "hello"}) for _ in range(CALL_RUNS)]
    client = core.mcp.connections[0]._client if core.mcp else None
    assert client is not None
    bare = []
    for _ in range(CALL_RUNS):
        started = time.perf_counter()
        await client.call_tool("echo", {"text": "hello"})
        bare.append((time.perf_counter() - started) * 1000)
    print(f"(1) call overhead over {transport}, {CALL_RUNS} calls each")
    line("baseline: in-process async tool via the registry", local)
    line(f"MCP tool via the registry ({transport})", remote)
    line(f"bare SDK call_tool ({transport}), no registry", bare)


async def cancel_latency(core: Core, edge: Edge, record: Record, transport: str) -> None:
    steps = core.toolbox.get("mcp__test__steps")
    assert steps is not None
    to_final, to_server = [], []
    for run in range(1, CANCEL_RUNS + 1):
        call_id = f"toolu_cancel{next(_ids):08d}"
        await core.registry.submit(
            call_id=call_id,
            session_key="bench:mcp",
            turn_id="bench:mcp#2",
            tool_name=steps.name,
            tool_input={"n": 10_000, "interval_ms": 100},
            tool=steps,
        )
        await record.wait("start steps", run)
        await asyncio.sleep(random.uniform(0.05, 0.3))  # a random moment within a step
        asked = time.monotonic()
        result = await core.registry.cancel(call_id, by="bench")
        final = time.monotonic()
        assert result is not None and result.cancelled
        seen = await record.wait("cancelled steps", run)
        to_final.append((final - asked) * 1000)
        to_server.append((seen - asked) * 1000)
    print(f"(2) cancel latency over {transport}, {CANCEL_RUNS} cancels at random moments")
    line("cancel → call final (what the model waits for)", to_final, "p99 ≤ 100 ms")
    line("cancel → the server's handler cancelled", to_server, "≤ 100 ms")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for transport in ("stdio", "http"):
            work = Path(tmp)
            async with mcp_core(transport, work) as (core, edge, record):
                await overhead(core, edge, transport)
                await cancel_latency(core, edge, record, transport)


if __name__ == "__main__":
    asyncio.run(main())
