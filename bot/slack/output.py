"""`SlackEdge`: the engine's output, in Slack threads.

Every report of the engine is synchronous; the edge turns it into a queued
operation of the session (posts keep their order) or a scheduled edit (spaced and
coalesced by the `EditScheduler`), and returns at once. It also remembers what the
cancel handlers need: which status message shows which calls, and which user
message started which turn.

What it knows of each session (its address, who asks there, a heartbeat thread
opened by its first post) is kept in `Sessions`; how a heartbeat turn stays silent
until it has something to say, in `QuietHold`.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.calls.models import ToolCall
from bot.slack.edits import EditScheduler
from bot.slack.metrics import Metrics
from bot.slack.queues import Operation, SerialQueues
from bot.slack.quiet import QuietHold
from bot.slack.render import Block, reminder_text, status_message, who
from bot.slack.reply import FIRST_POST_WAIT_S, ReplyStream
from bot.slack.sessions import Sessions
from bot.slack.status import StatusBoard, StatusMessage
from bot.slack.uploads import ANSWER_FILE, UPLOAD_OVER_CHARS, answer_comment, upload
from bot.store import Store
from bot.types import TurnOutcome
from tools.base import SharedFile

log = logging.getLogger(__name__)

THINKING = "is thinking…"
# assistant.threads.setStatus errors that mean "this app cannot use it at all": stop trying.
_STATUS_UNAVAILABLE = frozenset({"unknown_method", "missing_scope", "not_allowed_token_type", "method_deprecated"})


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
        upload_over_chars: int = UPLOAD_OVER_CHARS,
    ) -> None:
        self._client = client
        self._upload_over_chars = upload_over_chars
        self._first_post_wait_s = first_post_wait_s
        self._edits = edits
        self._metrics = metrics or Metrics()
        self._store: Store | None = None
        self._queues = SerialQueues()
        self._sessions = Sessions(client, team_id=team_id)
        self._status_available = True
        self.board = StatusBoard(self._edit)
        self._quiet = QuietHold(self._sessions, abandon=self.board.abandon)

    def attach(self, store: Store) -> None:
        self._store = store
        self._sessions.attach(store)

    # -- EngineOutput -----------------------------------------------------------------------

    def turn_started(self, session_key: str) -> None:
        self._put(session_key, lambda: self._quiet.hold_if_quiet(session_key), holdable=False)
        self._put(session_key, lambda: self._set_thinking(session_key, True))

    def text_delta(self, session_key: str, delta: str) -> None:
        self._reply(session_key).add(delta)

    def text_done(self, session_key: str) -> None:
        session = self._sessions.get(session_key)
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
            await self.post(session_key, reminder_text(text, requester or await self._sessions.asker(session_key)))

        self._put(session_key, post, holdable=False)

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        async def share() -> None:
            address = await self._sessions.address(session_key)
            if address is not None and address.thread_ts is None:
                await self.post(session_key, f"📎 {file.name}")  # a heartbeat session: this opens its thread
            error = await self._upload(session_key, file.name, file.content, f"📎 {file.name}")
            if error is not None:
                await self._post_line(session_key, f"⚠️ Could not share {file.name} here ({error}).")

        self._put(session_key, share)

    def turn_finished(self, outcome: TurnOutcome) -> None:
        key = outcome.session_key
        self.text_done(key)  # a turn cancelled mid-answer never said text_done: seal what was shown
        if outcome.cancelled_by:
            self.notice(key, f"🛑 Stopped by {who(outcome.cancelled_by)}.")
        self._put(key, lambda: self._set_thinking(key, False))
        self._put(key, lambda: self._quiet.release(key, outcome.text), holdable=False)

    # -- posting ----------------------------------------------------------------------------

    async def post(self, key: str, text: str, blocks: list[Block] | None = None) -> tuple[str, str] | None:
        """Post in the session's thread, opening it first for a heartbeat session; (channel, ts) or None.

        Runs inside the session's queue, so a heartbeat thread is opened exactly once.
        """
        address = await self._sessions.address(key)
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
            await self._sessions.open_thread(key, address, ts)
        return address.channel, ts

    async def repaint(self, orphans: list[ToolCall]) -> None:
        """At start: show calls a previous process left unfinished as 👻 on the status messages they were on."""
        if not orphans or self._store is None:
            return
        for place, calls in (await self._store.displays_of([call.id for call in orphans])).items():
            channel, _, ts = place.partition(":")
            text, blocks = status_message(calls)
            self._edit(channel, ts, text, blocks, True)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Let queued posts finish (the edits they leave behind are flushed by the scheduler's close)."""
        for key in self._sessions.streaming():
            self.text_done(key)
        if not await self._queues.drain(timeout_s):
            log.warning("shut down with Slack posts still queued")

    @property
    def busy_sessions(self) -> int:
        return self._queues.busy

    # -- what the events side tells the edge, and asks it (kept in `Sessions`) -------------------

    def remember_address(self, key: str, address: dict[str, Any]) -> None:
        self._sessions.remember_address(key, address)

    def remember_speaker(self, key: str, user: str) -> None:
        self._sessions.remember_speaker(key, user)

    def note_request(self, key: str, channel: str, ts: str, user: str) -> None:
        self._sessions.note_request(key, channel, ts, user)

    def request_session(self, channel: str, ts: str) -> str | None:
        return self._sessions.request_session(channel, ts)

    async def requesters(self, key: str) -> set[str]:
        return await self._sessions.requesters(key)

    async def user_timezone(self, key: str) -> str | None:
        return await self._sessions.user_timezone(key)

    # -- internals --------------------------------------------------------------------------

    def _put(self, key: str, operation: Operation, *, holdable: bool = True) -> None:
        """Queue `operation` behind the session's others; a holdable one is set aside during a held quiet turn."""
        self._queues.put(key, self._quiet.holdable(key, operation) if holdable else operation)

    def _reply(self, key: str) -> ReplyStream:
        session = self._sessions.get(key)
        if session.reply is None:
            session.reply = ReplyStream(
                post=lambda text, blocks: self.post(key, text, blocks),
                edit=self._edit,
                enqueue=lambda operation: self._put(key, operation),
                quiet=lambda: session.address.quiet_reply if session.address else None,
                first_post_wait_s=self._first_post_wait_s,
                overflow=lambda text, continued: self._upload_answer(key, text, continued),
                overflow_chars=self._upload_over_chars,
            )
        return session.reply

    def _edit(self, channel: str, ts: str, text: str, blocks: list[Block], final: bool) -> None:
        self._edits.update(channel, ts, text=text, blocks=blocks, final=final)

    async def _post_status(self, key: str, message: StatusMessage) -> None:
        await self.board.post(message, lambda text, blocks: self.post(key, text, blocks))
        if message.channel and message.ts and self._store is not None:
            # Remembered so that after a crash the calls it shows can be repainted as orphaned.
            place = f"{message.channel}:{message.ts}"
            await self._store.set_call_display([call.id for call in message.calls], place)

    async def _upload(self, key: str, filename: str, content: bytes | str, comment: str) -> str | None:
        """Into the session's thread; None on success, else why not (a heartbeat session may have none yet)."""
        address = await self._sessions.address(key)
        if address is None or address.thread_ts is None:
            return "no thread to share it in"
        return await upload(
            self._client,
            channel=address.channel,
            thread_ts=address.thread_ts,
            filename=filename,
            content=content,
            comment=comment,
        )

    async def _upload_answer(self, key: str, text: str, continued: bool) -> bool:
        return await self._upload(key, ANSWER_FILE, text, answer_comment(text, continued=continued)) is None

    async def _post_line(self, key: str, text: str) -> None:
        await self.post(key, text)

    async def _set_thinking(self, key: str, on: bool) -> None:
        """Show (or clear) "is thinking…" under the thread; apps without the feature just skip it."""
        address = await self._sessions.address(key)
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
