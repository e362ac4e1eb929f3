"""Cron runs around every real 2026-2027 clock change in eight zones, far look-ahead, and a brute-force check.

The zones cover what differs between them: changes at 01:00Z (Europe), at local
02:00 (America), south-hemisphere seasons (Sydney), a half-hour shift (Lord
Howe), a 45-minute offset (Chatham), a jump over local midnight (Havana) and a
fall back across midnight into the previous day (Santiago, Beirut).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.schedule.cron import CronSchedule
from bot.schedule.cron_runs import first_run, next_run

ZONES = [
    ZoneInfo(name)
    for name in (
        "Europe/Berlin",
        "America/New_York",
        "Australia/Sydney",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "America/Havana",
        "America/Santiago",
        "Asia/Beirut",
    )
]
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Change:
    """One clock change: at `at` (UTC) the zone's offset goes from `before` to `after`."""

    zone: ZoneInfo
    at: datetime
    before: timedelta
    after: timedelta

    @property
    def shift(self) -> timedelta:
        return self.after - self.before

    def __str__(self) -> str:
        return f"{self.zone.key}@{self.at:%Y-%m-%dT%H:%M}Z"


def offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    found = moment.astimezone(zone).utcoffset()
    assert found is not None
    return found


def changes(zone: ZoneInfo, start: datetime, end: datetime) -> Iterator[Change]:
    """Every offset change in [start, end), found day by day and then to the second (they are months apart)."""
    day = start
    while day < end:
        low, high = day, day + timedelta(days=1)
        if offset(zone, low) != offset(zone, high):
            while high - low > timedelta(seconds=1):
                middle = low + timedelta(seconds=(high - low).total_seconds() // 2)
                low, high = (middle, high) if offset(zone, middle) == offset(zone, low) else (low, middle)
            yield Change(zone, high, offset(zone, low), offset(zone, high))
        day += timedelta(days=1)


CHANGES = [
    change
    for zone in ZONES
    for change in changes(zone, datetime(2026, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC))
]
FALLS = [change for change in CHANGES if change.shift < timedelta(0)]
SPRINGS = [change for change in CHANGES if change.shift > timedelta(0)]


def test_every_zone_changes_four_times_in_two_years() -> None:
    assert len(CHANGES) == 4 * len(ZONES) and len(FALLS) == len(SPRINGS) == 2 * len(ZONES)


def runs_between(expr: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    schedule = CronSchedule.parse(expr)
    found: list[datetime] = []
    moment = next_run(schedule, zone, start)
    while moment is not None and moment < end:
        found.append(moment)
        moment = next_run(schedule, zone, moment)
    return found


def local(moment: datetime, zone: ZoneInfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


# -- wildcard schedules run by the clock (cron(8): "based on the new time immediately") ----------


@pytest.mark.parametrize("change", CHANGES, ids=str)
def test_every_quarter_hour_runs_on_through_the_change(change: Change) -> None:
    # Every offset here is a whole number of quarter hours, so the clock shows :00/:15/:30/:45 every
    # 15 minutes of real time: through a repeated hour twice, across a skipped one without a gap or an extra run.
    start, end = change.at - timedelta(hours=3), change.at + timedelta(hours=3)
    assert runs_between("*/15 * * * *", change.zone, start, end) == [
        start + timedelta(minutes=15 * step) for step in range(1, 24)
    ]


@pytest.mark.parametrize("change", CHANGES, ids=str)
def test_hourly_runs_whenever_the_clock_shows_the_minute(change: Change) -> None:
    start, end = change.at - timedelta(hours=4), change.at + timedelta(hours=4)
    expected = [start + MINUTE * step for step in range(1, 8 * 60)]
    expected = [moment for moment in expected if local(moment, change.zone).minute == 7]
    found = runs_between("7 * * * *", change.zone, start, end)
    assert found == expected
    assert change.at not in found  # the spring jump adds no run
    if change.shift % timedelta(hours=1) == timedelta(0):  # the clock shows :07 once every real hour, change or not
        assert [later - earlier for earlier, later in itertools.pairwise(found)] == [timedelta(hours=1)] * 7


# -- fixed-time schedules run once per local time ---------------------------------------------------


@pytest.mark.parametrize("change", SPRINGS, ids=str)
def test_a_skipped_time_runs_once_at_the_jump(change: Change) -> None:
    gone = local(change.at, change.zone) - change.shift  # the first local time the clocks skip
    halfway = gone + change.shift / 2
    minutes = sorted({gone.minute, halfway.minute} if halfway.hour == gone.hour else {gone.minute})
    schedule = CronSchedule.parse(f"{','.join(map(str, minutes))} {gone.hour} * * *")
    assert next_run(schedule, change.zone, change.at - MINUTE) == change.at  # all its skipped times: one run
    following = next_run(schedule, change.zone, change.at)
    assert following is not None and local(following, change.zone) == gone + timedelta(days=1)


@pytest.mark.parametrize("change", FALLS, ids=str)
def test_a_repeated_time_runs_once_at_its_first_occurrence(change: Change) -> None:
    gap = -change.shift
    middle = local(change.at, change.zone) + gap / 2  # a local time in the middle of the stretch shown twice
    first, second = change.at - gap / 2, change.at + gap / 2  # its two occurrences
    schedule = CronSchedule.parse(f"{middle.minute} {middle.hour} * * *")
    next_day = next_run(schedule, change.zone, first)
    assert next_run(schedule, change.zone, first - MINUTE) == first
    assert next_day is not None and local(next_day, change.zone) == middle + timedelta(days=1)
    # A running schedule moved on from `max(started, due)` after a late run inside the
    # stretch must not run that time again at its second occurrence, still ahead on the clock.
    for started in (first + MINUTE, change.at, change.at + gap / 4, second, second + MINUTE):
        assert next_run(schedule, change.zone, started) == next_day
    # A schedule set up during the second pass, before that time, has it ahead: it runs at the second occurrence.
    assert first_run(schedule, change.zone, change.at + gap / 4) == second
    assert first_run(schedule, change.zone, first + MINUTE) == next_day  # set up just after it: behind the clock


# -- far look-ahead --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("0 0 1 11 */7", datetime(2026, 11, 2, tzinfo=UTC), datetime(2037, 11, 1, tzinfo=UTC)),  # 1 Nov on a Sunday
        ("0 0 29 2 */7", datetime(2033, 1, 1, tzinfo=UTC), datetime(2060, 2, 29, tzinfo=UTC)),  # 29 Feb on a Sunday
        ("0 0 29 2 */7", datetime(2089, 1, 1, tzinfo=UTC), datetime(2128, 2, 29, tzinfo=UTC)),  # 2100 is no leap year
        (
            "0 12 13 * */5",
            datetime(2026, 11, 14, tzinfo=UTC),
            datetime(2026, 12, 13, 12, tzinfo=UTC),
        ),  # 13th AND Sun/Fri
    ],
)
def test_look_ahead_covers_the_whole_calendar_cycle(expr: str, after: datetime, expected: datetime) -> None:
    assert next_run(CronSchedule.parse(expr), UTC, after) == expected


@pytest.mark.parametrize("expr", ["0 0 31 2 *", "0 0 30 2 */7", "0 0 31 4,6,9,11 *"])
def test_a_date_that_does_not_exist_never_runs(expr: str) -> None:
    assert next_run(CronSchedule.parse(expr), UTC, datetime(2026, 1, 1, tzinfo=UTC)) is None


# -- the property: next_run agrees with a minute-by-minute scan of the clock -------------------------


def fields_match(schedule: CronSchedule, wall: datetime) -> bool:
    """The crontab fields against a local time, written out independently of `CronSchedule.matches_day`."""
    by_day = wall.day in schedule.days
    by_weekday = wall.isoweekday() % 7 in schedule.weekdays
    day_ok = (by_day or by_weekday) if schedule.day_or_weekday else (by_day and by_weekday)
    return wall.minute in schedule.minutes and wall.hour in schedule.hours and wall.month in schedule.months and day_ok


def scanned_runs(schedule: CronSchedule, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """The runs in (start, end), by looking at the clock every real minute, as cron(8) does.

    By the clock: every minute the clock shows a matching time. Fixed time: a matching time
    the first time the clock shows it, and when the clock jumps forward, one run if any
    time it skipped matches.
    """
    found = []
    moment = start + MINUTE
    shown = local(start, zone)
    while moment < end:
        here = moment.astimezone(zone)
        wall = here.replace(tzinfo=None)
        if schedule.by_the_clock:
            due = fields_match(schedule, wall)
        else:
            skipped = (shown + MINUTE * step for step in range(1, (wall - shown) // MINUTE))
            due = (fields_match(schedule, wall) and here.fold == 0) or any(fields_match(schedule, w) for w in skipped)
        if due:
            found.append(moment)
        shown = wall
        moment += MINUTE
    return found


def field(low: int, high: int, hot: list[int]) -> st.SearchStrategy[str]:
    value = st.sampled_from(hot) | st.integers(low, high)
    return st.one_of(
        st.just("*"),
        st.integers(2, 30).map(lambda step: f"*/{step}"),
        value.map(str),
        st.lists(value, min_size=2, max_size=4, unique=True).map(lambda values: ",".join(map(str, values))),
        st.tuples(value, value, st.integers(1, 5)).map(lambda t: f"{min(t[:2])}-{max(t[:2])}/{t[2]}"),
    )


EXPRESSIONS = st.tuples(
    field(0, 59, [0, 15, 30, 45]),
    field(0, 23, [0, 1, 2, 3, 23]),  # the hours clocks change in
    st.sampled_from(["*", "*", "*", "1-15", "*/2", "25"]),
    st.just("*"),
    st.sampled_from(["*", "*", "*", "1-5", "0", "*/2", "6"]),
).map(" ".join)


@settings(max_examples=100, deadline=None)
@given(
    expr=EXPRESSIONS,
    change=st.sampled_from(CHANGES),
    start_offset_min=st.integers(-24 * 60, 24 * 60),
    start_second=st.integers(0, 59),
)
def test_next_run_agrees_with_a_scan_of_the_clock(
    expr: str, change: Change, start_offset_min: int, start_second: int
) -> None:
    schedule = CronSchedule.parse(expr)
    start = change.at + MINUTE * start_offset_min
    end = start + timedelta(hours=30)
    found = runs_between(expr, change.zone, start + timedelta(seconds=start_second), end)
    assert all(earlier < later for earlier, later in itertools.pairwise(found))
    for moment in found:  # each run shows a matching time, or (fixed time) is the moment the clocks jumped
        jumped = local(moment - MINUTE, change.zone) + MINUTE != local(moment, change.zone)
        assert fields_match(schedule, local(moment, change.zone)) or (not schedule.by_the_clock and jumped)
    assert found == scanned_runs(schedule, change.zone, start, end)
