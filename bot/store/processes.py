"""The process-group half of the tool-call store: which groups running calls started, until they end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.db import Db, executing, fetching
from bot.store.schema import ts


@dataclass(frozen=True, slots=True)
class ProcessGroupRecord:
    """A process group a call started; `leader` and `owner` are process identities (None where unknown)."""

    call_id: str
    pgid: int
    leader: str | None
    owner: str | None


class ProcessQueries(Queries):
    async def record_process_group(self, record: ProcessGroupRecord) -> None:
        """Remember the group while its call runs (committed when this returns)."""
        sql = (
            "INSERT INTO call_processes (call_id, pgid, leader, owner, recorded_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(call_id) DO UPDATE SET pgid = excluded.pgid, leader = excluded.leader,"
            " owner = excluded.owner, recorded_at = excluded.recorded_at"
        )
        await self._transact(executing(sql, record.call_id, record.pgid, record.leader, record.owner, ts(utcnow())))

    async def forget_process_groups(self, call_ids: Sequence[str]) -> None:
        """The groups of these calls are gone (they ended, or were killed at start)."""
        if not call_ids:
            return

        async def body(db: Db) -> None:
            await db.executemany("DELETE FROM call_processes WHERE call_id = ?", [(call_id,) for call_id in call_ids])

        await self._transact(body)

    async def process_groups(self) -> list[ProcessGroupRecord]:
        """Every group still recorded: at start, those whose owner is gone are left over from a crash."""
        rows = await self._query(
            fetching("SELECT call_id, pgid, leader, owner FROM call_processes ORDER BY recorded_at")
        )
        return [ProcessGroupRecord(row["call_id"], int(row["pgid"]), row["leader"], row["owner"]) for row in rows]
