"""The SQLite schema (an ordered list of migrations) and how values are written to it (both back ends).

`MIGRATIONS[i]` brings the database to version `i + 1`. The version lives in
`PRAGMA user_version`, so a database knows how far it has been migrated without
a bookkeeping table, and reopening an up-to-date database runs nothing. A
migration is only ever appended, never edited: a released script has already
run on someone's database.

Conventions the store relies on:
- timestamps are TEXT, ISO 8601 in UTC with microseconds, so they sort as text;
- JSON values are TEXT written by `json.dumps(..., ensure_ascii=False)`;
- booleans are INTEGER 0/1.
The PostgreSQL schema (bot/store/pg_schema.py) keeps the same conventions, so one set of queries serves both.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

import aiosqlite

from bot.errors import StoreError
from bot.store.db import Row
from bot.toolcall import ToolCall

_V1 = """
CREATE TABLE sessions (
    key         TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    address     TEXT NOT NULL DEFAULT '{}',
    turn_count  INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE session_aliases (
    alias        TEXT PRIMARY KEY,
    session_key  TEXT NOT NULL REFERENCES sessions(key) ON DELETE CASCADE
);
CREATE INDEX session_aliases_by_session ON session_aliases(session_key);

CREATE TABLE messages (
    session_key  TEXT NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (session_key, seq)
) WITHOUT ROWID;

CREATE TABLE tool_calls (
    id            TEXT PRIMARY KEY,
    session_key   TEXT NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
    turn_id       TEXT NOT NULL,
    tool_name     TEXT NOT NULL,
    input         TEXT NOT NULL,
    parent_id     TEXT,
    status        TEXT NOT NULL CHECK (status IN
                      ('pending', 'running', 'completed', 'failed', 'cancelled', 'orphaned')),
    created_at    TEXT NOT NULL,
    started_at    TEXT,
    completed_at  TEXT,
    result        TEXT NOT NULL DEFAULT 'null',
    error         TEXT,
    timed_out     INTEGER NOT NULL DEFAULT 0,
    cancelled_by  TEXT,
    delivered     INTEGER NOT NULL DEFAULT 0,
    progress      TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX tool_calls_by_session ON tool_calls(session_key, status, created_at);
CREATE INDEX tool_calls_by_status ON tool_calls(status);

CREATE TABLE seen_events (
    key      TEXT PRIMARY KEY,
    seen_at  TEXT NOT NULL
);
CREATE INDEX seen_events_by_time ON seen_events(seen_at);
"""

# Waits and reminders (bot/store/reminders.py). AUTOINCREMENT: a cancelled id is never handed out again.
_V2 = """
CREATE TABLE reminders (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key  TEXT NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
    kind         TEXT NOT NULL CHECK (kind IN ('wake', 'reminder')),
    text         TEXT NOT NULL,
    requester    TEXT,
    due_at       TEXT NOT NULL,
    cron         TEXT,
    zone         TEXT,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'fired', 'cancelled', 'missed')),
    fired_at     TEXT,
    created_at   TEXT NOT NULL,
    CHECK (cron IS NULL OR zone IS NOT NULL)
);
CREATE INDEX reminders_due ON reminders(status, due_at);
CREATE INDEX reminders_by_session ON reminders(session_key, status, due_at);
"""

# Where an edge shows each call (a Slack status message), so a restart can repaint calls it orphaned.
_V3 = """
CREATE TABLE call_displays (
    call_id  TEXT PRIMARY KEY REFERENCES tool_calls(id) ON DELETE CASCADE,
    place    TEXT NOT NULL
);
CREATE INDEX call_displays_by_place ON call_displays(place);
"""

# The process group a running call started (run_command), so a start after a crash can kill what is left.
# `leader` and `owner` identify the group's first process and the daemon that ran it (boot id and start time),
# so a pid reused since is never mistaken for ours, and a daemon still running keeps its own processes.
_CALL_PROCESSES = """
CREATE TABLE call_processes (
    call_id      TEXT PRIMARY KEY REFERENCES tool_calls(id) ON DELETE CASCADE,
    pgid         INTEGER NOT NULL,
    leader       TEXT,
    owner        TEXT,
    recorded_at  TEXT NOT NULL
);
"""

# Token accounting (bot/store/usage.py): one row per model call, kept when its session goes.
_MODEL_USAGE = """
CREATE TABLE model_usage (
    id                  INTEGER PRIMARY KEY,
    at                  TEXT NOT NULL,
    session_key         TEXT NOT NULL,
    turn_id             TEXT,
    requester           TEXT,
    model               TEXT NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cache_read_tokens   INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL
);
CREATE INDEX model_usage_by_time ON model_usage(at);
"""

# Compaction (bot/agent/compaction.py) rewrites a session's history; what it changed or dropped moves here, for audit.
_MESSAGES_ARCHIVE = """
CREATE TABLE messages_archive (
    id           INTEGER PRIMARY KEY,
    session_key  TEXT NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
    role         TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    archived_at  TEXT NOT NULL
);
CREATE INDEX messages_archive_by_session ON messages_archive(session_key, created_at);
"""

# The inbox (bot/store/inbox.py): each acknowledged message until a turn has answered it.
_INBOX = """
CREATE TABLE inbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key  TEXT NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
    text         TEXT NOT NULL,
    blocks       TEXT,
    claimed_at   TEXT NOT NULL,
    turn_id      TEXT,
    resumes      INTEGER NOT NULL DEFAULT 0,
    answered_at  TEXT
);
CREATE INDEX inbox_open ON inbox(answered_at, session_key);
"""

# Reminder posts owed to threads (bot/store/reminder_posts.py): claimed runs until Slack confirms them.
_REMINDER_POSTS = """
CREATE TABLE reminder_posts (
    reminder_id  INTEGER NOT NULL REFERENCES reminders(id) ON DELETE CASCADE,
    due_at       TEXT NOT NULL,
    text         TEXT NOT NULL,
    claimed_at   TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    state        TEXT NOT NULL DEFAULT 'owed' CHECK (state IN ('owed', 'posted', 'abandoned')),
    settled_at   TEXT,
    PRIMARY KEY (reminder_id, due_at)
);
CREATE INDEX reminder_posts_by_state ON reminder_posts(state, claimed_at);
"""

# What the bot owes Slack (bot/store/outbox.py): posts and final edits not confirmed yet, kept across restarts.
# A post has no `ts` until it lands; an edit is keyed by the message it changes (one owed state per message).
_OUTBOX = """
CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key  TEXT NOT NULL,
    channel      TEXT NOT NULL,
    thread_ts    TEXT,
    ts           TEXT,
    text         TEXT NOT NULL,
    blocks       TEXT,
    created_at   TEXT NOT NULL
);
CREATE UNIQUE INDEX outbox_edit_per_message ON outbox(channel, ts) WHERE ts IS NOT NULL;
"""

# Version 4, in one step: the tables that keep the bot's promises across a crash (process groups, the
# inbox, owed reminder posts, the Slack outbox), its token books and the compaction archive.
_V4 = _CALL_PROCESSES + _MODEL_USAGE + _MESSAGES_ARCHIVE + _INBOX + _REMINDER_POSTS + _OUTBOX

# The replica that saves a call, or owes a post (bot/store/calls.py, outbox.py, reminder_posts.py); NULL in
# SQLite mode, where one process is the only writer. And who wrote each inbox row, and until when a cluster
# is still reading its files (bot/store/inbox.py).
_V5 = """
ALTER TABLE tool_calls ADD COLUMN replica TEXT;
ALTER TABLE outbox ADD COLUMN replica TEXT;
ALTER TABLE reminder_posts ADD COLUMN replica TEXT;
ALTER TABLE inbox ADD COLUMN requester TEXT;
ALTER TABLE inbox ADD COLUMN reading_until TEXT;
"""

# Who asked for each call and what allowed it (the tool policy, or the approver who decided): the audit trail.
_V6 = """
ALTER TABLE tool_calls ADD COLUMN requester TEXT;
ALTER TABLE tool_calls ADD COLUMN decision TEXT NOT NULL DEFAULT 'allowed';
ALTER TABLE tool_calls ADD COLUMN decided_by TEXT;
ALTER TABLE tool_calls ADD COLUMN approvers TEXT NOT NULL DEFAULT '[]';
CREATE INDEX tool_calls_by_time ON tool_calls(created_at);
"""

# One outbox for every post the bot owes (bot/store/outbox.py): a line the engine owes a thread (a due
# reminder, a notice) is kept with no address (`channel` NULL) and its `line` kind, rendered by the edge
# that delivers it. The table is rebuilt to let `channel` be NULL; its AUTOINCREMENT counter is carried
# over, so no new post reuses the id (and so the Slack marker) of one settled before. Reminder posts still
# owed move in, in the order they were claimed, and their own table goes.
_V7 = """
CREATE TABLE outbox_v7 (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key  TEXT NOT NULL,
    channel      TEXT,
    thread_ts    TEXT,
    ts           TEXT,
    text         TEXT NOT NULL,
    blocks       TEXT,
    created_at   TEXT NOT NULL,
    replica      TEXT,
    line         TEXT CHECK (line IN ('reminder', 'notice')),
    requester    TEXT,
    CHECK (channel IS NOT NULL OR line IS NOT NULL)
);
INSERT INTO outbox_v7 (id, session_key, channel, thread_ts, ts, text, blocks, created_at, replica)
SELECT id, session_key, channel, thread_ts, ts, text, blocks, created_at, replica FROM outbox;
DELETE FROM sqlite_sequence WHERE name = 'outbox_v7';
INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_v7', seq FROM sqlite_sequence WHERE name = 'outbox';
INSERT INTO outbox_v7 (session_key, text, created_at, replica, line, requester)
SELECT r.session_key, p.text, p.claimed_at, p.replica, 'reminder', r.requester
FROM reminder_posts AS p JOIN reminders AS r ON r.id = p.reminder_id
WHERE p.state = 'owed' ORDER BY p.claimed_at, p.reminder_id;
DROP TABLE outbox;
ALTER TABLE outbox_v7 RENAME TO outbox;
CREATE UNIQUE INDEX outbox_edit_per_message ON outbox(channel, ts) WHERE ts IS NOT NULL;
DROP TABLE reminder_posts;
"""

# How people rated the answers (bot/store/feedback.py): one row per answer (its turn) and person; a turn's
# model is read from the token books when someone rates it.
_V8 = """
CREATE TABLE feedback (
    turn_id      TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    session_key  TEXT NOT NULL,
    model        TEXT NOT NULL,
    rating       TEXT NOT NULL,
    at           TEXT NOT NULL,
    PRIMARY KEY (turn_id, user_id)
);
CREATE INDEX feedback_by_time ON feedback(at);
CREATE INDEX model_usage_by_turn ON model_usage(turn_id);
"""

MIGRATIONS: list[str] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8]

# The tool_calls columns, named as `ToolCall.to_record()` names its keys.
CALL_COLUMNS = (
    *("id", "session_key", "turn_id", "tool_name", "input", "parent_id", "status", "created_at", "started_at"),
    *("completed_at", "result", "error", "timed_out", "cancelled_by", "delivered", "progress"),
    *("requester", "decision", "decided_by", "approvers"),
)


def ts(moment: datetime) -> str:
    """UTC, fixed width, so timestamps compare correctly as text (naive means UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def ts_or_none(moment: datetime | None) -> str | None:
    return ts(moment) if moment is not None else None


def dumps(value: Any) -> str:
    """JSON text that keeps non-ASCII readable in the file (Slack text is full of it)."""
    return json.dumps(value, ensure_ascii=False)


def call_to_row(call: ToolCall) -> tuple[Any, ...]:
    """`ToolCall.to_record()` in column order: JSON as text, times normalised, flags as 0/1."""
    record = call.to_record()
    for column in ("input", "result", "progress", "approvers"):
        record[column] = dumps(record[column])
    record["created_at"] = ts(call.created_at)
    record["started_at"] = ts_or_none(call.started_at)
    record["completed_at"] = ts_or_none(call.completed_at)
    record["timed_out"], record["delivered"] = int(call.timed_out), int(call.delivered)
    return tuple(record[column] for column in CALL_COLUMNS)


def call_from_row(row: Row) -> ToolCall:
    """The inverse of `call_to_row`; the row must carry every column of `CALL_COLUMNS`."""
    record = dict(zip(row.keys(), tuple(row), strict=True))
    for column in ("input", "result", "progress", "approvers"):
        record[column] = json.loads(record[column])
    return ToolCall.from_record(record)


async def schema_version(db: aiosqlite.Connection) -> int:
    rows = list(await db.execute_fetchall("PRAGMA user_version"))
    return int(rows[0][0])


async def migrate(db: aiosqlite.Connection) -> int:
    """Apply every migration newer than the database's version; return the final version.

    Each migration runs in its own transaction together with its version bump,
    so a failure leaves the database at the last good version rather than half
    migrated. The connection must be in autocommit mode (`isolation_level=None`).
    """
    current = await schema_version(db)
    if current > len(MIGRATIONS):
        raise StoreError(f"schema version {current} is newer than this program knows ({len(MIGRATIONS)})")
    for version, script in enumerate(MIGRATIONS, start=1):
        if version <= current:
            continue
        try:
            await db.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {version};\nCOMMIT;")
        except sqlite3.Error as exc:
            if db.in_transaction:
                await db.rollback()
            raise StoreError(f"migration {version} failed: {exc}") from exc
        current = version
    return current
