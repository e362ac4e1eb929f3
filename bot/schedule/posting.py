"""Delivering claimed reminders: ask the edge, wait for its word, retry with backoff until a deadline.

A claim writes the post it owes (bot/store/reminder_posts.py); this is what pays
it. The first attempt is made at once. When the edge cannot confirm it (Slack
answering 5xx or 429 beyond the client's own retries, or no answer), the post is
tried again after 1 s, 2 s, 4 s … (at most `MAX_BACKOFF_S` apart) until
`retry_window_s` after its claim; then it is given up, with an error in the log.
Every retry, and every post a restart finds owed, is marked `recheck`, so the edge
looks in the thread for an earlier attempt that did land before posting again:
whatever happened, a reminder is posted once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Protocol

from bot.clock import utcnow
from bot.concurrency import TaskSet, backoff_s
from bot.store import PostState, Store
from bot.types import ReminderOutcome, ReminderPost

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0


class ReminderEdge(Protocol):
    """The part of `EngineOutput` a delivery needs."""

    async def reminder(self, post: ReminderPost) -> ReminderOutcome: ...


class ReminderPoster:
    """The deadline is kept in real time (the claim's wall-clock time), whatever clock decides what is due."""

    def __init__(
        self, *, store: Store, edge: ReminderEdge, retry_window_s: float, first_backoff_s: float = FIRST_BACKOFF_S
    ) -> None:
        self._store = store
        self._edge = edge
        self._first_backoff_s = first_backoff_s
        self._retry_window_s = retry_window_s
        self._retries = TaskSet()

    async def deliver(self, post: ReminderPost) -> ReminderOutcome:
        """One attempt now; a post that did not land is retried in the background. Returns the first outcome."""
        outcome = await self._attempt(post)
        if outcome is ReminderOutcome.RETRY:
            self._retry_later(replace(post, recheck=True), attempt=1)
        return outcome

    def resume(self, posts: list[ReminderPost]) -> None:
        """At start: posts an earlier process claimed and never saw confirmed (they may have landed: recheck)."""
        for post in posts:
            self._retry_later(replace(post, recheck=True), attempt=0)

    @property
    def retrying(self) -> int:
        """Posts waiting for their next attempt."""
        return len(self._retries)

    async def stop(self) -> None:
        """Stop retrying; what is still owed stays in the store for the next start."""
        await self._retries.close()

    async def _attempt(self, post: ReminderPost) -> ReminderOutcome:
        try:
            outcome = await self._edge.reminder(post)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("posting reminder %d (due %s) failed", post.reminder_id, post.due_at.isoformat())
            outcome = ReminderOutcome.RETRY
        if outcome is ReminderOutcome.POSTED:
            await self._store.settle_reminder_post(post, PostState.POSTED)
        elif outcome is ReminderOutcome.UNDELIVERABLE:
            log.error("reminder %d cannot be posted in %s; giving it up", post.reminder_id, post.session_key)
            await self._store.settle_reminder_post(post, PostState.ABANDONED)
        else:
            await self._store.reminder_post_attempted(post)
        return outcome

    def _retry_later(self, post: ReminderPost, *, attempt: int) -> None:
        self._retries.spawn(self._retry(post, attempt), f"reminder-post:{post.reminder_id}")

    async def _retry(self, post: ReminderPost, attempt: int) -> None:
        deadline_s = self._retry_window_s
        while True:
            if attempt:
                await asyncio.sleep(backoff_s(attempt, first_s=self._first_backoff_s, max_s=MAX_BACKOFF_S))
            if await self._attempt(post) is not ReminderOutcome.RETRY:
                return
            attempt += 1
            if (utcnow() - post.claimed_at).total_seconds() >= deadline_s:
                log.error(
                    "reminder %d in %s not confirmed after %d attempts within %.0fs of its claim; giving it up",
                    post.reminder_id,
                    post.session_key,
                    attempt,
                    deadline_s,
                )
                await self._store.settle_reminder_post(post, PostState.ABANDONED)
                return
