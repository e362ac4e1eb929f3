"""Crontab in a time zone: parsing, the next run (DST included), and catching up after downtime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest

from bot.schedule.cron import CronSchedule
from bot.schedule.cron_runs import first_run, latest_run, next_run, resolve_wall_time

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def runs(expr: str, zone: tzinfo, after: datetime, count: int) -> list[datetime]:
    schedule = CronSchedule.parse(expr)
    found: list[datetime] = []
    for _ in range(count):
        moment = next_run(schedule, zone, after)
        assert moment is not None
        found.append(moment)
        after = moment
    return found


@pytest.mark.parametrize(
    ("expr", "zone", "after", "expected"),
    [
        ("*/15 * * * *", UTC, utc(2026, 5, 1, 10, 7), utc(2026, 5, 1, 10, 15)),
        ("*/15 * * * *", UTC, utc(2026, 5, 1, 10, 15), utc(2026, 5, 1, 10, 30)),  # strictly after
        ("0 9 * * *", BERLIN, utc(2026, 1, 10, 12), utc(2026, 1, 11, 8)),  # winter: CET
        ("0 9 * * *", BERLIN, utc(2026, 7, 10, 12), utc(2026, 7, 11, 7)),  # summer: CEST
        ("0 9 * * 1-5", BERLIN, utc(2026, 5, 1, 8), utc(2026, 5, 4, 7)),  # Fri after 9 → Monday
        ("0 9 * * 0", UTC, utc(2026, 5, 1), utc(2026, 5, 3, 9)),  # 0 is Sunday, as in cron
        ("0 9 * * 7", UTC, utc(2026, 5, 1), utc(2026, 5, 3, 9)),  # and so is 7
        ("0 9 * * sun", UTC, utc(2026, 5, 1), utc(2026, 5, 3, 9)),
        ("30 8 1 * *", UTC, utc(2026, 5, 1, 9), utc(2026, 6, 1, 8, 30)),
        ("0 0 1 jan *", UTC, utc(2026, 5, 1), utc(2027, 1, 1)),
        ("0 12 13 * 5", UTC, utc(2026, 5, 1, 13), utc(2026, 5, 8, 12)),  # day OR weekday: Friday 8th
        ("0 0 29 2 *", UTC, utc(2026, 3, 1), utc(2028, 2, 29)),
        ("@daily", NEW_YORK, utc(2026, 5, 1, 12), utc(2026, 5, 2, 4)),
        ("0 12 * * *", ZoneInfo("Asia/Kolkata"), utc(2026, 5, 1), utc(2026, 5, 1, 6, 30)),
    ],
)
def test_next_run(expr: str, zone: tzinfo, after: datetime, expected: datetime) -> None:
    assert next_run(CronSchedule.parse(expr), zone, after) == expected


def test_spring_forward_fires_once_when_the_clocks_jump() -> None:
    # 2026-03-29 02:30 does not exist in Berlin: cron runs it at the jump (03:00 CEST = 01:00Z).
    assert runs("30 2 * * *", BERLIN, utc(2026, 3, 28, 12), 2) == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]
    assert resolve_wall_time(datetime(2026, 3, 29, 2, 30), BERLIN) == utc(2026, 3, 29, 1)


def test_fall_back_fires_a_repeated_time_once() -> None:
    # 2026-10-25 02:30 happens twice in Berlin; the daily reminder fires at the first one only.
    assert runs("30 2 * * *", BERLIN, utc(2026, 10, 24, 12), 2) == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_fall_back_never_goes_back_in_time() -> None:
    # A wildcard schedule runs by the clock, as cron(8) does: through the repeated hour again.
    found = runs("*/30 * * * *", BERLIN, utc(2026, 10, 24, 23, 50), 8)
    assert found == [utc(2026, 10, 25, 0) + timedelta(minutes=30 * step) for step in range(8)]


def test_created_during_the_repeated_hour_fires_in_it() -> None:
    # It is 02:10 CET, the second 02:10 of the night: 02:30 CET is still ahead for a new schedule...
    schedule = CronSchedule.parse("30 2 * * *")
    assert first_run(schedule, BERLIN, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 1, 30)
    # ...but one that already ran at 02:30 CEST (00:30Z) moves on to the next night.
    assert next_run(schedule, BERLIN, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)


def test_a_date_that_never_comes_is_none() -> None:
    assert next_run(CronSchedule.parse("0 0 31 2 *"), UTC, utc(2026, 1, 1)) is None


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "5 fields"),
        ("61 * * * *", "minute: 61 is out of range 0-59"),
        ("0 24 * * *", "hour: 24 is out of range"),
        ("0 0 0 * *", "day of month: 0 is out of range"),
        ("0 0 * 13 *", "month: 13 is out of range"),
        ("0 0 * * 8", "day of week: 8 is out of range"),
        ("0 0 * * fry", "not a number or a name"),
        ("*/0 * * * *", "step must be a positive number"),
        ("5-1 * * * *", "runs backwards"),
        ("\u0663 * * * *", r"ASCII only: '\u0663' \(ARABIC-INDIC DIGIT THREE\)"),  # int() would read it as 3
        ("0 \u00b2 * * *", r"ASCII only: '\u00b2' \(SUPERSCRIPT TWO\)"),  # int() would raise its own error
        ("0 9 * * 1-\uff15", "ASCII only"),  # fullwidth 5
        ("*/\u0663 * * * *", "ASCII only"),
        ("0\u00a09 * * *", "NO-BREAK SPACE"),
    ],
)
def test_parse_errors_say_what_is_wrong(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CronSchedule.parse(expr)


@pytest.mark.parametrize(
    ("due", "now", "horizon_s", "expected"),
    [
        (utc(2026, 5, 1, 9), utc(2026, 5, 1, 9, 0, 1), 3600, utc(2026, 5, 1, 9)),  # on time: the due run
        (utc(2026, 5, 1, 9), utc(2026, 5, 1, 11, 42), 6 * 3600, utc(2026, 5, 1, 11)),  # several missed: the latest
        (utc(2026, 5, 1, 9), utc(2026, 5, 3, 11, 42), 3600, utc(2026, 5, 3, 11)),  # long down: jump, then walk
        (utc(2026, 5, 1, 9), utc(2026, 5, 1, 11, 42), 60, utc(2026, 5, 1, 9)),  # none within the horizon
    ],
)
def test_latest_run_coalesces_missed_runs(due: datetime, now: datetime, horizon_s: float, expected: datetime) -> None:
    schedule = CronSchedule.parse("0 * * * *")
    assert latest_run(schedule, UTC, due=due, now=now, horizon_s=horizon_s) == expected
