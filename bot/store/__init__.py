"""Persistence: the SQLite store behind an intent-level interface (no SQL outside this package)."""

from bot.store.outbox import OwedEdit, OwedMessage
from bot.store.reminders import NewReminder, Reminder, ReminderKind, ReminderStatus
from bot.store.store import SessionRecord, Store

__all__ = [
    "NewReminder",
    "OwedEdit",
    "OwedMessage",
    "Reminder",
    "ReminderKind",
    "ReminderStatus",
    "SessionRecord",
    "Store",
]
