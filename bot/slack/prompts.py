"""Agent threads in a DM: suggested prompts when someone opens one, a title once it has a request.

Slack's Agent View (`features.agent_view`) says a person opened the app's DM with
`app_home_opened` on the `messages` tab; the prompts then go out without a `thread_ts`
(an agent app that passes one has the call fail silently, Slack's docs warn). An app still
declared with the older `assistant_view` gets `assistant_thread_started` instead, with the
thread's ts, and that is honoured too. A DM's top-level message is a new thread: it gets its
first request, on one line and shortened, as its title (`assistant.threads.setTitle`).

Both methods are Tier 4 (100+ a minute) and need `assistant:write`. An app Slack does not
take for an agent answers `not_authorized`, `missing_scope` or the like: that is said once,
in one line, and the bot goes on without prompts or titles (neither is tried again).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.calls.summary import one_line
from bot.config import SuggestedPrompt
from bot.errors import SlackResponseError
from bot.slack.admission import Admission, team_of
from bot.slack.filters import classify

log = logging.getLogger(__name__)

PROMPTS_TITLE = "Try one of these"
TITLE_CHARS = 80
REFUSALS = frozenset(
    {"not_authorized", "not_allowed_token_type", "missing_scope", "no_permission", "access_denied", "not_enabled"}
)
"""What Slack answers an app it does not take for an agent: nothing to retry, only to say once."""
_TITLED_KEPT = 4096


class AgentThreads:
    """Offers `BOT_SUGGESTED_PROMPTS` in new agent threads and titles them from their first request."""

    def __init__(
        self,
        *,
        client: AsyncWebClient,
        prompts: tuple[SuggestedPrompt, ...],
        bot_user_id: str,
        admission: Admission,
    ) -> None:
        self._client = client
        self._prompts = [{"title": prompt.title, "message": prompt.message} for prompt in prompts]
        self._bot_user_id = bot_user_id
        self._admission = admission
        self._refused = False
        """Slack said the app is no agent: both methods need the same declaration, so neither is tried again."""
        self._titled: OrderedDict[tuple[str, str], None] = OrderedDict()
        """Threads titled lately: a redelivered or twinned event costs no second call."""

    async def dm_opened(self, body: dict[str, Any]) -> None:
        """`app_home_opened` on the messages tab: prompts for the thread the person is about to start."""
        event = body.get("event") or {}
        if event.get("tab") == "messages" and self._admitted(str(event.get("user") or ""), body):
            await self._offer(str(event.get("channel") or ""), None)

    async def thread_started(self, body: dict[str, Any]) -> None:
        """`assistant_thread_started` (an app declared with `assistant_view`): prompts for that thread."""
        thread = (body.get("event") or {}).get("assistant_thread") or {}
        if self._admitted(str(thread.get("user_id") or ""), body):
            await self._offer(str(thread.get("channel_id") or ""), str(thread.get("thread_ts") or "") or None)

    async def message(self, body: dict[str, Any]) -> None:
        """A DM's top-level message from someone the bot answers starts a thread: title it from the request."""
        incoming = classify(body, self._bot_user_id)
        if incoming is None or not incoming.direct or incoming.in_thread or not incoming.text.strip():
            return
        if not self._admission.admits(incoming.user, team=incoming.user_team, channel=incoming.channel):
            return
        thread = (incoming.channel, incoming.ts)
        if thread in self._titled:
            return
        self._titled[thread] = None
        while len(self._titled) > _TITLED_KEPT:
            self._titled.popitem(last=False)
        title = one_line(incoming.text, TITLE_CHARS)
        await self._call(
            "assistant.threads.setTitle",
            lambda: self._client.assistant_threads_setTitle(
                channel_id=incoming.channel, thread_ts=incoming.ts, title=title
            ),
        )

    def _admitted(self, user: str, body: dict[str, Any]) -> bool:
        team = str(body.get("team_id") or team_of(body.get("event") or {}))
        return bool(user) and self._admission.admits(user, team=team)

    async def _offer(self, channel: str, thread_ts: str | None) -> None:
        if not channel or not self._prompts:
            return
        await self._call(
            "assistant.threads.setSuggestedPrompts",
            lambda: self._client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, prompts=self._prompts, title=PROMPTS_TITLE
            ),
        )

    async def _call(self, method: str, send: Callable[[], Awaitable[object]]) -> None:
        if self._refused:
            return
        try:
            await send()
        except SlackResponseError as exc:
            error = str(exc.error)
            if error in REFUSALS:
                self._refused = True
                log.warning(
                    "Slack refuses %s (%s): the app is not declared an agent (features.agent_view and "
                    "assistant:write in deploy/slack-manifest.yml); going on without it",
                    method,
                    error,
                )
            else:
                log.info("%s failed: %s", method, error)
