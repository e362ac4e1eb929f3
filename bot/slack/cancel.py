"""Cancelling from Slack: a reaction on a status message or on the request, and the Cancel button.

A cancel reaction (`BOT_CANCEL_REACTIONS`) on a status message cancels the calls it
still shows as running; on the user message that started a turn it cancels the
whole turn. The button cancels its one call. Only the session's requester (or the
current turn's) and users listed in `BOT_ALLOWED_USERS` may cancel; anyone else is
ignored (a button press gets a private explanation). The status message then shows
who cancelled, through the normal call_changed path.

In a cluster the status message, the turn or the call may live on another replica,
so every cancel is `forward`ed: written to the database and rung to every replica
(this one too) before Slack gets its ack, and the replica that holds the message,
the turn or the call checks the permission (from the database) and cancels, as if
Slack had sent it there. A turn's cancel reaches every replica, since its calls
may run on several.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.engine import Engine
from bot.calls.registry import CallRegistry
from bot.config import Settings
from bot.errors import SlackResponseError
from bot.slack.admission import Admission, team_of
from bot.slack.filters import may_cancel
from bot.slack.output import SlackEdge
from bot.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

NOT_YOURS = "Only the person who asked (or an allowed user) can cancel this."
NOT_ADMITTED = "Sorry, I'm not set up to take requests from you. Please ask the people who run me for access."

Forward = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Hands a cancel to every replica of a cluster: a kind (`reaction`, `button`, `cancel`) and its body."""


class Canceller:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        engine: Engine,
        registry: CallRegistry,
        edge: SlackEdge,
        settings: Settings,
        metrics: Metrics,
        forward: Forward | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._forward = forward
        self._admission = admission or Admission.of(settings)
        self._client = client
        self._engine = engine
        self._registry = registry
        self._edge = edge
        self._settings = settings
        self._metrics = metrics

    def wants(self, body: dict[str, Any]) -> bool:
        """Cheap check done before spawning: is this a cancel reaction on a message?"""
        event = body.get("event") or {}
        item = event.get("item") or {}
        return event.get("reaction") in self._settings.bot_cancel_reactions and item.get("type") == "message"

    async def on_reaction(self, body: dict[str, Any], *, forwarded: bool = False) -> None:
        if self._forward is not None and not forwarded:
            await self._forward("reaction", body)  # durable first; every replica (this one too) looks at it
            return
        event = body.get("event") or {}
        user, item = str(event.get("user") or ""), event.get("item") or {}
        channel, ts = str(item.get("channel") or ""), str(item.get("ts") or "")
        if not self._admission.admits(user, team=team_of(event), channel=channel):
            log.info("ignoring a reaction by %s: not someone the bot answers", user)
            return
        status = self._edge.board.find(channel, ts) or self._edge.turn_at(channel, ts)
        if status is not None:
            if status.open_calls and await self._permitted(user, status.session_key):
                self._metrics.inc("cancels_total")
                await self._registry.cancel_many([call.id for call in status.open_calls], by=user)
            return
        session_key = self._edge.request_session(channel, ts)
        if session_key is not None and await self._permitted(user, session_key):
            self._metrics.inc("cancels_total")
            await self.cancel_turn(session_key, by=user)

    async def on_button(self, body: dict[str, Any], *, forwarded: bool = False) -> None:
        if self._forward is not None and not forwarded:
            await self._forward("button", body)  # the replica running the call decides
            return
        person = body.get("user") or {}
        user = str(person.get("id") or "")
        if not self._admission.admits(user, team=str(person.get("team_id") or "")):
            await explain(self._client, body, user, NOT_ADMITTED)
            return
        for action in body.get("actions") or []:
            call_id = str(action.get("value") or "")
            call = await self._registry.find(call_id) if call_id else None
            if call is None or call.is_final or (forwarded and self._registry.get(call_id) is None):
                continue
            if not await self._permitted(user, call.session_key):
                await explain(self._client, body, user, NOT_YOURS)
                continue
            self._metrics.inc("cancels_total")
            await self._registry.cancel(call_id, session_key=call.session_key, by=user)

    async def cancel_turn(self, session_key: str, *, by: str) -> None:
        """Stop the session's turn and calls, wherever they run; the caller checked the permission."""
        if self._forward is None:
            await self._engine.cancel_turn(session_key, by=by)
        else:
            await self._forward("cancel", {"session_key": session_key, "by": by})

    async def on_forwarded_cancel(self, body: dict[str, Any]) -> None:
        """Another replica (or this one) asked every replica to stop a session's turn and calls."""
        await self._engine.cancel_turn(str(body["session_key"]), by=str(body["by"]))

    async def _permitted(self, user: str, session_key: str) -> bool:
        requesters = await self._edge.requesters(session_key, from_store=self._forward is not None)
        ok = may_cancel(user, requesters=requesters, allowed_users=self._settings.bot_allowed_users)
        if not ok:
            log.info("ignoring a cancel by %s in %s: not the requester nor an allowed user", user, session_key)
        return ok


async def explain(client: AsyncWebClient, body: dict[str, Any], user: str, text: str) -> None:
    """A private answer to whoever pressed a button, in the thread it is in."""
    container = body.get("container") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    if not channel:
        return
    try:
        await client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=container.get("thread_ts"))
    except SlackResponseError as exc:
        log.info("chat.postEphemeral failed: %s", exc.error)
