"""Reminder posts owed to threads: one row per reminder run, from its claim until the edge confirms it.

The row is written in the transaction that claims the reminder (or moves a cron
to its next run), so a claimed reminder is never just "fired" with nothing owed:
until `settle_reminder_post` records it posted (or given up), the scheduler keeps
retrying, and a restart picks it up again. `(reminder_id, due_at)` names a run,
which is also what the edge marks its post with, so it can tell whether an earlier
attempt already landed.

Mixed into `Store` so this SQL stays in the store package but out of `store.py`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from bot.clock import utcnow
from bot.store.db import Db, Row
from bot.store.schema import ts
from bot.types import ReminderPost


class PostState(StrEnum):
    OWED = "owed"
    POSTED = "posted"
    ABANDONED = "abandoned"


async def insert_post(db: Db, reminder_id: int, due_at: datetime, text: str, replica: str | None) -> None:
    """Owe the run `(reminder_id, due_at)` a post, inside the claim's transaction; a second claim of it adds nothing.

    `replica` (a cluster) is the one that claimed it, and so delivers it."""
    await db.execute(
        "INSERT INTO reminder_posts (reminder_id, due_at, text, claimed_at, replica) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (reminder_id, ts(due_at), text, ts(utcnow()), replica),
    )


def reminder_post(row: Row) -> ReminderPost:
    """A row of (reminder_id, due_at, session_key, text, requester, claimed_at)."""
    return ReminderPost(
        reminder_id=int(row[0]),
        due_at=datetime.fromisoformat(row[1]),
        session_key=row[2],
        text=row[3],
        requester=row[4],
        claimed_at=datetime.fromisoformat(row[5]),
    )


class ReminderPostQueries:
    """The reminder-post half of `Store`'s interface."""

    replica: str | None

    if TYPE_CHECKING:

        def _read(self) -> AbstractAsyncContextManager[Db]: ...

        def _write(self) -> AbstractAsyncContextManager[Db]: ...

    async def owed_reminder_posts(self) -> list[ReminderPost]:
        """Every post this process claimed but never saw confirmed, oldest claim first (what a start delivers)."""
        sql = (
            "SELECT p.reminder_id, p.due_at, r.session_key, p.text, r.requester, p.claimed_at "
            "FROM reminder_posts p JOIN reminders r ON r.id = p.reminder_id "
            "WHERE p.state = 'owed' AND (CAST(? AS TEXT) IS NULL OR p.replica = ?) ORDER BY p.claimed_at, p.reminder_id"
        )
        async with self._read() as db:
            rows = await db.fetch(sql, self.replica, self.replica)
        return [reminder_post(row) for row in rows]

    async def reminder_post_attempted(self, post: ReminderPost) -> int:
        """Count one more failed attempt; returns how many there were."""
        sql = (
            "UPDATE reminder_posts SET attempts = attempts + 1 WHERE reminder_id = ? AND due_at = ? RETURNING attempts"
        )
        async with self._write() as db:
            rows = await db.fetch(sql, post.reminder_id, ts(post.due_at))
        return int(rows[0][0]) if rows else 0

    async def settle_reminder_post(self, post: ReminderPost, state: PostState) -> bool:
        """Record an owed post as posted or abandoned; False if it was settled already."""
        if state is PostState.OWED:
            raise ValueError("a post is settled as posted or abandoned")
        sql = (
            "UPDATE reminder_posts SET state = ?, settled_at = ? "
            "WHERE reminder_id = ? AND due_at = ? AND state = 'owed'"
        )
        async with self._write() as db:
            cursor = await db.execute(sql, (state.value, ts(utcnow()), post.reminder_id, ts(post.due_at)))
            return cursor.rowcount == 1
