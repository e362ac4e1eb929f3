"""`SlackEdge`: the engine's output, in Slack threads.

Every report of the engine is synchronous; the edge turns it into a queued
operation of the session (posts keep their order) or a scheduled edit (spaced and
coalesced by the `EditScheduler`), and returns at once. It also remembers what the
cancel handlers need: which status message shows which calls, and which user
message started which turn.

Heartbeat sessions have no thread until they say something: their address has
`thread_ts: None`, so the first post goes top-level in the channel, opens the
thread, and is recorded in the store (address and alias) so replies reach the session.
Such a quiet session (its address names a `quiet_reply`) must not open a thread just
to say that all is well, so while it has no thread each turn's operations (status
messages, notices, earlier text) are held in order until the turn ends: dropped if
its answer is the quiet word, else run then, root first.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.calls.models import ToolCall
from bot.slack.edits import EditScheduler
from bot.slack.filters import session_key
from bot.slack.metrics import Metrics
from bot.slack.queues import Operation, SerialQueues
from bot.slack.render import Block, reminder_text, status_message, who
from bot.slack.reply import FIRST_POST_WAIT_S, ReplyStream
from bot.slack.status import StatusBoard, StatusMessage
from bot.store import Store
from bot.types import TurnOutcome

log = logging.getLogger(__name__)

THINKING = "is thinking…"
REMEMBER_REQUESTS = 5_000
REMEMBER_SESSIONS = 10_000
"""Idle sessions whose address stays cached; an evicted one is simply read from the store again."""
# assistant.threads.setStatus errors that mean "this app cannot use it at all": stop trying.
_STATUS_UNAVAILABLE = frozenset({"unknown_method", "missing_scope", "not_allowed_token_type", "method_deprecated"})


@dataclass(slots=True)
class Address:
    """Where a session lives in Slack, as stored in the session's `address`."""

    team: str
    channel: str
    thread_ts: str | None
    requester: str | None  # who started the session: with the turn's requester, who may cancel
    quiet_reply: str | None
    speaker: str | None = None  # who wrote the latest message handed to the engine: who is asking now
    thinking: bool = False

    @classmethod
    def parse(cls, data: dict[str, Any], default_team: str = "") -> Address | None:
        """None for sessions of another edge (or with nowhere to post)."""
        if data.get("edge", "slack") != "slack" or not data.get("channel"):
            return None
        return cls(
            team=str(data.get("team") or default_team),
            channel=str(data["channel"]),
            thread_ts=data.get("thread_ts"),
            requester=data.get("requester"),
            quiet_reply=data.get("quiet_reply"),
            speaker=data.get("speaker"),
        )


@dataclass(slots=True)
class _Session:
    address: Address | None = None
    reply: ReplyStream | None = None
    turn_requester: str | None = None
    held: list[Operation] | None = None  # a quiet turn's operations, until it is known whether it says anything


class SlackEdge:
    """Implements `EngineOutput` for Slack; `attach(store)` once the core is open."""

    def __init__(
        self,
        client: AsyncWebClient,
        edits: EditScheduler,
        *,
        team_id: str = "",
        metrics: Metrics | None = None,
        first_post_wait_s: float = FIRST_POST_WAIT_S,
    ) -> None:
        self._client = client
        self._team_id = team_id
        self._first_post_wait_s = first_post_wait_s
        self._edits = edits
        self._metrics = metrics or Metrics()
        self._store: Store | None = None
        self._queues = SerialQueues()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._requests: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._timezones: dict[str, str | None] = {}
        self._status_available = True
        self.board = StatusBoard(self._edit)

    def attach(self, store: Store) -> None:
        self._store = store

    # -- what the events side tells the edge ------------------------------------------------

    def remember_address(self, key: str, address: dict[str, Any]) -> None:
        """The address the events side just stored, so the first post needs no store round trip."""
        session = self._session(key)
        session.address = session.address or Address.parse(address, self._team_id)

    def remember_speaker(self, key: str, user: str) -> None:
        """The speaker the events side just stored, so a cached address does not go stale."""
        address = self._session(key).address
        if address is not None:
            address.speaker = user

    def note_request(self, key: str, channel: str, ts: str, user: str) -> None:
        """The user message that started the session's current turn (a cancel reaction on it stops the turn)."""
        self._session(key).turn_requester = user
        self._requests[(channel, ts)] = key
        self._requests.move_to_end((channel, ts))
        while len(self._requests) > REMEMBER_REQUESTS:
            self._requests.popitem(last=False)

    def request_session(self, channel: str, ts: str) -> str | None:
        return self._requests.get((channel, ts))

    async def requesters(self, key: str) -> set[str]:
        """Who may cancel in this session as its requester: whoever started it and whoever started this turn."""
        session = self._session(key)
        address = await self._address(key)
        return {user for user in (session.turn_requester, address.requester if address else None) if user}

    async def user_timezone(self, key: str) -> str | None:
        """The asking person's time zone from users.info (cached per user); None when unknown.

        The asking person is the latest speaker (in a shared thread, not necessarily whoever started it).
        """
        user = await self._asker(key)
        if not user:
            return None
        if user not in self._timezones:
            try:
                response = await self._client.users_info(user=user)
                profile = response.get("user") or {}
                self._timezones[user] = profile.get("tz") if isinstance(profile, dict) else None
            except SlackApiError as exc:
                log.warning("users.info %s failed: %s", user, exc.response.get("error"))
                return None
        return self._timezones[user]

    # -- EngineOutput -----------------------------------------------------------------------

    def turn_started(self, session_key: str) -> None:
        self._put(session_key, lambda: self._hold_if_quiet(session_key), holdable=False)
        self._put(session_key, lambda: self._set_thinking(session_key, True))

    def text_delta(self, session_key: str, delta: str) -> None:
        self._reply(session_key).add(delta)

    def text_done(self, session_key: str) -> None:
        session = self._session(session_key)
        if session.reply is not None:
            session.reply.finish()
            session.reply = None

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None:
        message = self.board.start(session_key, calls)
        self._put(session_key, lambda: self._post_status(session_key, message))

    def call_changed(self, call: ToolCall) -> None:
        self.board.changed(call)

    def notice(self, session_key: str, text: str) -> None:
        self._put(session_key, lambda: self._post_line(session_key, text))

    def reminder(self, session_key: str, text: str, requester: str | None = None) -> None:
        """Mentions whoever asked for it (else the session's latest speaker, for rows stored without one).

        Not held with a quiet turn: a reminder is due now, whatever that turn ends up saying.
        """

        async def post() -> None:
            await self.post(session_key, reminder_text(text, requester or await self._asker(session_key)))

        self._put(session_key, post, holdable=False)

    def turn_finished(self, outcome: TurnOutcome) -> None:
        key = outcome.session_key
        self.text_done(key)  # a turn cancelled mid-answer never said text_done: seal what was shown
        if outcome.cancelled_by:
            self.notice(key, f"🛑 Stopped by {who(outcome.cancelled_by)}.")
        self._put(key, lambda: self._set_thinking(key, False))
        self._put(key, lambda: self._release(key, outcome.text), holdable=False)

    # -- posting ----------------------------------------------------------------------------

    async def post(self, key: str, text: str, blocks: list[Block] | None = None) -> tuple[str, str] | None:
        """Post in the session's thread, opening it first for a heartbeat session; (channel, ts) or None.

        Runs inside the session's queue, so a heartbeat thread is opened exactly once.
        """
        address = await self._address(key)
        if address is None:
            log.warning("no Slack address for session %s; dropping a message", key)
            return None
        try:
            response = await self._client.chat_postMessage(
                channel=address.channel,
                thread_ts=address.thread_ts,
                text=text,
                blocks=blocks,
                unfurl_links=False,
                unfurl_media=False,
            )
        except SlackApiError as exc:
            self._metrics.inc("slack_errors_total")
            log.warning("chat.postMessage in %s failed: %s", key, exc.response.get("error"))
            return None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # still failing after the client's retries
            self._metrics.inc("slack_errors_total")
            log.warning("chat.postMessage in %s failed: %r", key, exc)
            return None
        self._metrics.inc("slack_posts_total")
        ts = str(response["ts"])
        address.thinking = False  # Slack clears the status when the bot posts
        if address.thread_ts is None:
            await self._open_thread(key, address, ts)
        return address.channel, ts

    async def close(self, timeout_s: float = 10.0) -> None:
        """Let queued posts finish (the edits they leave behind are flushed by the scheduler's close)."""
        for key, session in list(self._sessions.items()):
            if session.reply is not None:
                self.text_done(key)
        if not await self._queues.drain(timeout_s):
            log.warning("shut down with Slack posts still queued")

    @property
    def busy_sessions(self) -> int:
        return self._queues.busy

    # -- internals --------------------------------------------------------------------------

    def _session(self, key: str) -> _Session:
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session()
            self._trim()
        else:
            self._sessions.move_to_end(key)
        return session

    def _trim(self) -> None:
        """Forget the least recently used sessions beyond the cap, unless an answer is streaming there."""
        for key in list(self._sessions)[: max(0, len(self._sessions) - REMEMBER_SESSIONS)]:
            session = self._sessions[key]
            if session.reply is None and session.held is None:
                del self._sessions[key]

    def _put(self, key: str, operation: Operation, *, holdable: bool = True) -> None:
        """Queue `operation` behind the session's others; when its turn comes during a held quiet turn,
        it is set aside (in order) instead of run."""
        if not holdable:
            self._queues.put(key, operation)
            return

        async def run() -> None:
            held = self._session(key).held
            if held is None:
                await operation()
            else:
                held.append(operation)

        self._queues.put(key, run)

    async def _hold_if_quiet(self, key: str) -> None:
        """Runs first in a turn's queue, so it can wait for the address and still precede the turn's posts."""
        address = await self._address(key)
        if address is not None and address.quiet_reply and address.thread_ts is None:
            self._session(key).held = []

    async def _release(self, key: str, answer: str) -> None:
        """A held quiet turn is over: nothing at all if it ended on the quiet word, else everything, in order."""
        session = self._session(key)
        held, session.held = session.held, None
        if held is None:
            return
        if session.address is not None and answer.strip() == session.address.quiet_reply:
            self.board.abandon(key)
            return
        for operation in held:
            try:
                await operation()
            except Exception:
                log.exception("a held Slack operation for %s failed", key)

    async def _asker(self, key: str) -> str | None:
        """Who is asking in the session now: its latest speaker, else whoever started it."""
        address = await self._address(key)
        return (address.speaker or address.requester) if address else None

    def _reply(self, key: str) -> ReplyStream:
        session = self._session(key)
        if session.reply is None:
            session.reply = ReplyStream(
                post=lambda text, blocks: self.post(key, text, blocks),
                edit=self._edit,
                enqueue=lambda operation: self._put(key, operation),
                quiet=lambda: session.address.quiet_reply if session.address else None,
                first_post_wait_s=self._first_post_wait_s,
            )
        return session.reply

    def _edit(self, channel: str, ts: str, text: str, blocks: list[Block], final: bool) -> None:
        self._edits.update(channel, ts, text=text, blocks=blocks, final=final)

    async def _address(self, key: str) -> Address | None:
        session = self._session(key)
        if session.address is None and self._store is not None:
            record = await self._store.get_session(key)
            session.address = Address.parse(record.address, self._team_id) if record else None
        return session.address

    async def _open_thread(self, key: str, address: Address, ts: str) -> None:
        address.thread_ts = ts
        if self._store is None:
            return
        await self._store.update_address(key, {"thread_ts": ts})
        await self._store.add_alias(session_key(address.team, address.channel, ts), key)

    async def _post_status(self, key: str, message: StatusMessage) -> None:
        await self.board.post(message, lambda text, blocks: self.post(key, text, blocks))
        if message.channel and message.ts and self._store is not None:
            # Remembered so that after a crash the calls it shows can be repainted as orphaned.
            place = f"{message.channel}:{message.ts}"
            await self._store.set_call_display([call.id for call in message.calls], place)

    async def repaint(self, orphans: list[ToolCall]) -> None:
        """At start: show calls a previous process left unfinished as 👻 on the status messages they were on."""
        if not orphans or self._store is None:
            return
        for place, calls in (await self._store.displays_of([call.id for call in orphans])).items():
            channel, _, ts = place.partition(":")
            text, blocks = status_message(calls)
            self._edit(channel, ts, text, blocks, True)

    async def _post_line(self, key: str, text: str) -> None:
        await self.post(key, text)

    async def _set_thinking(self, key: str, on: bool) -> None:
        """Show (or clear) "is thinking…" under the thread; apps without the feature just skip it."""
        address = await self._address(key)
        if address is None or address.thread_ts is None or not self._status_available:
            return
        if not on and not address.thinking:
            return
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=address.channel, thread_ts=address.thread_ts, status=THINKING if on else ""
            )
            address.thinking = on
        except SlackApiError as exc:
            error = exc.response.get("error")
            if error in _STATUS_UNAVAILABLE:
                self._status_available = False
                log.info("assistant.threads.setStatus is not available (%s); not showing 'thinking'", error)
