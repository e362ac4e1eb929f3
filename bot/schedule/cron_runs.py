"""When a cron schedule runs, as UTC instants: the local clock, daylight saving, catching up.

A zone's clock is not a straight line: in spring it skips an hour, in autumn it
shows an hour twice. The rules follow cron(8), which people read crontab by:
- A fixed-time schedule (no `*` in the minute or hour field, e.g. `30 2 * * *`)
  runs once per local time. A repeated time runs at its first occurrence; a
  skipped one runs at the moment the clocks jump.
- A wildcard schedule (`*` or `*/n` in the minute or hour field, e.g.
  `*/15 * * * *`, `@hourly`) runs "based on the new time immediately":
  whenever the clock shows a matching time, so twice through a repeated hour,
  and with no extra run at the spring jump.

The runs form one sequence whatever point it is read from, so a schedule moved
on from `max(started, due)` after a late run never runs a time again. The one
exception is a new schedule (`first_run`): it starts at the clock as it reads
now, so one set up during the second pass of a repeated hour still has that
hour's later times ahead of it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

from bot.schedule.cron import CronSchedule

_MINUTE = timedelta(minutes=1)


def next_run(schedule: CronSchedule, zone: tzinfo, after: datetime) -> datetime | None:
    """The first run strictly after `after` (aware), in UTC; None if the schedule never runs again."""
    return _search(schedule, zone, after, new=False)


def first_run(schedule: CronSchedule, zone: tzinfo, now: datetime) -> datetime | None:
    """The first run of a schedule set up at `now`: the next matching time the clock will show."""
    return _search(schedule, zone, now, new=True)


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


def occurrences(wall: datetime, zone: tzinfo) -> tuple[datetime, ...]:
    """The UTC instants at which the clock in `zone` shows the naive `wall`: one, two (repeated), none (skipped)."""
    found = {wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)}
    return tuple(sorted(moment for moment in found if moment.astimezone(zone).replace(tzinfo=None) == wall))


def resolve_wall_time(wall: datetime, zone: tzinfo) -> datetime:
    """A naive local time as one UTC instant: its first occurrence if repeated, the jump if skipped."""
    if found := occurrences(wall, zone):
        return found[0]
    # Skipped by a spring-forward: fold=1 maps before the jump, fold=0 after; find the jump itself.
    low = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    high = int(wall.replace(tzinfo=zone, fold=0).timestamp())
    before = datetime.fromtimestamp(low, zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def _search(schedule: CronSchedule, zone: tzinfo, after: datetime, *, new: bool) -> datetime | None:
    """Walk the matching local times after the clock's reading at `after`; the first that runs later wins.

    For a fixed-time schedule the instants come in the same order as the local
    times. A wildcard one also runs the second occurrences of a repeated hour, and
    when `after` lies in that hour's first pass, the ones at local times already
    behind the clock come first: `_replayed` finds those.
    """
    after = after.astimezone(UTC)
    clock = after.astimezone(zone).replace(tzinfo=None)
    replayed = _replayed(schedule, zone, after, clock) if schedule.by_the_clock else None
    start = clock.replace(second=0, microsecond=0) + _MINUTE
    for wall in schedule.walls_from(start):
        moment = _run_at(schedule, zone, wall, after, second_pass=new or schedule.by_the_clock)
        if moment is not None:
            return moment if replayed is None else min(moment, replayed)
    return replayed


def _run_at(
    schedule: CronSchedule, zone: tzinfo, wall: datetime, after: datetime, *, second_pass: bool
) -> datetime | None:
    """When the local time `wall` runs after `after`, or None if it does not (already ran, or skipped)."""
    found = occurrences(wall, zone)
    if not found:
        if schedule.by_the_clock:
            return None
        jump = resolve_wall_time(wall, zone)
        return jump if jump > after else None
    if found[0] > after:
        return found[0]
    if second_pass and len(found) == 2 and found[1] > after:
        return found[1]
    return None


def _replayed(schedule: CronSchedule, zone: tzinfo, after: datetime, clock: datetime) -> datetime | None:
    """If `after` is in the first pass of a repeated stretch, the first matching time the clock shows again."""
    passes = occurrences(clock, zone)
    if len(passes) != 2 or passes[0] != after:
        return None
    for wall in schedule.walls_from(clock - (passes[1] - passes[0])):
        if wall > clock:
            return None
        again = occurrences(wall, zone)
        if len(again) == 2 and again[1] > after:
            return again[1]
    return None
