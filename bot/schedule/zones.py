"""Which time zone applies to a session: the one given, else the asking person's, else BOT_TIMEZONE.

The person's zone comes from the edge (Slack's `users.info`) through an optional
lookup; a lookup that fails or answers nonsense is logged and ignored, because
a reminder in the daemon's zone beats no reminder.
"""

from __future__ import annotations

import logging
from zoneinfo import ZoneInfo

from bot.schedule.timing import parse_zone
from bot.types import TimezoneLookup

log = logging.getLogger(__name__)


class Zones:
    def __init__(self, default: ZoneInfo, lookup: TimezoneLookup | None = None) -> None:
        self.default = default
        self._lookup = lookup

    async def of_session(self, session_key: str) -> ZoneInfo:
        """The zone of the person who asked in this session, else the default."""
        if self._lookup is None:
            return self.default
        try:
            name = await self._lookup(session_key)
        except Exception:
            log.warning("time zone lookup failed for %s; using %s", session_key, self.default.key, exc_info=True)
            return self.default
        if not name:
            return self.default
        try:
            return parse_zone(name)
        except ValueError:
            log.warning("time zone lookup for %s gave %r; using %s", session_key, name, self.default.key)
            return self.default

    async def choose(self, given: str | None, session_key: str) -> ZoneInfo:
        """`given` if set (ValueError when unknown), else the session's zone."""
        if given is not None and given.strip():
            return parse_zone(given)
        return await self.of_session(session_key)
