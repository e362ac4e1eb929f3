"""Time for the agent: waits that wake it, reminders for people, and the HEARTBEAT.md heartbeat.

scheduler.py     the one APScheduler, rebuilt from the store at start; job guard
firing.py        a due row: judge, claim in the store, then deliver (once)
timing.py        pure "when is it due / how late / missed"
cron.py, cron_runs.py   crontab: parse and walk the calendar; runs as instants (DST rules)
wait_tools.py, reminder_tools.py   the five tools the model sees
heartbeat.py     the periodic HEARTBEAT.md check
setup.py         wiring into a core
"""

from bot.schedule.firing import FireReport
from bot.schedule.heartbeat import HEARTBEAT_OK, Heartbeat
from bot.schedule.scheduler import Scheduler
from bot.schedule.setup import build_scheduler

__all__ = ["HEARTBEAT_OK", "FireReport", "Heartbeat", "Scheduler", "build_scheduler"]
