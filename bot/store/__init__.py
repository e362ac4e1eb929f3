"""Persistence: the SQLite store behind an intent-level interface (no SQL outside this package)."""

from bot.store.store import SessionRecord, Store

__all__ = ["SessionRecord", "Store"]
