"""The outbox half of `Store`'s interface: what the bot owes Slack, kept until Slack confirms it.

Two kinds of debt. An owed post (an answer, a notice, a final status nobody has
seen yet) is written before it is first tried, so a crash cannot lose it; an owed
edit is the final state of a message that exists, one per message, the newest
winning. A post the engine owes (a due reminder, a missed one's notice: an
`OwedLine`) is written by the claim that decides it, with no address (`channel`
NULL) and its `line` kind: the edge renders it for the session when it delivers.
Either is settled when Slack confirms it, and whatever is still owed at a
restart is delivered then. A post that may have landed just before a crash
carries a marker (Slack message `metadata`) that the edge looks for before
posting it again, so it is delivered once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.db import Db, Row, fetching
from bot.store.schema import dumps, ts
from bot.types import LineKind, OwedLine, OwedPost

_UPSERT_EDIT = """
INSERT INTO outbox (session_key, channel, ts, text, blocks, created_at, replica) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(channel, ts) WHERE ts IS NOT NULL
DO UPDATE SET text = excluded.text, blocks = excluded.blocks, replica = excluded.replica
"""
OWN = "(CAST(? AS TEXT) IS NULL OR replica = ?)"
"""What this store's process owes: everything with one process (SQLite), its own rows in a cluster."""


@dataclass(frozen=True, slots=True)
class OwedMessage:
    """A post (`ts` None) or the final state of the message at `ts`, as Slack should show it; or a line the
    engine owes the session (`line` set, no address yet)."""

    id: int
    session_key: str
    channel: str | None
    thread_ts: str | None
    ts: str | None
    text: str
    blocks: list[dict[str, Any]] | None
    line: OwedLine | None = None

    @property
    def is_post(self) -> bool:
        return self.ts is None


@dataclass(frozen=True, slots=True)
class OwedEdit:
    session_key: str
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]] | None


def _loads(value: str | None) -> Any:
    return json.loads(value) if value is not None else None


def owed_message(row: Row) -> OwedMessage:
    kind = row["line"]
    line = OwedLine(row["session_key"], LineKind(kind), row["text"], row["requester"]) if kind else None
    return OwedMessage(
        id=int(row["id"]),
        session_key=row["session_key"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        ts=row["ts"],
        text=row["text"],
        blocks=_loads(row["blocks"]),
        line=line,
    )


class OutboxQueries(Queries):
    """Rows carry the replica that owes them; another takes them over when it is gone (`adopt_owed`)."""

    async def owe_post(
        self,
        session_key: str,
        channel: str,
        thread_ts: str | None,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
    ) -> int:
        """Record a post before it is tried; returns its id (settle it with `settle_post` once Slack has it)."""
        post = OwedPost(session_key, channel, thread_ts, text, blocks)

        async def body(db: Db) -> list[int]:
            return await owe_posts(db, [post], self.replica)

        [post_id] = await self._transact(body)
        return post_id

    async def settle_post(self, post_id: int) -> None:
        await self.settle_posts([post_id])

    async def settle_posts(self, post_ids: Sequence[int]) -> None:

        async def body(db: Db) -> None:
            await db.executemany("DELETE FROM outbox WHERE id = ? AND ts IS NULL", [(post_id,) for post_id in post_ids])

        await self._transact(body)

    async def owe_edits(self, edits: Sequence[OwedEdit]) -> None:
        """Record final states in one transaction; a message already owed one keeps only the newest."""
        if not edits:
            return
        now = ts(utcnow())
        rows = [(e.session_key, e.channel, e.ts, e.text, _dumps(e.blocks), now, self.replica) for e in edits]

        async def body(db: Db) -> None:
            await db.executemany(_UPSERT_EDIT, rows)

        await self._transact(body)

    async def settle_edits(self, landed: Sequence[tuple[str, str, str | None]]) -> None:
        """(channel, ts, text) that Slack now shows (text None: the message is gone, nothing more is owed).

        An owed state newer than the one that landed (other text) stays owed."""
        if not landed:
            return

        async def body(db: Db) -> None:
            await db.executemany(
                "DELETE FROM outbox WHERE channel = ? AND ts = ? AND (CAST(? AS TEXT) IS NULL OR text = ?)",
                [(channel, ts_, text, text) for channel, ts_, text in landed],
            )

        await self._transact(body)

    async def owed_messages(self) -> list[OwedMessage]:
        """Everything this process owes, oldest first (so a session's posts keep their order)."""
        rows = await self._query(fetching(f"SELECT * FROM outbox WHERE {OWN} ORDER BY id", self.replica, self.replica))
        return [owed_message(row) for row in rows]


async def owe_posts(db: Db, posts: Sequence[OwedPost], replica: str | None) -> list[int]:
    """Owe `posts` inside the caller's transaction (a turn's last save owes its answer with it); their ids."""
    now = ts(utcnow())
    ids = []
    for post in posts:
        rows = await db.fetch(
            "INSERT INTO outbox (session_key, channel, thread_ts, text, blocks, created_at, replica) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            *(post.session_key, post.channel, post.thread_ts, post.text, _dumps(post.blocks), now, replica),
        )
        ids.append(int(rows[0][0]))
    return ids


async def owe_lines(db: Db, lines: Sequence[OwedLine], replica: str | None) -> list[int]:
    """Owe the engine's `lines` inside the caller's transaction (a reminder's claim); their ids, in order."""
    now = ts(utcnow())
    ids = []
    for line in lines:
        rows = await db.fetch(
            "INSERT INTO outbox (session_key, text, created_at, replica, line, requester) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            *(line.session_key, line.text, now, replica, line.kind.value, line.requester),
        )
        ids.append(int(rows[0][0]))
    return ids


def _dumps(value: Any) -> str | None:
    return dumps(value) if value is not None else None
