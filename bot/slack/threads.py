"""`ThreadPosts`: the bot's messages in its sessions' threads, each paced, a last word owed until Slack has it.

Posts go through the `PostQueue` (paced per channel). A message's last word (a
notice, a reminder, a complete answer part, a final status) is owed: written to the
store before it is tried and delivered by the `Outbox` if Slack does not take it
now, after a restart included. While a session has owed posts waiting in the outbox,
its later posts wait behind them there, so they keep their order. A heartbeat
session has no thread until its first post: that post opens it, and the thread is
recorded so replies reach the session.
"""

from __future__ import annotations

import contextlib
import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbox import Outbox, marker, target
from bot.slack.posts import PostFailed, PostQueue, PostRejected, Priority
from bot.slack.render import Block, EmptyMessage, sendable
from bot.slack.sessions import Address, Sessions
from bot.slack.uploads import upload
from bot.store import OwedMessage, Store
from bot.telemetry.metrics import Metrics
from bot.types import OwedLine, OwedPost

log = logging.getLogger(__name__)


class ThreadPosts:
    """Posts and files in a session's thread, owed in `store` until Slack has them."""

    def __init__(
        self, client: AsyncWebClient, posts: PostQueue, sessions: Sessions, metrics: Metrics, store: Store
    ) -> None:
        self._client = client
        self._posts = posts
        self._sessions = sessions
        self._metrics = metrics
        self.outbox = Outbox(store, posts, client, sessions, metrics=metrics)

    async def resume(self) -> list[OwedMessage]:
        """At start: deliver the posts a previous process owed; returns all it owed (its final edits too)."""
        return await self.outbox.start()

    def take_over(self, owed: list[OwedMessage]) -> list[OwedMessage]:
        """Deliver the posts a gone replica owed, as if this process had owed them; returns all it owed."""
        return self.outbox.take(owed)

    @property
    def owed(self) -> int:
        return self.outbox.owed

    def backlog_s(self, channel: str) -> float:
        return self._posts.backlog_s(channel)

    async def post(
        self,
        key: str,
        text: str,
        blocks: list[Block] | None = None,
        *,
        owed: bool = False,
        priority: Priority = Priority.ANSWER,
    ) -> tuple[str, str] | None:
        """Post in the session's thread, opening it first for a heartbeat session; (channel, ts), or None.

        `owed`: the message's last word, kept in the store until Slack has it (None then means the outbox
        delivers it). A message not owed that does not land is left to its caller. `priority`: its place among
        the channel's waiting posts (`PostQueue`). While the session has owed
        posts waiting, later ones wait behind them, so they keep their order. Run it inside the session's queue,
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
        if owed:
            post_id = await self.outbox.owe(key, address.channel, address.thread_ts, text, blocks)
        return await self._send(key, address, text, blocks, post_id, priority)

    async def send_owed(self, key: str, owed: list[tuple[int, OwedPost]]) -> None:
        """Posts a turn's last save owed (`SlackEdge.owed_posts`), as `post` would have had it owed them."""
        address = await self._sessions.address(key)
        for post_id, post in owed:
            if address is None:
                await self.hand_over(key, [post_id])
            else:
                await self._send(key, address, post.text, post.blocks, post_id)

    async def send_lines(self, key: str, lines: list[tuple[int, OwedLine]]) -> None:
        """A firing's lines, rendered for the session as the outbox renders them, posted as any owed post."""
        for line_id, line in lines:
            message = OwedMessage(line_id, key, None, None, None, line.text, None, line)
            post = await target(self._sessions, message)
            if post is None or post.address is None:
                log.error("a line owed to %s can never be posted in Slack; dropping it", key)
                await self.outbox.settle(line_id)
                continue
            await self._send(key, post.address, post.text, post.blocks, line_id)

    async def hand_over(self, key: str, post_ids: list[int]) -> None:
        """Posts a turn's last save owed: the outbox delivers them, once (an operation of the session's queue)."""
        for post_id in post_ids:
            self.outbox.handed_over(key, post_id, tried=False)

    async def say(self, channel: str, thread_ts: str, text: str, blocks: list[Block] | None = None) -> str | None:
        """A line in a thread that is no session's (a refusal, a question to confirm), paced like every post;
        its ts, or None when it did not land (it is not owed: the person may simply ask again)."""
        try:
            return await self._posts.post(channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)
        except (PostFailed, PostRejected) as exc:
            log.warning("could not post in %s: %s", channel, exc)
            return None

    async def upload(self, key: str, filename: str, content: bytes | str, comment: str) -> str | None:
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

    async def close(self, timeout_s: float) -> None:
        """Give the outbox `timeout_s` to deliver what it holds; what it still holds stays owed in the store."""
        await self.outbox.idle(timeout_s)
        await self.outbox.close()

    async def _send(
        self,
        key: str,
        address: Address,
        text: str,
        blocks: list[Block] | None,
        post_id: int | None,
        priority: Priority = Priority.ANSWER,
    ) -> tuple[str, str] | None:
        """Post now, unless the session's owed posts wait in the outbox; an owed one (`post_id`) that does not
        land is the outbox's to deliver."""
        outbox = self.outbox
        if outbox.backlogged(key):
            if post_id is not None:
                outbox.handed_over(key, post_id, tried=False)
            return None
        # An owed post being tried here is not the outbox's to take up (a start reads what is owed while the
        # scheduler may already be firing): it becomes the outbox's only when it is handed over.
        with outbox.sending(post_id) if post_id is not None else contextlib.nullcontext():
            try:
                ts = await self._posts.post(
                    channel=address.channel,
                    thread_ts=address.thread_ts,
                    text=text,
                    blocks=blocks,
                    metadata=marker(post_id) if post_id is not None else None,
                    priority=priority,
                )
            except PostRejected as exc:
                self._metrics.inc("slack_errors_total")
                log.error("chat.postMessage in %s refused (%s); not posted", key, exc.error)
                if post_id is not None:
                    await outbox.settle(post_id)
                return None
            except PostFailed as exc:
                self._metrics.inc("slack_errors_total")
                if post_id is not None:
                    log.warning("chat.postMessage in %s: %s; the outbox will deliver it", key, exc)
                    outbox.handed_over(key, post_id, tried=True)
                else:
                    log.warning("chat.postMessage in %s: %s; its final state will be posted instead", key, exc)
                return None
            if post_id is not None:
                await outbox.settle(post_id)
        self._metrics.inc("slack_posts_total")
        address.thinking = False  # Slack clears the status when the bot posts
        if address.thread_ts is None:
            await self._sessions.open_thread(key, address, ts)
        return address.channel, ts
