""" "is thinking…" under a session's thread while the model works (`assistant.threads.setStatus`).

Slack clears the status when the bot posts and after two minutes, so it is set again for
every model call. An app without the feature (no assistant scope, a token of the wrong
type) says so once; from then on it is not asked again.
"""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackResponseError
from bot.slack.sessions import Sessions

log = logging.getLogger(__name__)

THINKING = "is thinking…"
UNAVAILABLE = frozenset({"unknown_method", "missing_scope", "not_allowed_token_type", "method_deprecated"})
"""assistant.threads.setStatus errors that mean "this app cannot use it at all": stop trying."""


class ThinkingStatus:
    def __init__(self, client: AsyncWebClient, sessions: Sessions) -> None:
        self._client = client
        self._sessions = sessions
        self._available = True

    async def show(self, key: str, on: bool) -> None:
        """Show (or clear) "is thinking…" under the thread; apps without the feature just skip it."""
        address = await self._sessions.address(key)
        if address is None or address.thread_ts is None or not self._available:
            return
        if not on and not address.thinking:
            return
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=address.channel, thread_ts=address.thread_ts, status=THINKING if on else ""
            )
            address.thinking = on
        except SlackResponseError as exc:
            if exc.error in UNAVAILABLE:
                self._available = False
                log.info("assistant.threads.setStatus is not available (%s); not showing 'thinking'", exc.error)
