"""Five-field crontab schedules, evaluated in a time zone: parse once, ask "when next?".

Why not `CronTrigger.from_crontab`: APScheduler 3.x reads weekday 0 as Monday
(crontab says Sunday; its own docstring admits it), combines day-of-month and
day-of-week with AND (cron uses OR when both are restricted), and with zoneinfo
it repeats or even goes back in time around the autumn DST change. A reminder
that says "every Sunday at 02:30" must do exactly that, so this module is the
small, pure, tested piece that decides, and the scheduler only runs its answers.

DST rules: every wall-clock time fires once. A time that happens twice (autumn)
fires at its first occurrence (at the second only for a schedule set up between
the two); a time that never happens (spring) fires at the moment the clocks
jump, as cron does.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

SEARCH_DAYS = 366 * 9
"""How far ahead to look for a match: enough for a 29 February that skips a century year."""

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
    """A parsed crontab line; weekdays count from Sunday = 0 (7 is Sunday too)."""

    expr: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_or_weekday: bool
    """Both day fields restricted: cron fires when EITHER matches."""

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
            days=frozenset(days),
            months=frozenset(months),
            weekdays=frozenset(day % 7 for day in weekdays),
            day_or_weekday=not fields[2].startswith("*") and not fields[4].startswith("*"),
        )

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = (day.isoweekday() % 7) in self.weekdays
        return (by_day or by_weekday) if self.day_or_weekday else (by_day and by_weekday)


def next_run(schedule: CronSchedule, zone: tzinfo, after: datetime) -> datetime | None:
    """The first run strictly after `after` (aware), in UTC; None if the schedule never fires."""
    after = after.astimezone(UTC)
    local_after = after.astimezone(zone).replace(tzinfo=None)
    day = local_after.date()
    for _ in range(SEARCH_DAYS):
        if schedule.matches_day(day):
            for hour in schedule.hours:
                if day == local_after.date() and hour < local_after.hour:
                    continue
                for minute in schedule.minutes:
                    wall = datetime.combine(day, time(hour, minute))
                    if wall <= local_after:
                        continue
                    moment = resolve_wall_time(wall, zone)
                    if moment > after:
                        return moment
                    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
                    if second > after:  # `after` lies inside a repeated hour: its second copy is still ahead
                        return second
        day += timedelta(days=1)
    return None


def latest_run(schedule: CronSchedule, zone: tzinfo, *, due: datetime, now: datetime, horizon_s: float) -> datetime:
    """The most recent run at or before `now`, where `due` is a known run that has not fired.

    Runs older than `now - horizon_s` are not walked one by one (a minutely cron down
    for a month would be 40,000 steps); if none falls inside the horizon, `due` is
    returned, which is late enough to be judged missed anyway.
    """
    latest = due
    start = now - timedelta(seconds=horizon_s)
    if start > due:
        candidate = next_run(schedule, zone, start - timedelta(microseconds=1))
        if candidate is None or candidate > now:
            return due
        latest = candidate
    while (candidate := next_run(schedule, zone, latest)) is not None and candidate <= now:
        latest = candidate
    return latest


def resolve_wall_time(wall: datetime, zone: tzinfo) -> datetime:
    """A naive local time as a UTC instant: first occurrence if repeated, the jump if skipped."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    # Skipped by a spring-forward: fold=1 maps before the jump, fold=0 after; find the jump itself.
    low = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    high = int(first.timestamp())
    before = datetime.fromtimestamp(low, zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


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
