"""Pure timing rules: on time, late or missed; durations people read; timestamps the model writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bot.schedule.timing import (
    LATE_AFTER_S,
    Punctuality,
    format_duration,
    iso_utc,
    judge,
    local_text,
    parse_timestamp,
    parse_zone,
)

DUE = datetime(2026, 5, 1, 7, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")


@pytest.mark.parametrize(
    ("late_s", "punctuality", "marker"),
    [
        (-5, Punctuality.ON_TIME, ""),  # early (a clock step) counts as on time
        (0.05, Punctuality.ON_TIME, ""),
        (LATE_AFTER_S, Punctuality.ON_TIME, ""),
        (42 * 60, Punctuality.LATE, " (late by 42m)"),
        (3 * 3600 + 5 * 60, Punctuality.LATE, " (late by 3h 5m)"),
        (6 * 3600, Punctuality.LATE, " (late by 6h 0m)"),  # exactly the maximum is still delivered
        (6 * 3600 + 1, Punctuality.MISSED, " (late by 6h 0m)"),
    ],
)
def test_judge(late_s: float, punctuality: Punctuality, marker: str) -> None:
    verdict = judge(DUE, DUE + timedelta(seconds=late_s), max_lateness_s=6 * 3600)
    assert verdict.punctuality is punctuality
    assert verdict.marker == marker
    assert verdict.lateness_s == max(0.0, late_s)


@pytest.mark.parametrize(
    ("seconds", "coarse", "text"),
    [
        (0.25, False, "0.25s"),
        (42, False, "42s"),
        (600, False, "10m 0s"),
        (605, True, "10m"),
        (3600 * 2 + 300, False, "2h 5m"),
        (86400 * 3 + 3600 * 4, False, "3d 4h"),
    ],
)
def test_format_duration(seconds: float, coarse: bool, text: str) -> None:
    assert format_duration(seconds, coarse=coarse) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-05-01T09:00:00+02:00", DUE),
        ("2026-05-01T07:00:00Z", DUE),
        ("2026-05-01T09:00:00", DUE),  # naive: read in the default zone (Paris, CEST)
        ("2026-05-01 09:00", DUE),
    ],
)
def test_parse_timestamp(text: str, expected: datetime) -> None:
    assert parse_timestamp(text, PARIS) == expected


def test_parse_timestamp_rejects_prose() -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        parse_timestamp("tomorrow at nine", PARIS)


def test_zone_names() -> None:
    assert parse_zone(" Europe/Paris ") == PARIS
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        parse_zone("Mars/Olympus")


def test_display() -> None:
    assert iso_utc(DUE + timedelta(microseconds=5)) == "2026-05-01T07:00:00Z"
    assert local_text(DUE, PARIS) == "Fri 2026-05-01 09:00 CEST"
