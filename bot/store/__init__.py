"""Persistence: SQLite or PostgreSQL behind one intent-level interface, `Store` (no SQL outside this package)."""

from bot.store.db import TxHook
from bot.store.inbox import InboxItem
from bot.store.opening import open_store
from bot.store.outbox import OwedEdit, OwedMessage
from bot.store.processes import ProcessGroupRecord
from bot.store.reminders import (
    NewReminder,
    PendingLimitReached,
    Reminder,
    ReminderKind,
    ReminderStatus,
    WakeLimit,
)
from bot.store.sqlite import SqliteStore
from bot.store.store import SessionRecord, Store

__all__ = [
    "InboxItem",
    "NewReminder",
    "OwedEdit",
    "OwedMessage",
    "PendingLimitReached",
    "ProcessGroupRecord",
    "Reminder",
    "ReminderKind",
    "ReminderStatus",
    "SessionRecord",
    "SqliteStore",
    "Store",
    "TxHook",
    "WakeLimit",
    "open_store",
]
