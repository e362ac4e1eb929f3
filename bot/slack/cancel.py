"""Cancelling from Slack: a reaction on a status message or on the request, and the Cancel button.

A cancel reaction (`BOT_CANCEL_REACTIONS`) on a status message cancels the calls it
still shows as running; on the user message that started a turn it cancels the
whole turn. The button cancels its one call. Slack's own Stop button of an agent session
(`agent_session_stopped`, bot/slack/agent_session.py) stops the thread's turn and calls like a
`stop` reply, and its status is then sent again. Only the session's requester (or the
current turn's) and users listed in `BOT_ALLOWED_USERS` may cancel; anyone else is
ignored (a button press gets a private explanation). The status message then shows
who cancelled, through the normal call_changed path.

In a cluster the status message, the turn or the call may live on another replica,
so every cancel is `relay`ed through the coordination seam: written to the database and rung to every replica
(this one too) before Slack gets its ack, and the replica that holds the message,
the turn or the call checks the permission (from the database) and cancels, as if
Slack had sent it there. A turn's cancel reaches every replica, since its calls
may run on several.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.engine import Engine
from bot.calls.registry import CallRegistry
from bot.config import Settings
from bot.coordination import Coordination
from bot.errors import SlackResponseError
from bot.slack.admission import Admission, team_of
from bot.slack.agent_session import AgentSessions
from bot.slack.filters import may_cancel, session_key
from bot.slack.sessions import Sessions
from bot.slack.status import StatusBoard
from bot.slack.turns import AgentTurns
from bot.store import Store
from bot.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

NOT_YOURS = "Only the person who asked (or an allowed user) can cancel this."
NOT_ADMITTED = "Sorry, I'm not set up to take requests from you. Please ask the people who run me for access."


class Canceller:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        engine: Engine,
        registry: CallRegistry,
        board: StatusBoard,
        turns: AgentTurns,
        sessions: Sessions,
        settings: Settings,
        metrics: Metrics,
        coordination: Coordination,
        admission: Admission | None = None,
        store: Store | None = None,
        agent_sessions: AgentSessions | None = None,
    ) -> None:
        """A cancel is handed to `coordination` first, which relays it to every process when the work may
        be another's (its relayed copy comes back `forwarded`); alone, it is acted on here. `store` finds
        the session of a thread Slack names (a Stop); `agent_sessions` is told when one stops."""
        self._coordination = coordination
        self._store = store
        self._agent_sessions = agent_sessions
        self._admission = admission or Admission.of(settings)
        self._client = client
        self._engine = engine
        self._registry = registry
        self._board = board
        self._turns = turns
        self._sessions = sessions
        self._settings = settings
        self._metrics = metrics

    def wants(self, body: dict[str, Any]) -> bool:
        """Cheap check done before spawning: is this a cancel reaction on a message?"""
        event = body.get("event") or {}
        item = event.get("item") or {}
        return event.get("reaction") in self._settings.bot_cancel_reactions and item.get("type") == "message"

    async def on_reaction(self, body: dict[str, Any], *, forwarded: bool = False) -> None:
        if not forwarded and await self._coordination.relay("reaction", body):
            return  # durable first; every replica (this one too) looks at it
        event = body.get("event") or {}
        user, item = str(event.get("user") or ""), event.get("item") or {}
        channel, ts = str(item.get("channel") or ""), str(item.get("ts") or "")
        if not self._admission.admits(user, team=team_of(event), channel=channel):
            log.info("ignoring a reaction by %s: not someone the bot answers", user)
            return
        status = self._board.find(channel, ts) or self._turns.at(channel, ts)
        if status is not None:
            if status.open_calls and await self._permitted(user, status.session_key):
                self._metrics.inc("cancels_total")
                await self._registry.cancel_many([call.id for call in status.open_calls], by=user)
            return
        session_key = self._sessions.request_session(channel, ts)
        if session_key is not None and await self._permitted(user, session_key):
            self._metrics.inc("cancels_total")
            await self.cancel_turn(session_key, by=user)

    async def on_button(self, body: dict[str, Any], *, forwarded: bool = False) -> None:
        if not forwarded and await self._coordination.relay("button", body):
            return  # the replica running the call decides
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

    async def on_session_stopped(self, body: dict[str, Any]) -> None:
        """`agent_session_stopped`: someone pressed Stop in a thread; its turn and calls stop wherever they run.

        Slack does not move the session off `processing` by itself: its status is sent again here, and by
        whichever replica ends the turn."""
        event = body.get("event") or {}
        user, channel = str(event.get("user") or ""), str(event.get("channel") or "")
        thread_ts = str(event.get("thread_ts") or "")
        team = str(body.get("team_id") or event.get("team") or "")
        if not user or not channel or not thread_ts:
            return
        if not self._admission.admits(user, team=team_of(event) or team, channel=channel):
            log.info("ignoring a Stop by %s: not someone the bot answers", user)
            return
        thread = session_key(team, channel, thread_ts)
        key = await self._store.resolve(thread) if self._store is not None else thread
        if key is None:
            return
        if not await self._permitted(user, key):
            await _ephemeral(self._client, channel, user, NOT_YOURS, thread_ts)
            return
        self._metrics.inc("cancels_total")
        await self.cancel_turn(key, by=user)
        if self._agent_sessions is not None:
            self._agent_sessions.settle(key)

    async def cancel_turn(self, session_key: str, *, by: str) -> None:
        """Stop the session's turn and calls, wherever they run; the caller checked the permission."""
        if not await self._coordination.relay("cancel", {"session_key": session_key, "by": by}):
            await self._engine.cancel_turn(session_key, by=by)

    async def on_forwarded_cancel(self, body: dict[str, Any]) -> None:
        """Another replica (or this one) asked every replica to stop a session's turn and calls."""
        await self._engine.cancel_turn(str(body["session_key"]), by=str(body["by"]))

    async def _permitted(self, user: str, session_key: str) -> bool:
        requesters = await self._sessions.requesters(session_key)
        ok = may_cancel(user, requesters=requesters, allowed_users=self._settings.bot_allowed_users)
        if not ok:
            log.info("ignoring a cancel by %s in %s: not the requester nor an allowed user", user, session_key)
        return ok


async def explain(client: AsyncWebClient, body: dict[str, Any], user: str, text: str) -> None:
    """A private answer to whoever pressed a button, in the thread it is in."""
    container = body.get("container") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    if channel:
        await _ephemeral(client, channel, user, text, container.get("thread_ts"))


async def _ephemeral(client: AsyncWebClient, channel: str, user: str, text: str, thread_ts: str | None) -> None:
    try:
        await client.chat_postEphemeral(channel=channel, user=user, text=text, thread_ts=thread_ts)
    except SlackResponseError as exc:
        log.info("chat.postEphemeral failed: %s", exc.error)
