"""The process-group half of the tool-call store: which groups running calls started, until they end."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.clock import utcnow
from bot.store.db import Db
from bot.store.schema import ts


@dataclass(frozen=True, slots=True)
class ProcessGroupRecord:
    """A process group a call started; `leader` and `owner` are process identities (None where unknown)."""

    call_id: str
    pgid: int
    leader: str | None
    owner: str | None


class ProcessQueries:
    if TYPE_CHECKING:

        def _read(self) -> AbstractAsyncContextManager[Db]: ...

        def _write(self) -> AbstractAsyncContextManager[Db]: ...

    async def record_process_group(self, record: ProcessGroupRecord) -> None:
        """Remember the group while its call runs (committed when this returns)."""
        async with self._write() as db:
            await db.execute(
                "INSERT INTO call_processes (call_id, pgid, leader, owner, recorded_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(call_id) DO UPDATE SET pgid = excluded.pgid, leader = excluded.leader,"
                " owner = excluded.owner, recorded_at = excluded.recorded_at",
                (record.call_id, record.pgid, record.leader, record.owner, ts(utcnow())),
            )

    async def forget_process_groups(self, call_ids: Sequence[str]) -> None:
        """The groups of these calls are gone (they ended, or were killed at start)."""
        if not call_ids:
            return
        async with self._write() as db:
            await db.executemany("DELETE FROM call_processes WHERE call_id = ?", [(call_id,) for call_id in call_ids])

    async def process_groups(self) -> list[ProcessGroupRecord]:
        """Every group still recorded: at start, those whose owner is gone are left over from a crash."""
        async with self._read() as db:
            rows = await db.fetch("SELECT call_id, pgid, leader, owner FROM call_processes ORDER BY recorded_at")
        return [ProcessGroupRecord(row["call_id"], int(row["pgid"]), row["leader"], row["owner"]) for row in rows]
