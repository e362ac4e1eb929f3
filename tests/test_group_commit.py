"""GroupCommit: writes that arrive together share one batch; every caller waits for its own write."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bot.store.group import GroupCommit

WAIT_S = 5


class Writes:
    """A write that records its batches; the first one waits for `gate`, so others pile up behind it."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.writing = asyncio.Event()
        self.fail_with: Exception | None = None

    async def __call__(self, items: Sequence[str]) -> None:
        self.batches.append(list(items))
        self.writing.set()
        if len(self.batches) == 1:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with


async def test_what_arrives_during_a_write_shares_the_next_batch_and_each_caller_waits_for_its_own() -> None:
    writes = Writes()
    group: GroupCommit[str] = GroupCommit(writes, "items")
    first = asyncio.create_task(group.add("a", "a1"))
    await asyncio.wait_for(writes.writing.wait(), WAIT_S)
    later = [asyncio.create_task(group.add(key, f"{key}1")) for key in ("b", "c")]
    await asyncio.sleep(0)  # one pass of the loop: both are queued behind the write
    group.add_soon("b", "b2")  # a newer item under a key not written yet replaces the older one
    await asyncio.sleep(0)
    assert not any(task.done() for task in [first, *later]), "nobody returns before their write commits"
    writes.gate.set()
    await asyncio.wait_for(asyncio.gather(first, *later), WAIT_S)
    assert writes.batches == [["a1"], ["b2", "c1"]]


async def test_a_failed_batch_fails_every_caller_in_it_and_the_next_batch_is_written() -> None:
    writes = Writes()
    writes.fail_with = OSError("disk full")
    group: GroupCommit[str] = GroupCommit(writes, "items")
    writes.gate.set()
    results = await asyncio.gather(group.add("a", "a1"), group.add("b", "b1"), return_exceptions=True)
    assert all(isinstance(result, OSError) for result in results)
    writes.fail_with = None
    await asyncio.wait_for(group.add("c", "c1"), WAIT_S)
    assert writes.batches[-1] == ["c1"]


async def test_a_cancelled_caller_does_not_lose_the_write() -> None:
    writes = Writes()
    group: GroupCommit[str] = GroupCommit(writes, "items")
    caller = asyncio.create_task(group.add("a", "a1"))
    await asyncio.wait_for(writes.writing.wait(), WAIT_S)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    writes.gate.set()
    await asyncio.wait_for(group.drain(), WAIT_S)
    assert writes.batches == [["a1"]]
