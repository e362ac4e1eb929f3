"""The final states the `EditScheduler` owes, written to the store so that neither SIGTERM nor kill -9 loses one.

`update(final=True)` cannot wait for a disk write (it is called from the engine's
synchronous reports), so finals are written behind, in batches: each batch is one
transaction however many threads finish at once, and lands within milliseconds.
A final is settled (deleted) once Slack shows it, or once the message is gone;
settling after owing is guaranteed by order: a batch writes what it owes before
what it settles. Whatever is still owed when the process stops is delivered by the
next one (`EditScheduler.resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from bot.store import OwedEdit

log = logging.getLogger(__name__)


class FinalsStore(Protocol):
    async def owe_edits(self, edits: Sequence[OwedEdit]) -> None: ...

    async def settle_edits(self, landed: Sequence[tuple[str, str, str | None]]) -> None: ...


class FinalJournal:
    def __init__(self, store: FinalsStore) -> None:
        self._store = store
        self._owed: dict[tuple[str, str], OwedEdit] = {}
        self._settled: list[tuple[str, str, str | None]] = []
        self._wake = asyncio.Event()
        self._flushed = asyncio.Event()
        self._flushed.set()
        self._task: asyncio.Task[None] | None = None
        self.written = 0  # finals written, for tests and metrics

    def owe(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]] | None) -> None:
        self._owed[(channel, ts)] = OwedEdit("", channel, ts, text, blocks)
        self._kick()

    def settle(self, channel: str, ts: str, text: str | None) -> None:
        """`text` is what landed (an owed state with other text stays owed); None: the message is gone."""
        self._settled.append((channel, ts, text))
        self._kick()

    async def flush(self, timeout_s: float | None = None) -> None:
        """Wait until everything recorded so far is written."""
        await asyncio.wait_for(self._flushed.wait(), timeout_s)

    async def close(self, timeout_s: float = 10.0) -> None:
        with contextlib.suppress(TimeoutError):
            await self.flush(timeout_s)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._owed or self._settled:
            log.error("%d final states could not be written to the store", len(self._owed))

    def _kick(self) -> None:
        self._flushed.clear()
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="slack-final-journal")

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            owed, self._owed = list(self._owed.values()), {}
            settled, self._settled = self._settled, []
            try:
                await self._store.owe_edits(owed)
                await self._store.settle_edits(settled)
                self.written += len(owed)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Kept for the next batch: a final must not be lost to a busy or failing disk.
                log.exception("writing %d owed final states failed; trying again", len(owed))
                for edit in owed:
                    self._owed.setdefault((edit.channel, edit.ts), edit)
                self._settled[:0] = settled
                await asyncio.sleep(1.0)
                self._wake.set()
            if not self._owed and not self._settled:
                self._flushed.set()
