"""What only a cluster asks of the PostgreSQL store: the rings' log, gone replicas' leftovers, and
whatever nobody took up.

Mixed into `PostgresStore`. Rings are the durable half of the doorbell (bot/cluster/node.py):
a row per ring (`cluster_rings`, in pg_schema.py), so a replica that missed a NOTIFY finds it on
its next look.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.calls import ORPHANED_ERROR
from bot.store.db import PgDb, executing, fetching
from bot.store.inbox import VISIBLE
from bot.store.outbox import OwedMessage, owed_message
from bot.store.schema import CALL_COLUMNS, call_from_row, ts
from bot.toolcall import ToolCall

# A session is owed something (input, or a result that outlived its turn) and no job of its thread is
# queued or running: nobody will take it up unless offered.
_UNATTENDED = f"""
SELECT owed.session_key FROM (
    SELECT session_key FROM inbox WHERE answered_at IS NULL AND claimed_at < ? AND {VISIBLE}
    UNION
    SELECT session_key FROM tool_calls
    WHERE delivered = 0 AND status NOT IN ('pending', 'running') AND completed_at < ?
) AS owed
WHERE NOT EXISTS (
    SELECT 1 FROM procrastinate_jobs AS j
    WHERE j.lock = 'thread:' || owed.session_key AND j.status IN ('todo', 'doing')
)
"""


# Posts owed by replicas that are gone (dead, or stopped before Slack took them) become this replica's.
_ADOPT_POSTS = """
UPDATE outbox SET replica = ?
WHERE replica IN (SELECT id FROM replicas WHERE state IN ('dead', 'stopped'))
RETURNING *
"""


# Every open call of a replica declared dead: asked on every reap, so a reap that failed halfway is finished.
_ORPHAN_DEAD = f"""
UPDATE tool_calls SET status = 'orphaned', completed_at = ?, error = ?
WHERE status IN ('pending', 'running') AND NOT (status = 'pending' AND decision = 'asked')
AND replica IN (SELECT id FROM replicas WHERE state = 'dead')
RETURNING {", ".join(CALL_COLUMNS)}
"""
# Calls gone replicas left waiting for an approval: they run nothing yet, so another replica waits for it instead.
_ADOPT_ASKED = f"""
UPDATE tool_calls SET replica = ? WHERE status = 'pending' AND decision = 'asked'
AND replica IN (SELECT id FROM replicas WHERE state IN ('dead', 'stopped'))
RETURNING {", ".join(CALL_COLUMNS)}
"""
_ADD_RING = "INSERT INTO cluster_rings (kind, key, body) VALUES (?, ?, ?) RETURNING id"
_RECENT_RINGS = """
SELECT id, kind, key, body FROM cluster_rings WHERE at > now() - make_interval(secs => ?) AND id > ? ORDER BY id
"""
_LAST_RING = "SELECT COALESCE(MAX(id), 0) AS id FROM cluster_rings"
_PRUNE_RINGS = "DELETE FROM cluster_rings WHERE at < now() - make_interval(secs => ?)"
_PRUNE_REPLICAS = """
DELETE FROM replicas WHERE state IN ('dead', 'stopped') AND heartbeat_at < now() - make_interval(secs => ?)
AND NOT EXISTS (SELECT 1 FROM tool_calls WHERE replica = replicas.id AND status IN ('pending', 'running'))
AND NOT EXISTS (SELECT 1 FROM outbox WHERE replica = replicas.id)
"""


@dataclass(frozen=True, slots=True)
class RingRecord:
    id: int
    kind: str
    key: str
    body: dict[str, Any]


class ClusterQueries(Queries):
    """The rings' log, what gone replicas left, and the backstop's question: what owed has no job to take it up?

    Each runs in a fenced write transaction, reads included, as `PostgresStore._transact` runs one."""

    async def add_ring(self, conn: psycopg.AsyncConnection[Any], kind: str, key: str, body: dict[str, Any]) -> int:
        """Log a ring inside the caller's transaction (its NOTIFY goes out in the same commit)."""
        [row] = await PgDb(conn).fetch(_ADD_RING, kind, key, json.dumps(body))
        return int(row["id"])

    async def recent_rings(self, within_s: float, after_id: int) -> list[RingRecord]:
        """Rings of the last `within_s` seconds with ids above `after_id`, oldest first."""
        rows = await self._transact(fetching(_RECENT_RINGS, within_s, after_id))
        return [RingRecord(int(r["id"]), str(r["kind"]), str(r["key"]), dict(r["body"])) for r in rows]

    async def last_ring_id(self) -> int:
        """The newest ring's id (0 when there is none): where a replica that starts begins to listen."""
        [row] = await self._transact(fetching(_LAST_RING))
        return int(row["id"])

    async def prune_rings(self, older_than_s: float) -> None:
        await self._transact(executing(_PRUNE_RINGS, older_than_s))

    async def adopt_owed(self) -> list[OwedMessage]:
        """Take over what gone replicas still owe Slack (posts, reminders and notices, final edits), oldest
        first; each row is adopted by one replica only (the UPDATE locks it), which then delivers it."""
        posts = await self._transact(fetching(_ADOPT_POSTS, self.replica))
        return sorted((owed_message(row) for row in posts), key=lambda message: message.id)

    async def orphan_dead_calls(self) -> list[ToolCall]:
        """Open calls of replicas declared dead become `orphaned`; returns them, oldest first."""
        rows = await self._transact(fetching(_ORPHAN_DEAD, ts(utcnow()), ORPHANED_ERROR))
        return sorted((call_from_row(row) for row in rows), key=lambda call: call.created_at)

    async def adopt_asked_calls_of_gone(self) -> list[ToolCall]:
        """Calls waiting for an approval on replicas that are gone become this replica's, oldest first."""
        rows = await self._transact(fetching(_ADOPT_ASKED, self.replica))
        return sorted((call_from_row(row) for row in rows), key=lambda call: call.created_at)

    async def prune_replicas(self, older_than_s: float) -> None:
        """Forget gone replicas that owe nothing any more (every start makes a new one)."""
        await self._transact(executing(_PRUNE_REPLICAS, older_than_s))

    async def unattended_sessions(self, older_than_s: float) -> list[str]:
        """Sessions owed input or a result for over `older_than_s` with no job of their thread to take it up."""
        before = ts(utcnow() - timedelta(seconds=older_than_s))
        rows = await self._transact(fetching(_UNATTENDED, before, ts(utcnow()), before))
        return [str(row["session_key"]) for row in rows]
