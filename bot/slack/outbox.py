"""Delivering what the bot owes Slack: posts that have not landed, kept in the store (`bot.store.outbox`).

Every post the bot owes goes through here: answers, notices and final states the
edge decided, and the lines a firing owed its thread (a due reminder, a missed
one's notice), which the claim wrote with no address: they are rendered for the
session when they are delivered (`render_line`).

An owed post is written before it is first tried. When the `PostQueue` gives up on
it, or the process stopped before it landed, it stays owed, and this worker
delivers it: in the order it was owed (per session), with backoff while Slack
keeps failing, and at every start for what a previous process left. A session with
posts still owed sends its later posts through here too, so they cannot overtake.
What a turn's last save owed (the answer still queued when the message was marked
answered, bot/agent/turn.py) is posted by the session's queue like any owed post, and
comes here the same way. This worker delivers only the rows it was handed: the others
are being tried by the edge, or wait in a session's queue, right now.

One retry policy for all of them: the `PostQueue` tries a post for up to a minute
(its pauses for `Retry-After`, its backoff for 5xx and network errors), then this
worker tries again after 2 s, 4 s, 8 s … at most `RETRY_MAX_S` apart, for as long
as it takes, across restarts. One rule for what Slack will never take: a post it
refuses for good (`PostRejected`: the channel is gone, the bot was removed, the
message is invalid), or one for a session with no Slack address, is dropped with
an error in the log, so it never holds up the session's later posts.

A post may have landed although its confirmation never arrived (a timeout, a kill
between Slack's answer and the store's delete). Each owed post therefore carries a
marker in its Slack `metadata` (`marker`); before posting one a second time, its
thread is searched for that marker (the first `CHECK_PAGES` pages of it), so a post
is delivered once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import backoff_s
from bot.errors import SlackError
from bot.slack.posts import PostFailed, PostQueue, PostRejected, thread_holds
from bot.slack.render import Block, EmptyMessage, render_line, sendable
from bot.slack.sessions import Address, Sessions
from bot.store import OwedMessage, Store
from bot.store.group import GroupCommit
from bot.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

MARKER_EVENT = "threadbot_post"
RETRY_BASE_S = 2.0
RETRY_MAX_S = 300.0
CHECK_PAGES = 10
"""Pages of a thread (200 replies each) searched for an earlier attempt; past them, the post goes out unchecked."""


def marker(post_id: int) -> dict[str, Any]:
    """The `metadata` that names an owed post in Slack, so a repeat can be recognised."""
    return {"event_type": MARKER_EVENT, "event_payload": {"post": post_id}}


@dataclass(frozen=True, slots=True)
class Target:
    """An owed post as it goes out: where, and what. `address` is the session's, for a line rendered for it
    (its first post in a heartbeat session, with no thread yet, opens the thread)."""

    channel: str
    thread_ts: str | None
    text: str
    blocks: list[Block] | None
    address: Address | None = None


async def target(sessions: Sessions, message: OwedMessage) -> Target | None:
    """Where and what an owed post is; None when Slack can never take it (no Slack address, nothing to say)."""
    address = None
    if message.line is not None:
        address = await sessions.address(message.session_key)
        if address is None:
            return None
        channel, thread_ts = address.channel, address.thread_ts
        text, blocks = render_line(message.line, await sessions.asker(message.session_key)), None
    elif message.channel is not None:
        channel, thread_ts, text, blocks = message.channel, message.thread_ts, message.text, message.blocks
    else:
        return None
    try:
        text, blocks = sendable(text, blocks)
    except EmptyMessage:
        return None
    return Target(channel, thread_ts, text, blocks, address)


class Outbox:
    """The one worker that delivers what the bot owes Slack and could not post at once: it exists so that a
    post decided is a post delivered, whatever Slack or a crash did to the first attempt."""

    def __init__(
        self,
        store: Store,
        posts: PostQueue,
        client: AsyncWebClient,
        sessions: Sessions,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._settles: GroupCommit[int] = GroupCommit(self._settle_posts, "post settles")
        self._sessions = sessions
        self._metrics = metrics or Metrics()
        self._posts = posts
        self._client = client
        self._clock = clock
        self._backlog: dict[str, set[int]] = {}  # session -> its owed posts this worker must deliver
        self._maybe_landed: set[int] = set()  # tried before: check the thread before posting again
        self._sending: set[int] = set()  # being posted by the edge right now: not this worker's
        self._attempts: dict[int, int] = {}
        self._owed_at: dict[int, float] = {}  # post -> when this process knew it owed (for outbox_age_seconds)
        self._not_before = 0.0
        self._wake = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.duplicates_avoided = 0

    def backlogged(self, session_key: str) -> bool:
        return bool(self._backlog.get(session_key))

    @property
    def owed(self) -> int:
        return sum(len(ids) for ids in self._backlog.values())

    async def start(self) -> list[OwedMessage]:
        """Take up what a previous process left; returns it all (its edits are the `EditScheduler`'s)."""
        return self.take(await self._store.owed_messages())

    def take(self, owed: list[OwedMessage]) -> list[OwedMessage]:
        """Deliver these owed posts (a previous process's, or a gone replica's); returns them all.

        Not those the edge is posting itself right now (`sending`): they are handed over if they fail."""
        posts = [message for message in owed if message.is_post and message.id not in self._sending]
        for message in posts:
            self._owed_at.setdefault(message.id, self._clock())
            self._backlog.setdefault(message.session_key, set()).add(message.id)
            self._maybe_landed.add(message.id)
            self._empty.clear()
        if posts:
            log.info("delivering %d posts owed by an earlier process", len(posts))
        self._running()
        return owed

    @contextlib.contextmanager
    def sending(self, post_id: int) -> Iterator[None]:
        """While the edge posts an owed post itself: `take` leaves it alone, so it is never posted twice at once."""
        self._sending.add(post_id)
        try:
            yield
        finally:
            self._sending.discard(post_id)

    async def owe(
        self,
        session_key: str,
        channel: str,
        thread_ts: str | None,
        text: str,
        blocks: list[dict[str, Any]] | None,
    ) -> int:
        """Record a post as owed, before trying it; if the caller cannot deliver it, it is `handed_over`."""
        post_id = await self._store.owe_post(session_key, channel, thread_ts, text, blocks)
        self._owed_at[post_id] = self._clock()
        return post_id

    def handed_over(self, session_key: str, post_id: int, *, tried: bool) -> None:
        """An owed post this worker must now deliver (`tried`: it may have landed).

        Rows it was not handed (a post being tried right now, an answer owed by a turn's last save that
        the edge has not handed over yet) are not its to deliver."""
        self._backlog.setdefault(session_key, set()).add(post_id)
        self._owed_at.setdefault(post_id, self._clock())
        self._empty.clear()
        if tried:
            self._maybe_landed.add(post_id)
        self._running()

    def _running(self) -> None:
        """Wake the worker, starting it on first use (or again after `close`)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="slack-outbox")
        self._wake.set()

    async def settle(self, post_id: int) -> None:
        """Slack has the post: it is owed no more (posts confirmed together share one transaction)."""
        await self._settles.add(post_id, post_id)
        self._settled(post_id)

    async def _settle_posts(self, post_ids: Sequence[int]) -> None:
        await self._store.settle_posts(post_ids)

    def _settled(self, post_id: int) -> None:
        if (owed_at := self._owed_at.pop(post_id, None)) is not None:
            self._metrics.observe("outbox_age_seconds", self._clock() - owed_at)

    async def idle(self, timeout_s: float) -> bool:
        """Wait until nothing is owed; False after `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._empty.wait(), timeout_s)
        return not self.owed

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._settles.drain()  # a post Slack confirmed is settled before the store closes
        if self.owed:
            log.warning("%d posts still owed to Slack; they are kept and delivered at the next start", self.owed)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            delay = self._not_before - self._clock()
            if delay > 0:
                # `asyncio.timeout`, not `wait_for`, which on 3.11 can swallow the cancel that stops this loop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                self._wake.clear()
            if not self.owed:
                continue
            owed = [m for m in await self._store.owed_messages() if m.is_post and self._handed(m)]
            sessions: dict[str, list[OwedMessage]] = {}
            for message in owed:
                sessions.setdefault(message.session_key, []).append(message)
            results = await asyncio.gather(*(self._deliver(messages) for messages in sessions.values()))
            if not all(results):
                attempt = max(self._attempts.values(), default=1)
                self._not_before = self._clock() + backoff_s(attempt, first_s=RETRY_BASE_S, max_s=RETRY_MAX_S)
                self._wake.set()

    async def _deliver(self, messages: list[OwedMessage]) -> bool:
        """One session's owed posts, in order; stops at the first that does not land (False)."""
        for message in messages:
            try:
                post = await target(self._sessions, message)
                if post is None:
                    log.error("an owed post of %s can never be posted in Slack; dropping it", message.session_key)
                elif message.id in self._maybe_landed and await self._already_posted(post, message.id):
                    self.duplicates_avoided += 1
                else:
                    ts = await self._posts.post(
                        channel=post.channel,
                        thread_ts=post.thread_ts,
                        text=post.text,
                        blocks=post.blocks,
                        metadata=marker(message.id),
                    )
                    self.delivered += 1
                    self._metrics.inc("slack_posts_total")
                    if post.address is not None and post.address.thread_ts is None:
                        await self._sessions.open_thread(message.session_key, post.address, ts)
            except PostRejected as exc:
                log.error("Slack refused an owed post of %s for good (%s); dropping it", message.session_key, exc.error)
            except (PostFailed, SlackError, TimeoutError) as exc:
                self._attempts[message.id] = self._attempts.get(message.id, 0) + 1
                self._maybe_landed.add(message.id)
                log.warning("an owed post of %s is still not delivered (%s); will retry", message.session_key, exc)
                return False
            await self._settles.add(message.id, message.id)
            self._settled(message.id)
            self._attempts.pop(message.id, None)
            self._maybe_landed.discard(message.id)
            ids = self._backlog[message.session_key]
            ids.discard(message.id)
            if not ids:
                del self._backlog[message.session_key]
            if not self._backlog:
                self._empty.set()
        return True

    def _handed(self, message: OwedMessage) -> bool:
        return message.id in self._backlog.get(message.session_key, ())

    async def _already_posted(self, post: Target, post_id: int) -> bool:
        """Whether the thread already holds this post (a message with its marker)."""
        if post.thread_ts is None:
            return False  # a top-level post cannot be searched for cheaply; it is posted again
        return await thread_holds(
            self._client, channel=post.channel, thread_ts=post.thread_ts, mark=marker(post_id), max_pages=CHECK_PAGES
        )
