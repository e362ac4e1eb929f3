"""The shape of the caps: threads and subprocesses share the tight global cap; I/O waits have their own.

With the old single cap of 16, a hundred threads each waiting on a 10 s sleep took 70 s. These tests
pin the shape with gated tools (each call waits for its own release), counting how many run at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from conftest import CoreFactory, RecordingOutput
from proc_groups import UNFENCED_SHELL as run_command

from bot.app import Core
from bot.toolcall import CallStatus, ToolCall
from tools.base import Tool, ToolContext, ToolKind, tool
from tools.sleep_for import sleep_for

KEY = "test:caps"
_ids = iter(range(10**9))


class Gated:
    """A tool of a given kind whose calls all wait on one release; records the peak running at once."""

    def __init__(self, kind: ToolKind) -> None:
        self.release = asyncio.Event()
        self.running = 0
        self.peak = 0

        @tool("gated", "Waits for the test.", kind=kind)
        async def gated(args: dict[str, Any], ctx: ToolContext) -> None:
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                await self.release.wait()
            finally:
                self.running -= 1

        self.tool = gated


async def submit_many(core: Core, item: Tool, count: int, *, sessions: int = 1) -> list[ToolCall]:
    keys = [f"{KEY}:{i}" for i in range(sessions)]
    for key in keys:
        await core.store.ensure_session(key)
    return [
        await core.registry.submit(
            call_id=f"toolu_caps{next(_ids):08d}",
            session_key=keys[i % sessions],
            turn_id="t",
            tool_name=item.name,
            tool_input={},
            tool=item,
        )
        for i in range(count)
    ]


async def settle_running(output: RecordingOutput, calls: list[ToolCall], expected: int) -> None:
    await output.wait_for(lambda: sum(c.status is CallStatus.RUNNING for c in calls) == expected)
    for _ in range(5):  # a cap that leaked would start more on the next loop turns
        await asyncio.sleep(0)
    assert sum(c.status is CallStatus.RUNNING for c in calls) == expected


async def test_io_calls_are_not_held_by_the_thread_cap(core_factory: CoreFactory, output: RecordingOutput) -> None:
    core = await core_factory(bot_max_concurrent_tools=2, bot_max_concurrent_tools_per_session=1)
    io = Gated(ToolKind.IO)
    calls = await submit_many(core, io.tool, 50)
    await settle_running(output, calls, 50)
    io.release.set()
    assert all([await core.registry.wait_final(c.id, 10) for c in calls])
    assert io.peak == 50 and all(c.status is CallStatus.COMPLETED for c in calls)


async def test_io_calls_have_their_own_cap(core_factory: CoreFactory, output: RecordingOutput) -> None:
    core = await core_factory(bot_max_concurrent_io_tools=3)
    io = Gated(ToolKind.IO)
    calls = await submit_many(core, io.tool, 7, sessions=7)
    await settle_running(output, calls, 3)
    assert sum(c.status is CallStatus.PENDING for c in calls) == 4
    io.release.set()
    assert all([await core.registry.wait_final(c.id, 10) for c in calls])
    assert io.peak == 3


@pytest.mark.parametrize("kind", [ToolKind.THREAD, ToolKind.PROCESS])
async def test_thread_and_process_calls_share_the_tight_cap(
    core_factory: CoreFactory, output: RecordingOutput, kind: ToolKind
) -> None:
    core = await core_factory(bot_max_concurrent_tools=2)
    heavy, io = Gated(kind), Gated(ToolKind.IO)
    heavy_calls = await submit_many(core, dataclasses.replace(heavy.tool, kind=kind), 5, sessions=5)
    io_calls = await submit_many(core, io.tool, 5, sessions=5)
    await settle_running(output, heavy_calls + io_calls, 2 + 5)  # the I/O calls are not behind the heavy ones
    heavy.release.set()
    io.release.set()
    for call in heavy_calls + io_calls:
        assert await core.registry.wait_final(call.id, 10)
    assert heavy.peak == 2 and io.peak == 5


def test_kinds_of_the_builtin_tools() -> None:
    assert sleep_for.kind is ToolKind.IO
    assert run_command.kind is ToolKind.PROCESS


def test_a_tool_kind_defaults_to_the_cautious_cap() -> None:
    @tool("sync_one", "A sync tool.")
    def sync_one(args: dict[str, Any], ctx: ToolContext) -> None:
        return None

    @tool("async_one", "An async tool that did not say what it does.")
    async def async_one(args: dict[str, Any], ctx: ToolContext) -> None:
        return None

    assert sync_one.kind is ToolKind.THREAD and async_one.kind is ToolKind.PROCESS

    @tool("sync_shell", "A sync tool that starts a process.", kind=ToolKind.PROCESS)
    def sync_shell(args: dict[str, Any], ctx: ToolContext) -> None:
        return None

    assert sync_shell.kind is ToolKind.PROCESS


def test_a_sync_tool_cannot_claim_to_be_io() -> None:
    with pytest.raises(ValueError, match="always runs in a thread"):

        @tool("liar", "A sync tool declared as I/O.", kind=ToolKind.IO)
        def liar(args: dict[str, Any], ctx: ToolContext) -> None:
            return None
