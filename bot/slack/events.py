"""Slack messages → the engine: which thread, which session, start a turn or inject, or stop.

One process has acked the event before any of this runs (a cluster acks once
this has claimed it, see `_claim_in_cluster`). Messages of one thread are handled one
after another (a per-thread lock), so two quick replies reach the engine in the
order they were written. Deduplication is recorded in the store
before anything is dispatched: by `event_id` (Slack's redeliveries) and by
(channel, ts) (the `message` + `app_mention` twins of one mention), so neither can
start a second turn, not even across a restart. The claim that records those keys
also writes the message to the inbox, in the same transaction: from then on it is
owed an answer, even if the process dies before the model sees it. One process
claims a message as soon as it arrives and reads the thread and the files after;
a cluster, whose ack waits for the claim, reads the thread first and the files
after the ack, keeping the message unseen by turns until they are read.

Every message handed to the engine records its author as the session's `speaker`
before the engine sees it: in a shared thread the person asking now is not always
whoever started the thread, and a reminder or a time zone is theirs.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.engine import Delivery, Engine
from bot.agent.fence import said
from bot.agent.protocol import text_block
from bot.calls.summary import one_line
from bot.clock import utcnow
from bot.concurrency import TaskSet
from bot.config import Settings
from bot.coordination import Coordination
from bot.errors import SlackResponseError
from bot.slack.admission import Admission
from bot.slack.approvals import ANSWERED_REACTION, ApprovalButtons
from bot.slack.files import TOO_SLOW, FileLimits, FileReader, unread
from bot.slack.filters import Incoming, addressed, classify, deleted_message, may_cancel, strip_mention
from bot.slack.forget import ForgetDialog
from bot.slack.history import thread_context, with_context
from bot.slack.output import SlackEdge
from bot.slack.prompts import TITLE_CHARS
from bot.slack.queues import KeyedLocks
from bot.slack.sessions import Sessions
from bot.store import Store
from bot.store.forgetting import Forgetting
from bot.telemetry.metrics import Metrics

if TYPE_CHECKING:
    import psycopg

    from bot.store.db import TxHook

log = logging.getLogger(__name__)


INJECTION_REACTION = "eyes"
NOTHING_SAID = "(the user mentioned you without saying anything else)"
READING_S = 120.0
"""How long a cluster's message stays unseen while its files are read: past it (the replica died reading
them, or the downloads hung) the message is taken up as claimed, with notes in place of its files."""
DENIAL = "Sorry, I'm not set up to answer here. Please ask the people who run me for access."


class MessageRouter:
    """Turns a Slack message into exactly one thing for the engine: a claim in the inbox, then a turn,
    a note for the running turn, a cancel, or nothing.

    Slack redelivers events and sends a mention twice (`message` and `app_mention`); this is the one
    place that knows that, so the engine only ever sees each message once, in the thread's order."""

    def __init__(
        self,
        *,
        client: AsyncWebClient,
        store: Store,
        engine: Engine,
        edge: SlackEdge,
        sessions: Sessions,
        settings: Settings,
        bot_user_id: str,
        metrics: Metrics,
        coordination: Coordination,
        admission: Admission | None = None,
        answers: ApprovalButtons | None = None,
    ) -> None:
        """When the `coordination` is `shared` (several replicas) a message is handed to its thread's job in
        the claim's own transaction, and `stop` reaches the turn and the calls on whichever replica runs them.
        `admission` decides whom the bot answers (default: the allow-lists, teams not told apart). With
        `answers`, a reply that answers an open question (bot/slack/approvals.py) goes to it rather than to
        the agent."""
        self._answers = answers
        self._admission = admission or Admission.of(settings)
        self._coordination = coordination
        self._client = client
        self._store = store
        self._engine = engine
        self._edge = edge
        self._sessions = sessions
        self._settings = settings
        self._bot_user_id = bot_user_id
        self._metrics = metrics
        self._locks = KeyedLocks()
        self.forget_dialog = ForgetDialog(
            client=client,
            say=edge.threads.say,
            forgetting=Forgetting(store, settings.work_root),
            engine=engine,
            admins=settings.bot_admin_users,
        )
        self._files = FileReader(client, FileLimits.of(settings))
        self._reading = TaskSet()
        """A cluster's files being read after their message was claimed and acked."""

    async def close(self, timeout_s: float) -> None:
        """Stop reading files for new messages; those being read get `timeout_s` to finish, and a reader
        cut off then hands its message on at once, its files as notes."""
        await self._reading.close(timeout_s)

    async def handle(self, body: dict[str, Any]) -> None:
        """One `message` or `app_mention` event, start to finish."""
        if (deleted := deleted_message(body)) is not None:
            await self._forget_message(*deleted)
            return
        incoming = classify(body, self._bot_user_id)
        if incoming is None:
            self._metrics.inc("events_ignored_total")
            return
        async with self._locks.hold(incoming.key):
            await self._route(incoming, str(body.get("event_id") or ""))

    async def _forget_message(self, key: str, message_ts: str) -> None:
        """A message deleted in Slack leaves the stored history, and so what the model sees from the next turn."""
        session_key = await self._store.resolve(key)
        if session_key is None:
            self._metrics.inc("events_ignored_total")
            return
        changed = await self._store.redact_message(session_key, message_ts)
        log.info("a message deleted in Slack was removed from %d stored rows of %s", changed, session_key)

    async def _route(self, incoming: Incoming, event_id: str) -> None:
        session_key = await self._store.resolve(incoming.key)
        mention_only = self._settings.bot_mention_only_channels
        if not addressed(incoming, in_session=session_key is not None, mention_only_channels=mention_only):
            self._metrics.inc("events_ignored_total")  # chatter not meant for the bot: no turn, no injection, no 👀
            return
        keys = [f"event:{event_id}"] if event_id else []
        keys.append(f"msg:{incoming.channel}:{incoming.ts}")
        refused = not self._admission.admits(incoming.user, team=incoming.user_team, channel=incoming.channel)
        if refused or (session_key is not None and (incoming.is_stop or incoming.is_forget)):
            if not await self._store.claim_event(*keys):
                self._metrics.inc("events_duplicate_total")
            elif refused:
                self._metrics.inc("events_denied_total")
                await self._deny(incoming)
            elif incoming.is_forget:
                assert session_key is not None
                await self.forget_dialog.ask(session_key, incoming.user, incoming.channel, incoming.thread_ts)
            else:
                assert session_key is not None
                await self._stop(session_key, incoming)
            return
        if session_key is not None and await self._answered(session_key, incoming, keys):
            return
        new_address = self._new_address(incoming, self._bot_user_id)
        address = {"speaker": incoming.user} if session_key is not None else new_address
        # One of the four mode branches outside the seam: a replica acks only once the claim has committed, so
        # it reads the thread before claiming; one process claims first (it acked already) and reads after.
        if self._coordination.shared:
            await self._claim_in_cluster(incoming, keys, session_key, address)
            return
        # One process acked the event already: the claim comes first, so a kill while the thread or the
        # files are read still leaves the message owed (its files as notes saying why they are missing).
        text = await self._said(incoming)
        blocks = _content(text, unread(incoming.files)) if incoming.files else None
        item = await self._store.claim_message(
            keys, session_key or incoming.key, text, address=address, blocks=blocks, requester=incoming.user
        )
        if item is None:
            self._metrics.inc("events_duplicate_total")
            return
        self._remember(item.session_key, incoming, address, new=session_key is None)
        read = await self._text(incoming, new=session_key is None)
        content: str | list[dict[str, Any]] = read
        if incoming.files:
            content = _content(read, await self._files.blocks(incoming.files))
        if read != text or incoming.files:
            await self._store.revise_message(item.id, read, content if isinstance(content, list) else None)
        await self._deliver(item.session_key, incoming, content, item.id)

    async def _answered(self, session_key: str, incoming: Incoming, keys: list[str]) -> bool:
        """Whether the reply was an open question's answer (claimed like any event, so given once). A reply
        with files is a message for the agent: an answer is text, and the files must not be dropped."""
        text = strip_mention(incoming.text, self._bot_user_id).strip()
        if self._answers is None or not text or incoming.files:
            return False
        question = await self._answers.question_for(session_key, incoming.user)
        if question is None:
            return False
        if not await self._store.claim_event(*keys):
            self._metrics.inc("events_duplicate_total")
            return True
        await self._answers.on_reply(question, incoming.user, text)
        await self.react(incoming.channel, incoming.ts, ANSWERED_REACTION)
        return True

    async def _claim_in_cluster(
        self, incoming: Incoming, keys: list[str], session_key: str | None, address: dict[str, Any]
    ) -> None:
        """In a cluster the ack waits for the claim, and the thread's job commits with it, or neither does;
        its ring then reaches the replica running the thread's turn (this one too), which may take the
        message up at once. A message with files is claimed unseen by turns, acked, and its files read
        after (`_read_files`): a download may take longer than Slack waits for the ack."""
        text = await self._text(incoming, new=session_key is None)
        key = session_key or incoming.key
        reading = bool(incoming.files)
        item = await self._store.claim_message(
            keys,
            key,
            text,
            address=address,
            blocks=_content(text, unread(incoming.files)) if reading else None,
            requester=incoming.user,
            then=None if reading else self._offer(key, incoming),
            reading_until=utcnow() + timedelta(seconds=READING_S) if reading else None,
        )
        if item is None:
            self._metrics.inc("events_duplicate_total")
            return
        self._remember(item.session_key, incoming, address, new=session_key is None)
        if not reading:
            self._queued(key, incoming)
        elif self._reading.spawn(self._read_files(item.id, key, incoming, text), f"slack-files:{incoming.ts}") is None:
            log.warning("shutting down: %s/%s goes on without its files", incoming.channel, incoming.ts)
            await self._revise(item.id, key, incoming, text, _content(text, unread(incoming.files)))

    async def _read_files(self, inbox_id: int, key: str, incoming: Incoming, text: str) -> None:
        """A cluster's message with files, claimed and acked: its files join it, and its turn is queued.

        Reading is cut off well inside READING_S, and a shutdown hands the message on with notes for its
        files: either way it goes on at once instead of staying unseen until its deadline."""
        try:
            async with asyncio.timeout(READING_S / 2):
                blocks = _content(text, await self._files.blocks(incoming.files))
        except TimeoutError:
            log.warning("the files of %s/%s took too long to read", incoming.channel, incoming.ts)
            blocks = _content(text, unread(incoming.files, reason=TOO_SLOW))
        except asyncio.CancelledError:
            await asyncio.shield(self._revise(inbox_id, key, incoming, text, _content(text, unread(incoming.files))))
            raise
        await self._revise(inbox_id, key, incoming, text, blocks)

    async def _revise(
        self, inbox_id: int, key: str, incoming: Incoming, text: str, blocks: list[dict[str, Any]]
    ) -> None:
        """The message made whole and shown to turns, and its thread's job queued, in one transaction."""
        if await self._store.revise_message(inbox_id, text, blocks, then=self._offer(key, incoming)):
            self._queued(key, incoming)
        else:  # past READING_S, another replica took the message up as it was claimed
            log.warning("the files of %s/%s were read too late for its turn", incoming.channel, incoming.ts)

    def _offer(self, key: str, incoming: Incoming) -> TxHook:
        """Queue the thread's job and ring its replica, inside the caller's transaction."""
        offer_in, ref = self._coordination.offer_in, {"channel": incoming.channel, "ts": incoming.ts}

        async def then(conn: psycopg.AsyncConnection[Any]) -> None:
            await offer_in(conn, key, ref)

        return then

    def _queued(self, key: str, incoming: Incoming) -> None:
        self._metrics.inc("turns_queued_total")
        self._sessions.note_request(key, incoming.channel, incoming.ts, incoming.user)

    async def _text(self, incoming: Incoming, *, new: bool) -> str:
        """The text the model gets: after the thread's earlier messages when it opens a session in an
        existing thread, attributed to its author."""
        text = await self._said(incoming)
        if new and incoming.in_thread:
            context = await thread_context(
                self._client,
                channel=incoming.channel,
                thread_ts=incoming.thread_ts,
                before_ts=incoming.ts,
                bot_user_id=self._bot_user_id,
                admit=lambda message: self._admission.admits_message(message, incoming.channel),
                speaker=self._sessions.speaker,
            )
            text = with_context(context, text)
        return text

    async def _said(self, incoming: Incoming) -> str:
        """The message in the one form that names its author (id and name), which its own text cannot forge."""
        text = incoming.text if incoming.text.strip() or incoming.files else NOTHING_SAID
        return said(await self._sessions.speaker(incoming.user), text, ts=incoming.ts)

    def _remember(self, session_key: str, incoming: Incoming, address: dict[str, Any], *, new: bool) -> None:
        if new:
            self._sessions.remember_address(session_key, address)
        else:
            self._sessions.remember_speaker(session_key, incoming.user)

    @staticmethod
    def _new_address(incoming: Incoming, bot_user_id: str) -> dict[str, Any]:
        """Where the session lives and who started it; its first request, on one line, is its title in Slack."""
        title = one_line(strip_mention(incoming.text, bot_user_id), TITLE_CHARS)
        return {
            "edge": "slack",
            "team": incoming.team,
            "channel": incoming.channel,
            "thread_ts": incoming.thread_ts,
            "requester": incoming.user,
            "speaker": incoming.user,
            **({"title": title} if title else {}),
        }

    async def _deliver(
        self, session_key: str, incoming: Incoming, content: str | list[dict[str, Any]], inbox_id: int
    ) -> None:
        delivery = self._engine.submit(session_key, content, inbox_id=inbox_id, requester=incoming.user)
        if delivery is Delivery.STARTED:
            self._metrics.inc("turns_started_total")
            self._sessions.note_request(session_key, incoming.channel, incoming.ts, incoming.user)
        elif delivery is Delivery.INJECTED:
            self._metrics.inc("injections_total")
            await self.react(incoming.channel, incoming.ts, INJECTION_REACTION)
        else:
            # Stored and owed: the next start resumes it, so the thread is told to wait, not to resend.
            self._edge.notice(session_key, "I'm restarting; I'll answer this as soon as I'm back.")

    async def _stop(self, session_key: str, incoming: Incoming) -> None:
        """`stop` / `cancel` as the whole reply: cancel the turn and every call, bypassing the queue."""
        requesters = await self._sessions.requesters(session_key)
        if not may_cancel(incoming.user, requesters=requesters, allowed_users=self._settings.bot_allowed_users):
            self._edge.notice(session_key, "Only the person who asked (or an allowed user) can stop this.")
            return
        self._metrics.inc("cancels_total")
        # One of the four mode branches outside the seam: the turn and its calls may run on other replicas, so
        # only the store can say whether anything runs; one process asks its engine, by cancelling.
        if self._coordination.shared:
            if not await self._running_anywhere(session_key):
                self._edge.notice(session_key, "Nothing is running right now.")
                return
            await self._coordination.relay("cancel", {"session_key": session_key, "by": incoming.user})
            await self.react(incoming.channel, incoming.ts, "octagonal_sign")
            return
        busy = self._engine.is_busy(session_key)
        results = await self._engine.cancel_turn(session_key, by=incoming.user)
        if busy or any(result.cancelled for result in results):
            await self.react(incoming.channel, incoming.ts, "octagonal_sign")
        else:
            self._edge.notice(session_key, "Nothing is running right now.")

    async def _running_anywhere(self, session_key: str) -> bool:
        """In a cluster: whether the store shows the session busy (a turn owing an answer, an open call)."""
        return bool(await self._store.session_inbox(session_key)) or bool(
            await self._store.session_calls(session_key, only_open=True)
        )

    async def _deny(self, incoming: Incoming) -> None:
        """Say no once per thread, in the thread; later messages there are dropped silently."""
        if not await self._store.claim_event(f"denied:{incoming.channel}:{incoming.thread_ts}"):
            return
        await self._edge.threads.say(incoming.channel, incoming.thread_ts, DENIAL)

    async def react(self, channel: str, ts: str, name: str) -> None:
        """Add a reaction; one that is there already is fine, any other failure only logged."""
        try:
            await self._client.reactions_add(channel=channel, timestamp=ts, name=name)
        except SlackResponseError as exc:
            if exc.error != "already_reacted":
                log.info("reactions.add %s failed: %s", name, exc.error)


def _content(text: str, file_blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A message with files as content blocks: its text first, unless it had none (the API refuses an empty one)."""
    return [text_block(text), *file_blocks] if text.strip() else file_blocks
