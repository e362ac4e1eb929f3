"""Waiting for a tool batch under a yield strategy, woken only by events.

The wait ends when the strategy says so, when a person's note arrives (if notes
yield the turn), or when the turn is cancelled. Nothing here sleeps in a loop.
"""

from __future__ import annotations

import asyncio
from enum import StrEnum

from bot.agent.injections import Injections
from bot.calls.registry import CallRegistry
from bot.config import YieldMode, YieldStrategy
from bot.toolcall import ToolCall


class WaitEnd(StrEnum):
    ALL_DONE = "all_done"
    ANY_DONE = "any_done"
    TIMEOUT = "timeout"
    INJECTION = "injection"
    CANCELLED = "cancelled"


async def wait_for_batch(
    calls: list[ToolCall],
    *,
    registry: CallRegistry,
    strategy: YieldStrategy,
    injections: Injections,
    yield_on_injection: bool,
    cancelled: asyncio.Event,
) -> WaitEnd:
    """Block until the batch may be handed back to the model; say why."""
    done = {asyncio.ensure_future(registry.done_event(call.id).wait()): call for call in calls if not call.is_final}
    any_final_already = len(done) < len(calls)
    if not done:
        return WaitEnd.ALL_DONE
    if strategy.mode is not YieldMode.WHEN_ALL_DONE and any_final_already:
        _discard(done)
        return WaitEnd.ANY_DONE
    cancel_waiter = asyncio.ensure_future(cancelled.wait())
    note_waiter = asyncio.ensure_future(injections.arrived.wait()) if yield_on_injection else None
    timeout_s = strategy.timeout_ms / 1000 if strategy.mode is YieldMode.ON_TIMEOUT and strategy.timeout_ms else None
    deadline = asyncio.get_running_loop().time() + timeout_s if timeout_s is not None else None
    try:
        while True:
            if cancelled.is_set():
                return WaitEnd.CANCELLED
            if note_waiter is not None and note_waiter.done():
                if injections.ready:
                    return WaitEnd.INJECTION
                note_waiter = asyncio.ensure_future(injections.arrived.wait()) if not injections.fuse_blown else None
            pending = [future for future in done if not future.done()]
            if not pending:
                return WaitEnd.ALL_DONE
            if len(pending) < len(done) and strategy.mode is not YieldMode.WHEN_ALL_DONE:
                return WaitEnd.ANY_DONE
            remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if remaining is not None and remaining <= 0:
                return WaitEnd.TIMEOUT
            watched = [*pending, cancel_waiter, *([note_waiter] if note_waiter is not None else [])]
            await asyncio.wait(watched, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
    finally:
        _discard([*done, cancel_waiter, *([note_waiter] if note_waiter is not None else [])])


def _discard(futures: object) -> None:
    for future in futures:  # type: ignore[attr-defined]
        future.cancel()
