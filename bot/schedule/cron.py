"""Five-field crontab schedules: parse once, then walk the local times that match.

Why not `CronTrigger.from_crontab`: APScheduler 3.x reads weekday 0 as Monday
(crontab says Sunday; its own docstring admits it), combines day-of-month and
day-of-week with AND (cron uses OR when both are restricted), and with zoneinfo
it repeats or even goes back in time around the autumn DST change. A reminder
that says "every Sunday at 02:30" must do exactly that, so this module and
`cron_runs` are the small, pure, tested pieces that decide, and the scheduler
only runs their answers. This one knows the calendar; `cron_runs` knows the
clock (time zones, daylight saving).
"""

from __future__ import annotations

import calendar
import itertools
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, date, datetime

CYCLE_YEARS = 400
"""The Gregorian calendar repeats every 400 years (146,097 days, a whole number of weeks), so a
schedule that matches no day in one cycle never will: `0 0 29 2 */7` (29 February on a Sunday) can
be 40 years apart, `0 0 1 11 */7` eleven."""

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name_value: int = 0


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day of week", 0, 7, _WEEKDAYS, 0),
)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A parsed crontab line; weekdays count from Sunday = 0 (7 is Sunday too). Value tuples are sorted."""

    expr: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: frozenset[int]
    day_or_weekday: bool
    """Both day fields restricted: cron fires when EITHER matches."""
    by_the_clock: bool
    """`*` (or `*/n`) in the minute or hour field: cron(8) runs such a job whenever the clock shows a
    matching time, even twice in a repeated hour; a fixed-time job runs once per local time."""

    @classmethod
    def parse(cls, expr: str) -> CronSchedule:
        """Parse `expr` (or an @macro); ValueError with a message fit to show to the model."""
        _require_ascii(expr)
        text = " ".join(expr.split())
        fields = MACROS.get(text.lower(), text).split(" ")
        if len(fields) != 5:
            raise ValueError(f"cron needs 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
        minutes, hours, days, months, weekdays = (
            _parse_field(spec, f) for spec, f in zip(fields, _FIELDS, strict=True)
        )
        return cls(
            expr=text,
            minutes=tuple(sorted(minutes)),
            hours=tuple(sorted(hours)),
            days=tuple(sorted(days)),
            months=tuple(sorted(months)),
            weekdays=frozenset(day % 7 for day in weekdays),
            day_or_weekday=not fields[2].startswith("*") and not fields[4].startswith("*"),
            by_the_clock=fields[0].startswith("*") or fields[1].startswith("*"),
        )

    @property
    def shortest_gap_s(self) -> int:
        """The shortest time between two runs, by the times of day it names (a bound a quota can hold it to).

        Within a day it is the closest two of those times; across midnight the last one to the first,
        counted as if every day matched, so the answer is never longer than a real gap.
        """
        times = sorted(hour * 60 + minute for hour in self.hours for minute in self.minutes)
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        gaps.append(24 * 60 - times[-1] + times[0])
        return min(gaps) * 60

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = (day.isoweekday() % 7) in self.weekdays
        return (by_day or by_weekday) if self.day_or_weekday else (by_day and by_weekday)

    def walls_from(self, start: datetime) -> Iterator[datetime]:
        """Matching local times (naive, on the minute) at or after the naive `start`, in order, for one cycle."""
        first_day = start.date()
        for day in self._days_from(first_day):
            for hour in self.hours:
                if day == first_day and hour < start.hour:
                    continue
                for minute in self.minutes:
                    wall = datetime(day.year, day.month, day.day, hour, minute)
                    if wall >= start:
                        yield wall

    def _days_from(self, first: date) -> Iterator[date]:
        """Matching days from `first` on, for CYCLE_YEARS; months not in the schedule are never looked at,
        nor (when the day fields combine with AND) days of the month it does not name."""
        last_year = min(first.year + CYCLE_YEARS, MAXYEAR - 1)  # the last year stays clear of datetime's limit
        for year in range(first.year, last_year + 1):
            for month in self.months:
                if (year, month) < (first.year, first.month):
                    continue
                length = calendar.monthrange(year, month)[1]
                for number in range(1, length + 1) if self.day_or_weekday else self.days:
                    if number > length:
                        break
                    day = date(year, month, number)
                    if day >= first and self.matches_day(day):
                        yield day


def _require_ascii(expr: str) -> None:
    """Refuse what `str.isdigit` lets through: Arabic-Indic `٣` (which `int` reads as 3) and `²` (which it cannot)."""
    for char in expr:
        if not char.isascii():
            name = unicodedata.name(char, f"U+{ord(char):04X}")
            raise ValueError(f"cron takes ASCII only: {char!r} ({name}) is not allowed; write numbers with 0-9")


def _parse_field(spec: str, field: _Field) -> set[int]:
    values: set[int] = set()
    for item in spec.split(","):
        values |= _parse_item(item, field)
    return values


def _parse_item(item: str, field: _Field) -> set[int]:
    body, _, step_text = item.partition("/")
    step = 1
    if step_text:
        if not step_text.isdigit() or int(step_text) == 0:
            raise ValueError(f"{field.name}: step must be a positive number in {item!r}")
        step = int(step_text)
    if body == "*":
        low, high = field.low, field.high
    elif "-" in body:
        first, _, last = body.partition("-")
        low, high = _value(first, field), _value(last, field)
        if low > high:
            raise ValueError(f"{field.name}: range {body!r} runs backwards")
    else:
        low = _value(body, field)
        high = field.high if step_text else low
    return set(range(low, high + 1, step))


def _value(text: str, field: _Field) -> int:
    lowered = text.lower()
    if lowered in field.names:
        return field.names.index(lowered) + field.first_name_value
    if not text.isdigit():
        raise ValueError(f"{field.name}: {text!r} is not a number" + (" or a name" if field.names else ""))
    value = int(text)
    if not field.low <= value <= field.high:
        raise ValueError(f"{field.name}: {value} is out of range {field.low}-{field.high}")
    return value
