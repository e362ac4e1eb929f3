"""The wall clock, in one place below every layer: the store, the calls and the schedule all stamp times with it."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, timezone-aware in UTC: every stored and compared moment is aware, never naive."""
    return datetime.now(UTC)
