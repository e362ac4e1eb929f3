"""What people thought of the answers: one row per answer (its turn) and person, kept when the session goes.

A click on an answer's feedback buttons is stored with the turn that answered, the model that
wrote the answer (the turn's last model call, from the token books) and who clicked. A person
who changes their mind changes their row; the same click again changes nothing.
Mixed into `Store` like the usage queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.db import Db, fetching
from bot.store.schema import ts

UNKNOWN_MODEL = "(unknown)"
"""The model of a turn the token books do not name (its calls were booked before a restart lost them)."""


class Rating(StrEnum):
    GOOD = "good"
    BAD = "bad"


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    turn_id: str
    session_key: str
    user: str
    model: str
    rating: Rating
    at: datetime


@dataclass(frozen=True, slots=True)
class FeedbackTally:
    """One model's ratings."""

    model: str
    good: int
    bad: int


class FeedbackQueries(Queries):
    async def record_feedback(self, *, turn_id: str, session_key: str, user: str, rating: Rating) -> str | None:
        """Store `user`'s rating of the answer of `turn_id`; the model it is booked to, or None when the row
        already said so (a repeated click: nothing to count)."""
        now = ts(utcnow())

        async def body(db: Db) -> str | None:
            rows = await db.fetch(
                "SELECT model FROM model_usage WHERE turn_id = ? ORDER BY at DESC, id DESC LIMIT 1", turn_id
            )
            model = str(rows[0][0]) if rows else UNKNOWN_MODEL
            cursor = await db.execute(
                "INSERT INTO feedback (turn_id, user_id, session_key, model, rating, at) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (turn_id, user_id) DO UPDATE SET rating = excluded.rating, at = excluded.at"
                " WHERE feedback.rating <> excluded.rating",
                (turn_id, user, session_key, model, rating.value, now),
            )
            return model if cursor.rowcount else None

        return await self._transact(body)

    async def feedback_by_model(self, *, since: datetime | None = None) -> list[FeedbackTally]:
        """Ratings per model since `since` (all time when None), the most rated first."""
        sql = (
            "SELECT model, SUM(CASE WHEN rating = 'good' THEN 1 ELSE 0 END),"
            " SUM(CASE WHEN rating = 'bad' THEN 1 ELSE 0 END) FROM feedback WHERE at >= ?"
            " GROUP BY model ORDER BY COUNT(*) DESC, model"
        )
        rows = await self._query(fetching(sql, ts(since) if since is not None else ""))
        return [FeedbackTally(str(row[0]), int(row[1]), int(row[2])) for row in rows]

    async def recent_feedback(self, *, since: datetime | None = None, limit: int = 10) -> list[FeedbackRecord]:
        """The latest ratings since `since`, newest first."""
        sql = "SELECT turn_id, session_key, user_id, model, rating, at FROM feedback WHERE at >= ?"
        sql += " ORDER BY at DESC LIMIT ?"
        rows = await self._query(fetching(sql, ts(since) if since is not None else "", limit))
        return [
            FeedbackRecord(
                turn_id=str(row[0]),
                session_key=str(row[1]),
                user=str(row[2]),
                model=str(row[3]),
                rating=Rating(row[4]),
                at=datetime.fromisoformat(row[5]),
            )
            for row in rows
        ]
