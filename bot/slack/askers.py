"""Who the tool policy sees asking in a Slack session: the person, the channel, and their user groups.

A turn the agent started on its own (a wait, a reminder, the heartbeat) has no requester: it
acts for whoever started the session. User groups come from `usergroups.list` (scope
`usergroups:read`), asked only when a policy rule names groups and kept for a few minutes;
when Slack will not say, the person is in no group, so a group rule never grants by mistake.
"""

from __future__ import annotations

import logging
import time

from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackResponseError
from bot.policy import Asker
from bot.slack.sessions import Sessions

log = logging.getLogger(__name__)

GROUPS_FRESH_S = 300.0


class PolicyAskers:
    def __init__(self, client: AsyncWebClient, sessions: Sessions, *, uses_groups: bool) -> None:
        self._client = client
        self._sessions = sessions
        self._uses_groups = uses_groups
        self._members: dict[str, frozenset[str]] = {}
        self._fetched_at = float("-inf")

    async def __call__(self, session_key: str, requester: str | None) -> Asker:
        address = await self._sessions.address(session_key)
        user = requester or (address.requester if address else None)
        groups = await self._groups_of(user) if self._uses_groups and user else frozenset()
        return Asker(user, address.channel if address else None, groups)

    async def _groups_of(self, user: str) -> frozenset[str]:
        if time.monotonic() - self._fetched_at > GROUPS_FRESH_S:
            try:
                response = await self._client.usergroups_list(include_users=True)
            except SlackResponseError as exc:
                log.warning("usergroups.list failed (%s): group rules of the tool policy match nobody", exc.error)
            else:
                members: dict[str, set[str]] = {}
                for group in response.get("usergroups") or []:
                    for member in group.get("users") or []:
                        members.setdefault(str(member), set()).add(str(group.get("id")))
                self._members = {member: frozenset(ids) for member, ids in members.items()}
            self._fetched_at = time.monotonic()
        return self._members.get(user, frozenset())
