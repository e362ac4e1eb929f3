"""`SlackEdge`: the engine's output, in Slack threads.

Every report of the engine is synchronous; the edge turns it into a queued
operation of the session (posts keep their order) or a scheduled edit (spaced and
coalesced by the `EditScheduler`), and returns at once. It also remembers what the
cancel handlers need: which status message shows which calls, and which user
message started which turn.

What it knows of each session (its address, who asks there, a heartbeat thread
opened by its first post) is kept in `Sessions`; how a heartbeat turn stays silent
until it has something to say, in `QuietHold`.

Posts go through the `PostQueue` (paced per channel). A message's last word (a
notice, a complete answer part, a final status) is owed: written to the store
before it is tried and delivered by the `Outbox` if Slack does not take it now,
after a restart included. A firing's lines (a due reminder, a missed one's notice)
were owed by its claim: the edge tries them at once, in the session's order, and
leaves the rest to the `Outbox` the same way. What is still queued when a turn ends (its answer behind
a slow post, a notice) is handed to the turn's last save (`owed_posts`), which owes it
in the transaction that marks the message answered; the queue then posts it by that
row, as any owed post. Final edits are kept the same way by the `EditScheduler`'s journal.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.calls.summary import arguments_text
from bot.slack.askers import PolicyAskers
from bot.slack.edits import EditScheduler
from bot.slack.metrics import Metrics
from bot.slack.outbox import Outbox, marker, target
from bot.slack.posts import PostFailed, PostQueue, PostRejected
from bot.slack.queues import Operation, SerialQueues
from bot.slack.quiet import QuietHold
from bot.slack.render import (
    Block,
    EmptyMessage,
    arguments_file,
    defuse,
    outcomes_block,
    sendable,
    status_message,
    who,
)
from bot.slack.reply import FIRST_POST_WAIT_S, ReplyStream
from bot.slack.sessions import Address, Sessions
from bot.slack.status import StatusBoard, StatusMessage
from bot.slack.uploads import ANSWER_FILE, UPLOAD_OVER_CHARS, answer_comment, upload
from bot.store import OwedMessage, Store
from bot.toolcall import ToolCall
from bot.types import OwedLine, OwedPost, Speaker, TurnOutcome
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
        posts: PostQueue | None = None,
        first_post_wait_s: float = FIRST_POST_WAIT_S,
        upload_over_chars: int = UPLOAD_OVER_CHARS,
    ) -> None:
        """`posts` should use a client without the SDK's 429 retries (see `build_client`); by default, `client`."""
        self._client = client
        self._posts = posts or PostQueue(client)
        self._outbox: Outbox | None = None
        self._upload_over_chars = upload_over_chars
        self._first_post_wait_s = first_post_wait_s
        self._edits = edits
        self._metrics = metrics or Metrics()
        self._store: Store | None = None
        self._queues = SerialQueues()
        self._sessions = Sessions(client, team_id=team_id)
        self._status_available = True
        self.board = StatusBoard(self._edit, repost=self._repost_status)
        self._quiet = QuietHold(self._sessions, abandon=self.board.abandon)

    def attach(self, store: Store) -> None:
        self._store = store
        self._sessions.attach(store)
        self._outbox = Outbox(store, self._posts, self._client, self._sessions, metrics=self._metrics)

    async def resume(self) -> None:
        """At start: deliver what a previous process owed Slack (posts through the outbox, final edits queued)."""
        if self._outbox is not None:
            self._edits.resume(await self._outbox.start())

    def take_over(self, owed: list[OwedMessage]) -> None:
        """Deliver what a gone replica owed Slack, as if this process had owed it."""
        if self._outbox is not None:
            self._edits.resume(self._outbox.take(owed))

    @property
    def outbox(self) -> Outbox | None:
        return self._outbox

    @property
    def outbox_owed(self) -> int:
        return self._outbox.owed if self._outbox is not None else 0

    # -- EngineOutput -----------------------------------------------------------------------

    def turn_started(self, session_key: str) -> None:
        self._put(session_key, lambda: self._quiet.hold_if_quiet(session_key), holdable=False)

    def model_call_started(self, session_key: str) -> None:
        """Slack clears "is thinking…" when the bot posts and after two minutes: set it again for every call."""
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
        for call in calls:  # arguments too long for the status line, shared once, when the call first asks
            if call.awaiting_approval and (name := arguments_file(call)) is not None:
                self.file_shared(session_key, SharedFile(name, arguments_text(call).encode(), "text/plain"))

    def call_changed(self, call: ToolCall) -> None:
        if not self.board.changed(call) and call.is_final and call.approvers:
            # Asked for before a restart (or on a gone replica): its message was posted by another process.
            self._put(call.session_key, functools.partial(self.repaint, [call]), holdable=False)

    def notice(self, session_key: str, text: str) -> None:
        """The engine's line may quote the model or a tool (an error message): its mentions are made inert."""
        self._notice(session_key, defuse(text))

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        """Tried at once, behind the session's other posts but not held with a quiet turn (a reminder is
        due now, whatever that turn ends up saying); what does not land is the outbox's, as any owed post."""
        for key in dict.fromkeys(line.session_key for _, line in lines):
            mine = [(line_id, line) for line_id, line in lines if line.session_key == key]
            self._put(key, functools.partial(self._send_lines, key, mine), holdable=False)
        return False

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        name = defuse(file.name)  # the tool (or the model) chose it: its mentions are made inert

        async def share() -> None:
            address = await self._sessions.address(session_key)
            if address is not None and address.thread_ts is None:
                await self.post(session_key, f"📎 {name}")  # a heartbeat session: this opens its thread
            error = await self._upload(session_key, file.name, file.content, f"📎 {name}")
            if error is not None:
                await self._post_line(session_key, f"⚠️ Could not share {name} here ({error}).")

        self._put(session_key, share)

    def owed_posts(self, session_key: str) -> list[OwedPost]:
        """The session's answer parts and notices still waiting in its queue, handed over to be owed.

        Not in a quiet session (its answer may yet come to nothing), nor before the session has an address
        and a thread (its first post opens it): there the queue posts, and owes, them itself."""
        state = self._sessions.get(session_key)
        address = state.address
        if address is not None and address.quiet_reply is not None:
            state.unsent.clear()
        if self._outbox is None or address is None or address.thread_ts is None:
            return []
        posts = []
        for unsent in state.unsent:
            for text, blocks in unsent.owe_rest():
                try:
                    text, blocks = sendable(text, blocks)
                except EmptyMessage:
                    continue
                posts.append(OwedPost(session_key, address.channel, address.thread_ts, text, blocks))
        state.unsent[:] = [unsent for unsent in state.unsent if not unsent.finished_posting()]
        state.handed = posts
        return posts

    def turn_finished(self, outcome: TurnOutcome) -> None:
        key = outcome.session_key
        state = self._sessions.get(key)
        handed, state.handed = state.handed, []
        if outcome.owed_posts:
            # Behind what the queue holds before them, ahead of anything posted later: the order is kept.
            owed: Operation
            if len(handed) == len(outcome.owed_posts):
                owed = functools.partial(self._send_owed, key, list(zip(outcome.owed_posts, handed, strict=True)))
            else:  # this edge forgot what it handed over (its state was evicted): the outbox reads the store
                owed = functools.partial(self._hand_over, key, outcome.owed_posts)
            self._put(key, owed, holdable=False)
        self.text_done(key)  # a turn cancelled mid-answer never said text_done: seal what was shown
        if outcome.cancelled_by:
            self._notice(key, f"🛑 Stopped by {who(outcome.cancelled_by)}.")
        self._put(key, lambda: self._set_thinking(key, False))
        self._put(key, lambda: self._quiet.release(key, outcome.text), holdable=False)

    # -- posting ----------------------------------------------------------------------------

    async def post(
        self,
        key: str,
        text: str,
        blocks: list[Block] | None = None,
        *,
        owed: bool = False,
    ) -> tuple[str, str] | None:
        """Post in the session's thread, opening it first for a heartbeat session; (channel, ts), or None.

        `owed`: the message's last word, kept in the store until Slack has it (None then means the outbox
        delivers it). A message not owed that does not land is left to its caller. While the session has owed
        posts waiting, later ones wait behind them, so they keep their order. Runs inside the session's queue,
        so a heartbeat thread is opened exactly once.
        """
        address = await self._sessions.address(key)
        if address is None:
            log.warning("no Slack address for session %s; dropping a message", key)
            return None
        try:
            text, blocks = sendable(text, blocks)
        except EmptyMessage:
            log.error("not posting an empty message in %s", key)
            return None
        post_id: int | None = None
        if owed and self._outbox is not None:
            post_id = await self._outbox.owe(key, address.channel, address.thread_ts, text, blocks)
        return await self._send(key, address, text, blocks, post_id)

    async def _send(
        self, key: str, address: Address, text: str, blocks: list[Block] | None, post_id: int | None
    ) -> tuple[str, str] | None:
        """Post now, unless the session's owed posts wait in the outbox; an owed one (`post_id`) that does not
        land is the outbox's to deliver."""
        outbox = self._outbox
        if outbox is not None and outbox.backlogged(key):
            if post_id is not None:
                outbox.handed_over(key, post_id, tried=False)
            return None
        # An owed post being tried here is not the outbox's to take up (a start reads what is owed while the
        # scheduler may already be firing): it becomes the outbox's only when it is handed over.
        with outbox.sending(post_id) if outbox is not None and post_id is not None else contextlib.nullcontext():
            try:
                ts = await self._posts.post(
                    channel=address.channel,
                    thread_ts=address.thread_ts,
                    text=text,
                    blocks=blocks,
                    metadata=marker(post_id) if post_id is not None else None,
                )
            except PostRejected as exc:
                self._metrics.inc("slack_errors_total")
                log.error("chat.postMessage in %s refused (%s); not posted", key, exc.error)
                if post_id is not None and outbox is not None:
                    await outbox.settle(post_id)
                return None
            except PostFailed as exc:
                self._metrics.inc("slack_errors_total")
                if post_id is not None and outbox is not None:
                    log.warning("chat.postMessage in %s: %s; the outbox will deliver it", key, exc)
                    outbox.handed_over(key, post_id, tried=True)
                else:
                    log.warning("chat.postMessage in %s: %s; its final state will be posted instead", key, exc)
                return None
            if post_id is not None and outbox is not None:
                await outbox.settle(post_id)
        self._metrics.inc("slack_posts_total")
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
            # A new process knows nothing of the ids shown: a revision of its own, unlike any number before.
            text, blocks = status_message(calls, revision=f"r{time.time_ns()}")
            self._edit(channel, ts, text, blocks, True)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Let queued posts finish (the edits they leave behind are flushed by the scheduler's close)."""
        for key in self._sessions.streaming():
            self.text_done(key)
        if not await self._queues.drain(timeout_s):
            log.warning("shut down with Slack posts still queued")
        if self._outbox is not None:
            await self._outbox.idle(timeout_s / 2)
            await self._outbox.close()

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

    async def say(self, channel: str, thread_ts: str, text: str, blocks: list[Block] | None = None) -> str | None:
        """A line in a thread that is no session's (a refusal, a question to confirm), paced like every post;
        its ts, or None when it did not land (it is not owed: the person may simply ask again)."""
        try:
            return await self._posts.post(channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)
        except (PostFailed, PostRejected) as exc:
            log.warning("could not post in %s: %s", channel, exc)
            return None

    async def requesters(self, key: str, *, from_store: bool = False) -> set[str]:
        return await self._sessions.requesters(key, from_store=from_store)

    async def speaker(self, user: str) -> Speaker:
        return await self._sessions.speaker(user)

    async def user_timezone(self, key: str) -> str | None:
        return await self._sessions.user_timezone(key)

    def askers(self, *, uses_groups: bool) -> PolicyAskers:
        """Who the tool policy sees asking in this edge's sessions."""
        return PolicyAskers(self._client, self._sessions, uses_groups=uses_groups)

    # -- internals --------------------------------------------------------------------------

    def _put(self, key: str, operation: Operation, *, holdable: bool = True) -> None:
        """Queue `operation` behind the session's others; a holdable one is set aside during a held quiet turn."""
        self._queues.put(key, self._quiet.holdable(key, operation) if holdable else operation)

    def _reply(self, key: str) -> ReplyStream:
        session = self._sessions.get(key)
        if session.reply is None:
            session.reply = reply = ReplyStream(
                post=lambda text, blocks, owed: self.post(key, text, blocks, owed=owed),
                edit=self._edit,
                enqueue=lambda operation: self._put(key, operation),
                quiet=lambda: session.address.quiet_reply if session.address else None,
                outcomes=lambda: self._outcomes(key),
                first_post_wait_s=self._first_post_wait_s,
                overflow=lambda text, continued: self._upload_answer(key, text, continued),
                overflow_chars=self._upload_over_chars,
            )
            session.unsent.append(reply)
        return session.reply

    def _edit(self, channel: str, ts: str, text: str, blocks: list[Block], final: bool) -> None:
        self._edits.update(channel, ts, text=text, blocks=blocks, final=final)

    def _outcomes(self, key: str) -> Block | None:
        calls = self.board.awaiting_final(key, self._edits.owes_final)
        return outcomes_block(calls) if calls else None

    def _repost_status(self, message: StatusMessage) -> None:
        self._put(message.session_key, lambda: self._post_status(message.session_key, message))

    async def _post_status(self, key: str, message: StatusMessage) -> None:
        await self.board.post(message, lambda text, blocks, owed: self.post(key, text, blocks, owed=owed))
        if message.channel and message.ts and self._store is not None:
            # Remembered so that after a crash the calls it shows can be repainted as orphaned.
            place = f"{message.channel}:{message.ts}"
            await self._store.set_call_display([call.id for call in message.calls], place)

    def _notice(self, key: str, text: str) -> None:
        line = _Line(text)
        self._sessions.get(key).unsent.append(line)

        async def post() -> None:
            if line.take():
                await self._post_line(key, text)

        self._put(key, post)

    async def _send_owed(self, key: str, owed: list[tuple[int, OwedPost]]) -> None:
        """Posts a turn's last save owed (`owed_posts`), as the queue would have posted them had it owed them."""
        address = await self._sessions.address(key)
        for post_id, post in owed:
            if address is None:
                await self._hand_over(key, [post_id])
            else:
                await self._send(key, address, post.text, post.blocks, post_id)

    async def _send_lines(self, key: str, lines: list[tuple[int, OwedLine]]) -> None:
        """A firing's lines, rendered for the session as the outbox renders them, posted as any owed post."""
        for line_id, line in lines:
            message = OwedMessage(line_id, key, None, None, None, line.text, None, line)
            post = await target(self._sessions, message)
            if post is None or post.address is None:
                log.error("a line owed to %s can never be posted in Slack; dropping it", key)
                if self._outbox is not None:
                    await self._outbox.settle(line_id)
                continue
            await self._send(key, post.address, post.text, post.blocks, line_id)

    async def _hand_over(self, key: str, post_ids: list[int]) -> None:
        """Posts a turn's last save owed (`owed_posts`): the outbox delivers them, once."""
        if self._outbox is not None:
            for post_id in post_ids:
                self._outbox.handed_over(key, post_id, tried=False)

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
        await self.post(key, text, owed=True)

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


class _Line:
    """A notice waiting in its session's queue: posted when the queue reaches it, unless handed over first."""

    __slots__ = ("_taken", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._taken = False

    def take(self) -> bool:
        """Whether the queue is to post it (it was not handed over)."""
        taken, self._taken = self._taken, True
        return not taken

    def owe_rest(self) -> list[tuple[str, list[Block] | None]]:
        return [(self._text, None)] if self.take() else []

    def finished_posting(self) -> bool:
        return self._taken
