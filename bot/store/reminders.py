"""Reminders and waits in the store: the rows the scheduler is rebuilt from at every start.

A row is `pending` until it is claimed. Claiming is a compare-and-set on
`(id, status='pending', due_at)`, done BEFORE the reminder is delivered: of two
firings of the same due time (a duplicate job, a second process on the same
file, a fire racing a cancel) exactly one wins, and a clean restart never
delivers a claimed one again. What the claim owes is written in the same
transaction: a reminder's post and any notice for its thread (lines in the
outbox, bot/store/outbox.py), a wait's note for its session (the inbox,
bot/store/inbox.py), so a crash right after the claim loses none of them.
A one-shot row then ends `fired` or `missed` (or
`cancelled`) and never changes again; a cron row stays `pending` and its
`due_at` moves to the next run.

Mixed into `Store` so this SQL stays in the store package but out of `store.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.db import Body, Db, Row, fetching
from bot.store.inbox import insert_inbox
from bot.store.outbox import owe_lines
from bot.store.schema import ts, ts_or_none
from bot.types import LineKind, OwedLine

_COLUMNS = "id, session_key, kind, text, requester, due_at, cron, zone, status, fired_at, created_at"
_WAKES_SQL = "SELECT COUNT(*) FROM reminders WHERE session_key = ? AND kind = 'wake' AND fired_at >= ?"
"""The waits that woke a session since a moment: the agent's own turns, counted for their daily quota."""


class ReminderKind(StrEnum):
    WAKE = "wake"
    """A wait of the agent: when due, the session gets `[wait elapsed: …]` as a turn or a note."""
    REMINDER = "reminder"
    """A message for people: when due, it is posted as is, without a model call."""


class ReminderStatus(StrEnum):
    PENDING = "pending"
    FIRED = "fired"
    CANCELLED = "cancelled"
    MISSED = "missed"


class PendingLimitReached(Exception):
    """`add_reminders` with `max_pending`: the person already has that many pending; nothing was added."""

    def __init__(self, pending: int) -> None:
        super().__init__(f"{pending} pending")
        self.pending = pending


@dataclass(frozen=True, slots=True)
class WakeLimit:
    """How many waits may wake one session since a moment (the day's start): `claim_reminder` holds a wait to it."""

    max_wakes: int
    since: datetime
    refusal: str | None = None
    """Owed to the thread, with the claim, instead of a wait that would pass the limit."""


@dataclass(frozen=True, slots=True)
class NewReminder:
    session_key: str
    kind: ReminderKind
    text: str
    due_at: datetime
    requester: str | None = None
    cron: str | None = None
    zone: str | None = None


@dataclass(frozen=True, slots=True)
class Reminder:
    """A stored wait or reminder; `text` is the reason of a wait. Times are aware UTC."""

    id: int
    session_key: str
    kind: ReminderKind
    text: str
    requester: str | None
    due_at: datetime
    cron: str | None
    zone: str | None
    status: ReminderStatus
    fired_at: datetime | None
    created_at: datetime
    inbox_id: int | None = None
    """Set on a wait just claimed with a note: the inbox row that holds the note for its session."""
    owed_lines: tuple[tuple[int, OwedLine], ...] = ()
    """Set on a row just claimed: the lines the claim owed its thread, with their outbox ids, in order."""

    @property
    def job_id(self) -> str:
        return f"reminder:{self.id}"


def _reminder(row: Row) -> Reminder:
    fired_at = row["fired_at"]
    return Reminder(
        id=int(row["id"]),
        session_key=row["session_key"],
        kind=ReminderKind(row["kind"]),
        text=row["text"],
        requester=row["requester"],
        due_at=datetime.fromisoformat(row["due_at"]),
        cron=row["cron"],
        zone=row["zone"],
        status=ReminderStatus(row["status"]),
        fired_at=datetime.fromisoformat(fired_at) if fired_at else None,
        created_at=datetime.fromisoformat(row["created_at"]),
    )


async def _owe(db: Db, reminder: Reminder, owed: str | None, notices: Sequence[str], replica: str | None) -> Reminder:
    """Inside a claim: write what it promises (a reminder's post, a wait's note, the thread's notices)."""
    lines = [OwedLine(reminder.session_key, LineKind.NOTICE, text) for text in notices]
    inbox_id = None
    if owed is not None and reminder.kind is ReminderKind.WAKE:
        inbox_id = await insert_inbox(db, reminder.session_key, owed)
    elif owed is not None:
        lines.insert(0, OwedLine(reminder.session_key, LineKind.REMINDER, owed, reminder.requester))
    ids = await owe_lines(db, lines, replica)
    return replace(reminder, inbox_id=inbox_id, owed_lines=tuple(zip(ids, lines, strict=True)))


def _claiming(
    sql: str, params: Sequence[object], owed: str | None, notices: Sequence[str], replica: str | None
) -> Body[Reminder | None]:
    """A claim's body: the compare-and-set `sql` (RETURNING the row), then, if it won, what the claim owes."""

    async def body(db: Db) -> Reminder | None:
        rows = await db.fetch(sql, *params)
        return await _owe(db, _reminder(rows[0]), owed, notices, replica) if rows else None

    return body


async def _no_wake_left(db: Db, reminder_id: int, limit: WakeLimit) -> bool:
    """Whether the session of wait `reminder_id` has used its wakes since `limit.since` (under a lock on it)."""
    rows = await db.fetch("SELECT session_key FROM reminders WHERE id = ? AND kind = 'wake'", reminder_id)
    if not rows:
        return False
    session_key = rows[0][0]
    if db.dialect.lock_name:
        await db.execute(db.dialect.lock_name, (f"wakes:{session_key}",))
    counted = await db.fetch(_WAKES_SQL, session_key, ts(limit.since))
    return int(counted[0][0]) >= limit.max_wakes


async def _pending(db: Db, requester: str | None, session_key: str) -> int:
    if requester is not None:
        rows = await db.fetch("SELECT COUNT(*) FROM reminders WHERE status = 'pending' AND requester = ?", requester)
    else:
        sql = "SELECT COUNT(*) FROM reminders WHERE status = 'pending' AND requester IS NULL AND session_key = ?"
        rows = await db.fetch(sql, session_key)
    return int(rows[0][0])


async def _check_room(db: Db, items: Sequence[NewReminder], max_pending: int) -> None:
    wanted: dict[tuple[str | None, str | None], tuple[str, int]] = {}
    for item in items:
        owner = (item.requester, None if item.requester is not None else item.session_key)
        session_key, count = wanted.get(owner, (item.session_key, 0))
        wanted[owner] = (session_key, count + 1)
    for (requester, _), (session_key, count) in sorted(wanted.items(), key=lambda item: repr(item[0])):
        if db.dialect.lock_name:  # two writes side by side (PostgreSQL) must not both count the same room
            await db.execute(db.dialect.lock_name, (f"pending-reminders:{requester or session_key}",))
        pending = await _pending(db, requester, session_key)
        if pending + count > max_pending:
            raise PendingLimitReached(pending)


class ReminderQueries(Queries):
    """The reminder half of `Store`'s interface."""

    async def add_reminders(self, items: Sequence[NewReminder], *, max_pending: int | None = None) -> list[Reminder]:
        """Insert in one transaction, all or nothing; each session must exist (KeyError otherwise).

        With `max_pending`, a person (or, for rows without one, a session) who would then have more
        pending rows than that gets none: `PendingLimitReached`. Counted inside the write, so the
        calls of one batch cannot each see room for themselves.
        """
        created_at = ts(utcnow())
        sql = (
            "INSERT INTO reminders (session_key, kind, text, requester, due_at, cron, zone, created_at) "
            f"VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING {_COLUMNS}"
        )

        async def body(db: Db) -> list[Reminder]:
            for key in {item.session_key for item in items}:
                await self._require_session(db, key)
            if max_pending is not None:
                await _check_room(db, items, max_pending)
            added = []
            for item in items:
                params = (item.session_key, item.kind.value, item.text, item.requester, ts(item.due_at))
                rows = await db.fetch(sql, *params, item.cron, item.zone, created_at)
                added.append(_reminder(rows[0]))
            return added

        return await self._transact(body)

    async def add_reminder(self, item: NewReminder, *, max_pending: int | None = None) -> Reminder:
        return (await self.add_reminders([item], max_pending=max_pending))[0]

    async def pending_by_person(self) -> list[tuple[str, int]]:
        """Pending waits and reminders per person (per session for rows without one), the most first."""
        sql = (
            "SELECT COALESCE(requester, session_key) AS who, COUNT(*) AS n FROM reminders"
            " WHERE status = 'pending' GROUP BY who ORDER BY n DESC, who"
        )
        rows = await self._query(fetching(sql))
        return [(str(row[0]), int(row[1])) for row in rows]

    async def wakes_by_session(self, *, since: datetime) -> list[tuple[str, int]]:
        """Waits that woke each session since `since`, the most first."""
        sql = (
            "SELECT session_key, COUNT(*) AS n FROM reminders WHERE kind = 'wake' AND fired_at >= ?"
            " GROUP BY session_key ORDER BY n DESC, session_key"
        )
        rows = await self._query(fetching(sql, ts(since)))
        return [(str(row[0]), int(row[1])) for row in rows]

    async def count_wakes(self, session_key: str, *, since: datetime) -> int:
        """Waits of a session that fired (woke it) since `since`: the agent's own turns, for their daily quota."""
        rows = await self._query(fetching(_WAKES_SQL, session_key, ts(since)))
        return int(rows[0][0])

    async def get_reminder(self, reminder_id: int) -> Reminder | None:
        rows = await self._query(fetching(f"SELECT {_COLUMNS} FROM reminders WHERE id = ?", reminder_id))
        return _reminder(rows[0]) if rows else None

    async def pending_reminders(self, session_key: str | None = None) -> list[Reminder]:
        """Pending rows, soonest first; all of them (start-up) or one session's."""
        where, params = ("AND session_key = ?", (session_key,)) if session_key is not None else ("", ())
        sql = f"SELECT {_COLUMNS} FROM reminders WHERE status = 'pending' {where} ORDER BY due_at, id"
        rows = await self._query(fetching(sql, *params))
        return [_reminder(row) for row in rows]

    async def claim_reminder(
        self,
        reminder_id: int,
        *,
        due_at: datetime,
        outcome: ReminderStatus,
        at: datetime | None = None,
        owed: str | None = None,
        notices: Sequence[str] = (),
        wake_limit: WakeLimit | None = None,
    ) -> Reminder | None:
        """End a pending one-shot due at `due_at` as `fired` or `missed`; None if someone else got there first.

        `owed` is what the claim promises, written with it: a reminder's post, or a wait's note (the
        returned row then carries its `inbox_id`); `notices` are lines for its thread, owed after it
        (the returned row names them all in `owed_lines`). With `wake_limit`, a wait whose session has
        fired that many waits since its `since` ends `missed`, owing only the limit's `refusal`: counted
        inside the claim, so two waits coming due together cannot both take the day's last wake.
        """
        if outcome not in (ReminderStatus.FIRED, ReminderStatus.MISSED):
            raise ValueError(f"a claim ends a reminder as fired or missed, not {outcome}")
        sql = (
            "UPDATE reminders SET status = ?, fired_at = ? "
            f"WHERE id = ? AND status = 'pending' AND due_at = ? AND cron IS NULL RETURNING {_COLUMNS}"
        )

        async def body(db: Db) -> Reminder | None:
            ending, owing, lines = outcome, owed, notices
            if (
                wake_limit is not None
                and ending is ReminderStatus.FIRED
                and await _no_wake_left(db, reminder_id, wake_limit)
            ):
                ending, owing = ReminderStatus.MISSED, None
                lines = [wake_limit.refusal] if wake_limit.refusal is not None else []
            fired_at = ts_or_none(at or utcnow()) if ending is ReminderStatus.FIRED else None
            params = (ending.value, fired_at, reminder_id, ts(due_at))
            return await _claiming(sql, params, owing, lines, self.replica)(db)

        return await self._transact(body)

    async def advance_reminder(
        self,
        reminder_id: int,
        *,
        due_at: datetime,
        next_due_at: datetime,
        fired_at: datetime | None,
        owed: str | None = None,
        notices: Sequence[str] = (),
    ) -> Reminder | None:
        """Move a pending cron row from `due_at` to its next run; None if someone else already moved it.

        `fired_at` is recorded when this run is delivered, left as it was when it was missed.
        `owed` and `notices` are as for `claim_reminder`.
        """
        sql = (
            "UPDATE reminders SET due_at = ?, fired_at = COALESCE(?, fired_at) "
            f"WHERE id = ? AND status = 'pending' AND due_at = ? AND cron IS NOT NULL RETURNING {_COLUMNS}"
        )
        params = (ts(next_due_at), ts_or_none(fired_at), reminder_id, ts(due_at))
        return await self._transact(_claiming(sql, params, owed, notices, self.replica))

    async def end_cron_reminder(
        self,
        reminder_id: int,
        *,
        due_at: datetime,
        outcome: ReminderStatus,
        at: datetime,
        owed: str | None = None,
        notices: Sequence[str] = (),
    ) -> Reminder | None:
        """End a pending cron row due at `due_at` as `fired` or `missed`: its schedule has no run ahead.

        None if someone else moved or ended it first (the same compare-and-set as a claim);
        `owed` and `notices` are as for `claim_reminder`.
        """
        if outcome not in (ReminderStatus.FIRED, ReminderStatus.MISSED):
            raise ValueError(f"a cron row ends as fired or missed, not {outcome}")
        fired_at = ts(at) if outcome is ReminderStatus.FIRED else None
        sql = (
            "UPDATE reminders SET status = ?, fired_at = COALESCE(?, fired_at) "
            f"WHERE id = ? AND status = 'pending' AND due_at = ? AND cron IS NOT NULL RETURNING {_COLUMNS}"
        )
        params = (outcome.value, fired_at, reminder_id, ts(due_at))
        return await self._transact(_claiming(sql, params, owed, notices, self.replica))

    async def cancel_reminder(self, reminder_id: int, *, session_key: str) -> Reminder | None:
        """Cancel a pending reminder of this session; None if there is none (another session's counts as none)."""
        sql = (
            "UPDATE reminders SET status = 'cancelled' "
            f"WHERE id = ? AND session_key = ? AND status = 'pending' RETURNING {_COLUMNS}"
        )
        rows = await self._transact(fetching(sql, reminder_id, session_key))
        return _reminder(rows[0]) if rows else None
