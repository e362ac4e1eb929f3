"""The inbox: every message the bot acknowledged, kept until a turn has answered it.

A row is written when the message is claimed (for Slack, in the same transaction
that records the event as seen), before any model call. It then moves through
three states, each set in the transaction that makes it true:

- pending: `turn_id` is NULL; the text lives only here (and in the engine's memory);
- stored: a turn appended the text to the session's history (`append_messages`
  sets `turn_id` with the messages), but that turn has not ended;
- answered: the turn ended and the people in the thread got its answer, an error
  or a cancel; `answered_at` is set.

A process that dies leaves pending and stored rows behind; at the next start the
engine resumes every session that has one (see `Engine.resume`).

A cluster claims a message with files before it reads them (its ack waits for the
claim, and a download can take longer than Slack waits): until `reading_until` the
row, and the later rows of its session, are there but unseen by turns and by
restarts, and `revise_message` makes it whole. If the replica dies meanwhile, the
deadline passes and the row is taken up as it was claimed, its files as notes
saying why they are missing.

Mixed into `Store` so this SQL stays in the store package but out of `store.py`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.db import Db, Row, TxHook, executing, fetching
from bot.store.schema import dumps, ts

_COLUMNS = "id, session_key, text, blocks, claimed_at, turn_id, resumes, requester"
VISIBLE = """NOT EXISTS (
    SELECT 1 FROM inbox AS reading WHERE reading.session_key = inbox.session_key AND reading.id <= inbox.id
    AND reading.answered_at IS NULL AND reading.reading_until >= ?
)"""
"""Rows turns may see (`?`: now): no row of their session up to them is still having its files read, so
messages reach the model in the order they were written. A reader that missed its deadline counts as done."""


@dataclass(frozen=True, slots=True)
class InboxItem:
    """An acknowledged message not yet answered; `turn_id` is set once it is in the stored history."""

    id: int
    session_key: str
    text: str
    claimed_at: datetime
    turn_id: str | None
    resumes: int = 0
    """How many starts have resumed it already (a message that kills the process must not do so forever)."""
    blocks: list[dict[str, Any]] | None = None
    """The message as content blocks when it carried more than text (files shared with it)."""
    requester: str | None = None
    """Who wrote it (an edge's user id): whose turn it starts, for the usage books and who may cancel."""

    @property
    def content(self) -> list[dict[str, Any]]:
        """What the model is handed again when a restart resumes the message."""
        return self.blocks if self.blocks is not None else [{"type": "text", "text": self.text}]

    @property
    def pending(self) -> bool:
        """Not in the stored history yet: a resumed turn must hand it to the model again."""
        return self.turn_id is None


def _item(row: Row) -> InboxItem:
    return InboxItem(
        id=int(row["id"]),
        session_key=row["session_key"],
        text=row["text"],
        claimed_at=datetime.fromisoformat(row["claimed_at"]),
        turn_id=row["turn_id"],
        resumes=int(row["resumes"]),
        blocks=json.loads(row["blocks"]) if row["blocks"] is not None else None,
        requester=row["requester"],
    )


async def insert_inbox(
    db: Db,
    session_key: str,
    text: str,
    blocks: list[dict[str, Any]] | None = None,
    requester: str | None = None,
    reading_until: datetime | None = None,
) -> int:
    """Add a pending row inside the caller's transaction; returns its id (for claims made elsewhere in the store)."""
    sql = (
        "INSERT INTO inbox (session_key, text, blocks, claimed_at, requester, reading_until) "
        "VALUES (?, ?, ?, ?, ?, ?) RETURNING id"
    )
    encoded = dumps(blocks) if blocks is not None else None
    until = ts(reading_until) if reading_until is not None else None
    rows = await db.fetch(sql, session_key, text, encoded, ts(utcnow()), requester, until)
    return int(rows[0][0])


async def mark_stored(db: Db, inbox_ids: Sequence[int], turn_id: str) -> None:
    """Inside the transaction that appends the messages holding these rows' text."""
    await db.executemany(
        "UPDATE inbox SET turn_id = ? WHERE id = ? AND turn_id IS NULL", [(turn_id, i) for i in inbox_ids]
    )


async def mark_answered(db: Db, session_key: str) -> int:
    """Every stored row of the session, not only the closing turn's: a resumed turn also answers the
    rows the turn it resumed had stored. A row still pending (it came after the last save) stays owed."""
    cursor = await db.execute(
        "UPDATE inbox SET answered_at = ? WHERE session_key = ? AND turn_id IS NOT NULL AND answered_at IS NULL",
        (ts(utcnow()), session_key),
    )
    return cursor.rowcount


class InboxQueries(Queries):
    """The inbox half of `Store`'s interface."""

    async def claim_message(
        self,
        keys: Sequence[str],
        session_key: str,
        text: str,
        *,
        address: dict[str, Any],
        blocks: list[dict[str, Any]] | None = None,
        requester: str | None = None,
        then: TxHook | None = None,
        reading_until: datetime | None = None,
    ) -> InboxItem | None:
        """Record `keys` as seen and `text` (with `blocks`, its content with files) by `requester` as owed an
        answer, in one transaction; None if any key was seen.

        The session is created with `address` if it does not exist yet, else `address` is merged into
        its stored one (new keys win): who speaks now is saved with what they said. `then` (PostgreSQL only)
        runs on the connection inside the claim's transaction once the row is in, so work it queues there (a
        job for the turn) commits with the claim or not at all. With `reading_until` the row stays unseen
        until `revise_message` (or that time) while its files are read.
        """
        now = ts(utcnow())

        async def body(db: Db) -> int:
            for key in sorted(keys):  # one order for every claimer: two replicas never deadlock
                sql = "INSERT INTO seen_events (key, seen_at) VALUES (?, ?) ON CONFLICT DO NOTHING"
                if (await db.execute(sql, (key, now))).rowcount == 0:
                    raise _Seen  # rolls the whole claim back: the twin that got here first owns it
            merged = db.dialect.json_patch.format(a="sessions.address", b="excluded.address")
            await db.execute(
                "INSERT INTO sessions (key, created_at, address) VALUES (?, ?, ?) "
                f"ON CONFLICT(key) DO UPDATE SET address = {merged}",
                (session_key, now, dumps(address)),
            )
            inbox_id = await insert_inbox(db, session_key, text, blocks, requester, reading_until)
            if then is not None:
                await db.hand_over(then)
            return inbox_id

        try:
            inbox_id = await self._transact(body)
        except _Seen:
            return None
        claimed_at = datetime.fromisoformat(now)
        return InboxItem(inbox_id, session_key, text, claimed_at, None, blocks=blocks, requester=requester)

    async def revise_message(
        self, inbox_id: int, text: str, blocks: list[dict[str, Any]] | None, *, then: TxHook | None = None
    ) -> bool:
        """Replace a pending row's text and blocks with what was read after its claim (the thread's earlier
        messages, its files), and show it to turns; False if a turn has stored it already (then the history
        holds its text, or it was settled). `then` is as for `claim_message`, run only when the row was revised."""
        encoded = dumps(blocks) if blocks is not None else None
        sql = (
            "UPDATE inbox SET text = ?, blocks = ?, reading_until = NULL "
            "WHERE id = ? AND turn_id IS NULL AND answered_at IS NULL"
        )

        async def body(db: Db) -> bool:
            revised = (await db.execute(sql, (text, encoded, inbox_id))).rowcount == 1
            if revised and then is not None:
                await db.hand_over(then)
            return revised

        return await self._transact(body)

    async def open_inbox(self) -> dict[str, list[InboxItem]]:
        """Every row not answered yet, by session, oldest first: what a restart must resume."""
        sql = f"SELECT {_COLUMNS} FROM inbox WHERE answered_at IS NULL AND {VISIBLE} ORDER BY id"
        rows = await self._query(fetching(sql, ts(utcnow())))
        found: dict[str, list[InboxItem]] = {}
        for row in rows:
            item = _item(row)
            found.setdefault(item.session_key, []).append(item)
        return found

    async def session_inbox(self, session_key: str) -> list[InboxItem]:
        """The session's rows not answered yet, oldest first: what its next turn owes an answer."""
        sql = f"SELECT {_COLUMNS} FROM inbox WHERE session_key = ? AND answered_at IS NULL AND {VISIBLE} ORDER BY id"
        rows = await self._query(fetching(sql, session_key, ts(utcnow())))
        return [_item(row) for row in rows]

    async def count_resume(self, session_key: str) -> None:
        """A start is resuming the session's open rows: count it before the turn runs."""
        sql = f"UPDATE inbox SET resumes = resumes + 1 WHERE session_key = ? AND answered_at IS NULL AND {VISIBLE}"
        await self._transact(executing(sql, session_key, ts(utcnow())))

    async def give_up_inbox(self, session_key: str) -> int:
        """Settle every open row of the session that turns can see, pending ones too (the thread was told);
        returns how many. A message whose files are still being read is not given up with the ones before it."""
        now = ts(utcnow())
        sql = f"UPDATE inbox SET answered_at = ? WHERE session_key = ? AND answered_at IS NULL AND {VISIBLE}"
        return (await self._transact(executing(sql, now, session_key, now))).rowcount

    async def prune_inbox(self, older_than: datetime) -> int:
        """Forget rows answered before `older_than` (the conversation keeps their text); returns how many."""
        return (await self._transact(executing("DELETE FROM inbox WHERE answered_at < ?", ts(older_than)))).rowcount

    async def answer_inbox(self, session_key: str) -> int:
        """The session's stored rows are answered (their answer is in the history already); returns how many."""

        async def body(db: Db) -> int:
            return await mark_answered(db, session_key)

        return await self._transact(body)


class _Seen(Exception):
    """A claim key was already recorded: the whole claim is rolled back."""
