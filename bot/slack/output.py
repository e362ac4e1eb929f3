"""`SlackEdge`: the engine's output, in Slack threads.

Every report of the engine is synchronous; the edge turns it into a queued
operation of the session (posts keep their order) or a scheduled edit (spaced and
coalesced by the `EditScheduler`), and returns at once. It also remembers what the
cancel handlers need: which status message shows which calls, and which user
message started which turn.

What it knows of each session (its address, who asks there, a heartbeat thread
opened by its first post) is kept in `Sessions`; how a heartbeat turn stays silent
until it has something to say, in `QuietHold`; how a post reaches the thread, paced
and owed until Slack has it, in `ThreadPosts`; one streamed answer, in `ReplyStream`.
In agent mode (`surface`) a thread's turn is instead one streamed message with a task card
per call, in `TurnMessage` (bot/slack/turn_stream.py); a heartbeat's turns, and calls that
wait for a person's button, keep the classic messages. In classic mode the model's words
before a batch of calls fold into the batch's status message (`_words_before`): a tool turn posts
twice (the status message and the answer), however late the edge hears of the calls.

What is still queued when a turn ends (its answer behind a slow post, a notice) is
handed to the turn's last save (`owed_posts`), which owes it in the transaction that
marks the message answered; the queue then posts it by that row, as any owed post.
A firing's lines (a due reminder, a missed one's notice) were owed by its claim: the
edge tries them at once, in the session's order, and leaves the rest to the `Outbox`.
Final edits are kept the same way by the `EditScheduler`'s journal.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from slack_sdk.web.async_client import AsyncWebClient

from bot.calls.summary import arguments_text
from bot.slack.agent_session import AgentSessions
from bot.slack.edits import EditScheduler
from bot.slack.feedback import feedback_block
from bot.slack.filters import SESSION_PREFIX
from bot.slack.posts import PostQueue, Priority
from bot.slack.queues import Operation, SerialQueues
from bot.slack.quiet import QuietHold
from bot.slack.render import (
    Block,
    Edit,
    EmptyMessage,
    arguments_file,
    defuse,
    outcomes_block,
    sendable,
    status_message,
    who,
)
from bot.slack.reply import FIRST_POST_WAIT_S, ReplyStream
from bot.slack.sessions import Sessions, SessionState
from bot.slack.status import StatusBoard, StatusMessage
from bot.slack.thinking import ThinkingStatus
from bot.slack.threads import ThreadPosts
from bot.slack.turn_stream import StreamBudget
from bot.slack.turns import AgentTurns
from bot.slack.uploads import ANSWER_FILE, UPLOAD_OVER_CHARS, answer_comment
from bot.store import OwedMessage, Store
from bot.telemetry.metrics import Metrics
from bot.telemetry.tracing import Tracing
from bot.toolcall import CallStatus, ToolCall
from bot.types import OwedLine, OwedPost, TurnOutcome
from tools.base import SharedFile

log = logging.getLogger(__name__)

AGENT_STATUS_FLUSH_S = 1.0
"""How long a stop waits for agent session statuses still paced behind Slack's budget: a courtesy, since a
thread left `processing` is settled when its turn or orphaned call is taken up at the next start."""

FOLD_WAIT_S = 2.0
"""The longest a complete answer waits to hear whether calls follow it: the engine says so within milliseconds
(it stores the calls, or the turn), so this only bounds a surprise."""
PREAMBLE_MAX_CHARS = 2_000
"""The model's words before a batch of calls that fold into its status message; longer ones are posted."""


class SlackEdge:
    """Implements `EngineOutput` for Slack, on the store the core is opened on."""

    def __init__(
        self,
        client: AsyncWebClient,
        edits: EditScheduler,
        *,
        store: Store,
        shared: bool = False,
        team_id: str = "",
        metrics: Metrics | None = None,
        posts: PostQueue | None = None,
        first_post_wait_s: float = FIRST_POST_WAIT_S,
        upload_over_chars: int = UPLOAD_OVER_CHARS,
        tracing: Tracing | None = None,
        agent_sessions: AgentSessions | None = None,
        surface: str = "classic",
        stream_client: AsyncWebClient | None = None,
        stream_budget: StreamBudget | None = None,
    ) -> None:
        """`posts` and `stream_client` (streams and "is thinking…", which pace themselves by Slack's 429s) should use
        a client without the SDK's 429 retries (see `build_client`); by default, `client`. `shared` (a cluster's
        replica): who may cancel is read from the store, since a turn may have started on another replica.
        `surface` is `BOT_SLACK_SURFACE`: `agent` and `auto` show a thread's turns as streamed messages with task
        cards (bot/slack/turn_stream.py), `auto` going back to `classic` if Slack refuses. With `agent_sessions`,
        each thread's agent session status follows what runs in it."""
        self.agent_sessions = agent_sessions
        self._tracing = tracing or Tracing()
        self._client = client
        self._posts = posts or PostQueue(client)
        self._metrics = metrics or Metrics()
        self._store = store
        self._upload_over_chars = upload_over_chars
        self._first_post_wait_s = first_post_wait_s
        self._edits = edits
        self._queues = SerialQueues()
        self.sessions = Sessions(client, store, team_id=team_id, requesters_from_store=shared)
        self.threads = ThreadPosts(client, self._posts, self.sessions, self._metrics, store)
        self._thinking = ThinkingStatus(stream_client or client, self.sessions)
        self.board = StatusBoard(_edit_with(edits), repost=self._repost_status)
        self._quiet = QuietHold(self.sessions, abandon=self.board.abandon)
        self.turns = AgentTurns(
            surface=surface,
            client=stream_client or client,
            edits=edits,
            sessions=self.sessions,
            threads=self.threads,
            put=self._put,
            budget=stream_budget,
        )

    async def resume(self) -> None:
        """At start: deliver what a previous process owed Slack (posts through the outbox, final edits queued)."""
        self._edits.resume(await self.threads.resume())

    def take_over(self, owed: list[OwedMessage]) -> None:
        """Deliver what a gone replica owed Slack, as if this process had owed it."""
        self._edits.resume(self.threads.take_over(owed))

    def share_budget(self, processes: int) -> None:
        """Slack's edit, stream and "thinking" budgets are the workspace's: with `processes` live each spends its
        share."""
        self._edits.share_budget(processes)
        self.turns.share_budget(processes)
        self._thinking.share_budget(processes)

    @property
    def outbox_owed(self) -> int:
        return self.threads.owed

    # -- EngineOutput -----------------------------------------------------------------------

    def turn_started(self, session_key: str) -> None:
        if self.agent_sessions is not None:
            self.agent_sessions.turn_started(session_key)
        self.sessions.get(session_key).last_reply = None
        self._put(session_key, lambda: self._quiet.hold_if_quiet(session_key), holdable=False)

    def model_call_started(self, session_key: str) -> None:
        """Slack clears "is thinking…" when the bot posts and after two minutes: set it again for every call."""
        self._release(session_key)
        self._put(session_key, lambda: self._thinking.show(session_key, True))

    def text_delta(self, session_key: str, delta: str) -> None:
        if (turn := self.turns.of(session_key)) is not None:
            turn.add_text(delta)
            return
        self._reply(session_key).add(delta)

    def text_done(self, session_key: str) -> None:
        self.turns.text_done(session_key)
        session = self.sessions.get(session_key)
        if session.reply is not None:
            session.reply.finish()
            session.reply = None

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None:
        if self.agent_sessions is not None:
            self.agent_sessions.calls_started(session_key, calls)
        left = self.turns.calls_started(session_key, calls)  # in agent mode, the turn's message shows them
        if calls and not left:
            return
        calls = left
        words = self._words_before(session_key)
        message = self.board.start(session_key, calls, words.fold(PREAMBLE_MAX_CHARS) if words else None)
        self._put(session_key, lambda: self._post_status(session_key, message, words))
        for call in calls:  # arguments too long for the status line, shared once, when the call first asks
            if call.awaiting_approval and (name := arguments_file(call)) is not None:
                self.file_shared(session_key, SharedFile(name, arguments_text(call).encode(), "text/plain"))

    def call_changed(self, call: ToolCall) -> None:
        if self.agent_sessions is not None:
            self.agent_sessions.call_changed(call)
        if self.turns.changed(call):
            return
        showing = self.board.showing(call.id)
        if showing is not None and call.is_final and showing.preamble:
            self._keep_status(showing)
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
            self._put(key, functools.partial(self.threads.send_lines, key, mine), holdable=False)
        return False

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        name = defuse(file.name)  # the tool (or the model) chose it: its mentions are made inert

        async def share() -> None:
            address = await self.sessions.address(session_key)
            if address is not None and address.thread_ts is None:
                await self.threads.post(session_key, f"📎 {name}")  # a heartbeat session: this opens its thread
            error = await self.threads.upload(session_key, file.name, file.content, f"📎 {name}")
            if error is not None:
                await self.threads.post(session_key, f"⚠️ Could not share {name} here ({error}).", owed=True)

        self._put(session_key, share)

    def owed_posts(self, outcome: TurnOutcome) -> list[OwedPost]:
        """The session's answer parts and notices still waiting in its queue, handed over to be owed; the
        turn's final answer carries its feedback buttons, handed over or not.

        Not in a quiet session (its answer may yet come to nothing), nor before the session has an address
        and a thread (its first post opens it): there the queue posts, and owes, them itself."""
        session_key = outcome.session_key
        state = self.sessions.get(session_key)
        if (answer := state.last_reply) is not None and outcome.turn_id and _rated(outcome):
            answer.rate(feedback_block(outcome.turn_id))
        address = state.address
        if address is not None and address.quiet_reply is not None:
            state.unsent.clear()
        if address is None or address.thread_ts is None:
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
        self._release(key)
        self.turns.turn_finished(key)
        if self.agent_sessions is not None:
            self.agent_sessions.turn_finished(key)
        state = self.sessions.get(key)
        handed, state.handed = state.handed, []
        if outcome.owed_posts:
            # Behind what the queue holds before them, ahead of anything posted later: the order is kept.
            owed: Operation
            if len(handed) == len(outcome.owed_posts):
                owed = functools.partial(
                    self.threads.send_owed, key, list(zip(outcome.owed_posts, handed, strict=True))
                )
            else:  # this edge forgot what it handed over (its state was evicted): the outbox reads the store
                owed = functools.partial(self.threads.hand_over, key, outcome.owed_posts)
            self._put(key, owed, holdable=False)
        self.text_done(key)  # a turn cancelled mid-answer never said text_done: seal what was shown
        if (answer := state.last_reply) is not None and outcome.turn_id and _rated(outcome):
            answer.rate(feedback_block(outcome.turn_id))
            self._put(key, answer.close_with)
        state.last_reply = None
        if outcome.cancelled_by:
            self._notice(key, f"🛑 Stopped by {who(outcome.cancelled_by)}.")
        self._put(key, lambda: self._thinking.show(key, False))
        self._put(key, lambda: self._quiet.release(key, outcome.text), holdable=False)
        self._put(key, functools.partial(self._forget_posted, key), holdable=False)

    async def repaint(self, orphans: list[ToolCall]) -> None:
        """At start: show calls a previous process left unfinished as 👻 on the status messages they were on."""
        if not orphans:
            return
        if self.agent_sessions is not None:  # their threads may still show `processing`, and Stop, from before
            for orphan in orphans:
                self.agent_sessions.call_changed(orphan)
        for place, calls in (await self._store.displays_of([call.id for call in orphans])).items():
            channel, _, ts = place.partition(":")
            if self._edits.owes_final(channel, ts):
                continue  # its final state was kept for this start (with what else it shows), and is on its way
            # A new process knows nothing of the ids shown: a revision of its own, unlike any number before.
            text, blocks = status_message(calls, revision=f"r{time.time_ns()}")
            self._edits.update(channel, ts, text=text, blocks=blocks, final=True)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Let queued posts finish (the edits they leave behind are flushed by the scheduler's close)."""
        for key in self.sessions.streaming():
            self.text_done(key)
        for key in self.sessions.known():
            self._release(key)  # words still waiting to hear whether calls follow them are sealed as they are
        if not await self._queues.drain(timeout_s):
            log.warning("shut down with Slack posts still queued")
        await self.turns.close()
        await self.threads.close(timeout_s / 2)
        if self.agent_sessions is not None:
            await self.agent_sessions.close(min(timeout_s / 2, AGENT_STATUS_FLUSH_S))

    @property
    def busy_sessions(self) -> int:
        return self._queues.busy

    # -- internals --------------------------------------------------------------------------

    def _put(self, key: str, operation: Operation, *, holdable: bool = True) -> None:
        """Queue `operation` behind the session's others; a holdable one is set aside during a held quiet turn."""
        operation = self._tracing.bind(operation)  # its posts are spans of the turn that queued them
        self._queues.put(key, self._quiet.holdable(key, operation) if holdable else operation)

    def _reply(self, key: str) -> ReplyStream:
        session = self.sessions.get(key)
        if session.reply is None:
            thread = _AnswerThread(key, session, self.threads, self._edits, self.board, self._put)
            session.reply = reply = ReplyStream(
                thread,
                first_post_wait_s=self._first_post_wait_s,
                overflow_chars=self._upload_over_chars,
                fold_wait_s=FOLD_WAIT_S if key.startswith(SESSION_PREFIX) else 0.0,
            )
            session.unsent.append(reply)
            session.last_reply = reply
        return session.reply

    async def _forget_posted(self, key: str) -> None:
        """Once a finished turn's queue has run: its answers are in Slack (or owed in the store), and the
        session's state, remembered for thousands of idle sessions, keeps no copy of their text."""
        state = self.sessions.get(key)
        state.unsent[:] = [unsent for unsent in state.unsent if not unsent.finished_posting()]

    def _repost_status(self, message: StatusMessage) -> None:
        self._put(message.session_key, lambda: self._post_status(message.session_key, message))

    def _release(self, key: str) -> None:
        for unsent in self.sessions.get(key).unsent:
            if isinstance(unsent, ReplyStream):
                unsent.release()

    def _words_before(self, key: str) -> ReplyStream | None:
        """What the model said before asking for a batch of calls: shown on the batch's status message instead of a
        post of its own (a tool turn then posts twice, not three times), taken (`fold`) when the calls start if
        none of it is posted yet, else (`adopt`) when the status message's turn in the queue comes."""
        if not key.startswith(SESSION_PREFIX):
            return None  # a heartbeat's first post opens its thread, and its words may yet be held back
        unsent = self.sessions.get(key).unsent
        replies = [reply for reply in unsent if isinstance(reply, ReplyStream)]
        return replies[-1] if replies else None

    def _keep_status(self, message: StatusMessage) -> None:
        """A status message with the model's words on it: what a restart must leave it showing (its open calls
        orphaned, its words kept) is kept in the final journal, since a repaint knows only the calls."""
        if message.channel is None or message.ts is None or message.final:
            return
        lost = [c if c.is_final or c.awaiting_person else replace(c, status=CallStatus.ORPHANED) for c in message.calls]
        text, blocks = status_message(lost, revision=f"r{time.time_ns()}", preamble=message.preamble)
        self._edits.keep_if_lost(message.channel, message.ts, text=text, blocks=blocks)

    async def _post_status(self, key: str, message: StatusMessage, words: ReplyStream | None = None) -> None:
        """Post the batch's status message; or, when the model's words before it were posted first (`words`, a
        loaded process outlasting the fold's wait), rewrite their message as the status message."""

        def poster(text: str, blocks: list[Block], owed: bool) -> Awaitable[tuple[str, str] | None]:
            # Owed, it is the batch's final state; else progress, which the answers of other threads pass.
            priority = Priority.ANSWER if owed else Priority.PROGRESS
            return self.threads.post(key, text, blocks, owed=owed, priority=priority)

        adopted = words.adopt(PREAMBLE_MAX_CHARS) if words is not None and message.preamble is None else None
        if words is not None:
            words.release()  # not taken: they are a message of their own, sealed now
        if adopted is not None:
            channel, ts, message.preamble = adopted
            self.board.adopt(message, channel, ts)
        else:
            await self.board.post(message, poster)
        if message.preamble:
            self._keep_status(message)
        if message.channel and message.ts:
            # Remembered so that after a crash the calls it shows can be repainted as orphaned.
            place = f"{message.channel}:{message.ts}"
            await self._store.set_call_display([call.id for call in message.calls], place)

    def _notice(self, key: str, text: str) -> None:
        line = _Line(text)
        self.sessions.get(key).unsent.append(line)

        async def post() -> None:
            if line.take():
                await self.threads.post(key, text, owed=True)

        self._put(key, post)


def _rated(outcome: TurnOutcome) -> bool:
    """Whether the turn's answer is one to rate: a whole answer, not a stopped or failed turn's words."""
    return not (outcome.cancelled_by or outcome.error)


def _edit_with(edits: EditScheduler) -> Edit:
    def edit(channel: str, ts: str, text: str, blocks: list[Block], final: bool) -> None:
        edits.update(channel, ts, text=text, blocks=blocks, final=final)

    return edit


@dataclass(frozen=True, slots=True)
class _AnswerThread:
    """A session's thread as its streamed answer sees it (`AnswerThread`): queued, posted, edited in its thread."""

    key: str
    session: SessionState
    threads: ThreadPosts
    edits: EditScheduler
    board: StatusBoard
    put: Callable[[str, Operation], None]

    def enqueue(self, operation: Operation) -> None:
        self.put(self.key, operation)

    async def post(self, text: str, blocks: list[Block], owed: bool) -> tuple[str, str] | None:
        return await self.threads.post(self.key, text, blocks, owed=owed)

    def edit(self, channel: str, ts: str, text: str, blocks: list[Block], final: bool) -> None:
        self.edits.update(channel, ts, text=text, blocks=blocks, final=final)

    def quiet_word(self) -> str | None:
        return self.session.address.quiet_reply if self.session.address else None

    def outcomes(self) -> Block | None:
        calls = self.board.awaiting_final(self.key, self.edits.owes_final)
        return outcomes_block(calls) if calls else None

    async def upload(self, text: str, continued: bool) -> bool:
        comment = answer_comment(text, continued=continued)
        return await self.threads.upload(self.key, ANSWER_FILE, text, comment) is None


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
