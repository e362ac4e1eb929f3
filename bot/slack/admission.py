"""Who the bot answers: one check that every path (mentions, replies, reactions, buttons, thread
history) asks, so no path can admit someone another would refuse.

A person is admitted when the allow-lists (`BOT_ALLOWED_USERS`, `BOT_ALLOWED_CHANNELS`; empty lets
everyone in) name them and the place, and their organisation is the bot's own or one
`BOT_ALLOWED_TEAMS` lists: in a Slack Connect channel, people from other organisations can write
in the bot's threads, and they are not the people who run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.config import Settings


@dataclass(frozen=True, slots=True)
class Admission:
    home_team: str
    """The bot's own team (from auth.test); empty when unknown, and then teams are not told apart."""
    users: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Settings, home_team: str = "") -> Admission:
        return cls(
            home_team=home_team,
            users=settings.bot_allowed_users,
            channels=settings.bot_allowed_channels,
            teams=settings.bot_allowed_teams,
        )

    def admits(self, user: str, *, team: str, channel: str | None = None) -> bool:
        """Whether `user` of `team` (empty: not said, taken as the bot's own) may talk to the bot in `channel`
        (None: wherever the check does not depend on the place, as for a button on the bot's own message)."""
        if self.users and user not in self.users:
            return False
        if channel is not None and self.channels and channel not in self.channels:
            return False
        return not team or not self.home_team or team == self.home_team or team in self.teams

    def admits_message(self, message: Mapping[str, Any], channel: str) -> bool:
        """An earlier message of a thread, as conversations.replies returns it."""
        return self.admits(str(message.get("user") or ""), team=team_of(message), channel=channel)


def team_of(event: Mapping[str, Any]) -> str:
    """The author's team as an event or a stored message says it: `user_team`, else `team`."""
    return str(event.get("user_team") or event.get("team") or "")
