"""Token accounting in the store: one row per model call, summed on demand for `threadbot usage`.

Rows name their session by key but hold no foreign key: what a call cost stays on
the books when its session is gone. Mixed into `Store` like the call and reminder
queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.db import Db, fetching
from bot.store.schema import ts
from bot.types import Usage


class UsageGrouping(StrEnum):
    DAY = "day"
    CHANNEL = "channel"
    USER = "user"
    MODEL = "model"
    SESSION = "session"


# What each grouping sums over; `channel` reads the edge's address of the session (Slack's channel id).
_GROUP_SQL = {
    UsageGrouping.DAY: "substr(u.at, 1, 10)",
    UsageGrouping.CHANNEL: "COALESCE({channel}, '(none)')",
    UsageGrouping.USER: "COALESCE(u.requester, '(none)')",
    UsageGrouping.MODEL: "u.model",
    UsageGrouping.SESSION: "u.session_key",
}


_TOKENS = "SELECT SUM(u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens)"
"""What a daily budget counts: every token a call cost, of every kind, as `threadbot usage` lists them."""


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """One model call's tokens, as booked: who asked, in which session and turn, when."""

    session_key: str
    turn_id: str | None
    model: str
    usage: Usage
    requester: str | None
    at: datetime


@dataclass(frozen=True, slots=True)
class UsageRow:
    """The calls of one group and model, and what they cost in tokens."""

    group: str
    model: str
    calls: int
    usage: Usage


class UsageQueries(Queries):
    async def record_usage(
        self, *, session_key: str, turn_id: str | None, model: str, usage: Usage, requester: str | None = None
    ) -> None:
        await self.record_usages([UsageEntry(session_key, turn_id, model, usage, requester, utcnow())])

    async def record_usages(self, entries: Sequence[UsageEntry]) -> None:
        """Book many calls in one transaction (`GroupCommit` hands it the calls that ended together)."""
        rows = [
            (
                ts(e.at),
                e.session_key,
                e.turn_id,
                e.requester,
                e.model,
                e.usage.input_tokens,
                e.usage.output_tokens,
                e.usage.cache_read_tokens,
                e.usage.cache_write_tokens,
            )
            for e in entries
        ]

        async def body(db: Db) -> None:
            await db.executemany(
                "INSERT INTO model_usage (at, session_key, turn_id, requester, model, input_tokens, output_tokens,"
                " cache_read_tokens, cache_write_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

        await self._transact(body)

    async def usage_by(self, grouping: UsageGrouping, *, since: datetime | None = None) -> list[UsageRow]:
        """Token totals per group and model since `since` (all time when None), largest groups first."""
        channel = self.dialect.json_field.format(doc="s.address", name="channel")
        group = _GROUP_SQL[grouping].format(channel=channel)
        sql = (
            f"SELECT {group} AS grp, u.model, COUNT(*), SUM(u.input_tokens), SUM(u.output_tokens),"
            " SUM(u.cache_read_tokens), SUM(u.cache_write_tokens)"
            " FROM model_usage u LEFT JOIN sessions s ON s.key = u.session_key"
            " WHERE u.at >= ? GROUP BY grp, u.model ORDER BY grp, u.model"
        )
        rows = await self._query(fetching(sql, ts(since) if since is not None else ""))
        return [
            UsageRow(str(row[0]), str(row[1]), int(row[2]), Usage(int(row[3]), int(row[4]), int(row[5]), int(row[6])))
            for row in rows
        ]

    async def tokens_since(self, since: datetime, *, requester: str | None = None, channel: str | None = None) -> int:
        """Tokens of every kind booked since `since` to a person, or to the sessions of a channel (a daily budget)."""
        if channel is not None:
            field = self.dialect.json_field.format(doc="s.address", name="channel")
            joined = "FROM model_usage u JOIN sessions s ON s.key = u.session_key"
            body = fetching(f"{_TOKENS} {joined} WHERE u.at >= ? AND {field} = ?", ts(since), channel)
        else:
            body = fetching(f"{_TOKENS} FROM model_usage u WHERE u.at >= ? AND u.requester = ?", ts(since), requester)
        rows = await self._query(body)
        return int(rows[0][0] or 0)

    async def top_spenders(self, grouping: UsageGrouping, *, since: datetime) -> list[tuple[str, int]]:
        """Tokens of every kind per person or channel since `since`, the largest first (no group for none)."""
        if grouping not in (UsageGrouping.USER, UsageGrouping.CHANNEL):
            raise ValueError(f"budgets are per user or per channel, not per {grouping.value}")
        channel = self.dialect.json_field.format(doc="s.address", name="channel")
        group = "u.requester" if grouping is UsageGrouping.USER else channel
        sql = (
            f"{_TOKENS}, {group} AS grp FROM model_usage u LEFT JOIN sessions s ON s.key = u.session_key"
            f" WHERE u.at >= ? AND {group} IS NOT NULL GROUP BY grp ORDER BY 1 DESC"
        )
        rows = await self._query(fetching(sql, ts(since)))
        return [(str(row[1]), int(row[0])) for row in rows]
