"""When is it due, how late is it, is it missed: pure functions, no clock of their own.

The scheduler passes "now" in, so every decision here can be tested with
`parametrize` at any instant (arq's `next_cron` style), and the rules read in
one place: a fire within `LATE_AFTER_S` is on time, later is marked late, and
beyond the configured maximum lateness it is reported as missed instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

LATE_AFTER_S = 30.0
"""Lateness people are told about; below it a fire counts as on time (a busy loop, a slow disk)."""


class Punctuality(StrEnum):
    ON_TIME = "on_time"
    LATE = "late"
    MISSED = "missed"


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a due item stands at the moment it fires."""

    punctuality: Punctuality
    lateness_s: float

    @property
    def marker(self) -> str:
        """The suffix added to what is delivered: "" when on time, " (late by 42m)" when late."""
        if self.punctuality is Punctuality.ON_TIME:
            return ""
        return f" (late by {format_duration(self.lateness_s, coarse=True)})"


def judge(due_at: datetime, now: datetime, *, max_lateness_s: float, late_after_s: float = LATE_AFTER_S) -> Verdict:
    """On time, late or missed, for an item due at `due_at` firing at `now` (early counts as on time)."""
    lateness = max(0.0, (now - due_at).total_seconds())
    if lateness > max_lateness_s:
        return Verdict(Punctuality.MISSED, lateness)
    if lateness > late_after_s:
        return Verdict(Punctuality.LATE, lateness)
    return Verdict(Punctuality.ON_TIME, lateness)


def format_duration(seconds: float, *, coarse: bool = False) -> str:
    """`10m 0s`, `2h 5m`, `3d 4h`; `coarse` drops the smaller unit below an hour (`42m`)."""
    if seconds < 60:
        return f"{seconds:.0f}s" if coarse or seconds >= 10 else f"{seconds:.3g}s"
    total = round(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m" if coarse else f"{minutes}m {secs}s"


def parse_timestamp(text: str, default_zone: ZoneInfo) -> datetime:
    """An ISO 8601 time as an aware datetime; a naive one is read in `default_zone`."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-05-01T09:00:00+02:00)") from None
    return moment.replace(tzinfo=default_zone) if moment.tzinfo is None else moment


def parse_zone(name: str) -> ZoneInfo:
    """An IANA zone such as Europe/Paris; ValueError naming it when unknown."""
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (use an IANA name such as Europe/Paris)") from None


def iso_utc(moment: datetime) -> str:
    """`2026-05-01T07:00:00Z`: what the model reads, unambiguous and short."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def local_text(moment: datetime, zone: ZoneInfo) -> str:
    """`Fri 2026-05-01 09:00 CEST`: what people read, in their own zone."""
    return moment.astimezone(zone).strftime("%a %Y-%m-%d %H:%M %Z")
