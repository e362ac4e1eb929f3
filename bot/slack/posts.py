"""Every `chat.postMessage` of the process, paced per channel from what Slack answers.

Slack allows about one post a second in a channel, with short bursts, and says 429 +
`Retry-After` beyond that. Each channel keeps its belief of that allowance: a token
bucket that starts at Slack's burst (`burst`) and rate (`per_second`), so a quiet
channel's burst goes out at once. Only Slack's refusal slows a channel down: a 429
pauses the channel for its `Retry-After`, empties the bucket, halves the burst the
channel believes in and takes a tenth off its rate; every post Slack accepts earns a
little of both back, up to the starting values. One post of a channel is on the wire
at a time, so each refusal is learned before the next post goes. A post sent from a
full bucket (the first of a burst) refills it only from when Slack answered: Slack's
own bucket starts to refill when the post reaches it, later than it was sent, and a
count ahead of Slack's would cost a refusal and a pause at the end of the burst.

Posts waiting in a channel go in order of urgency, then of arrival. An answer (an
answer part, a notice, a final state, a reminder) goes ahead of a `PROGRESS` post (a
status message whose calls still run, which its own edits will supersede anyway),
unless that post has waited `PROGRESS_YIELD_S` longer than the answer: a busy
channel's answers are not held behind status messages, and a status message still
lands. Within a thread, order is the caller's: a session's posts are sent one after
another (bot/slack/queues.py), so a thread's status message still precedes its answer;
urgency reorders posts of different threads.

A post that met a 429, a server error, a network error or no answer within
`call_timeout_s` is tried again, in its place, with backoff, for at most
`give_up_after_s`. What still has not landed then is not dropped: `PostFailed` tells the
caller to hand it to the outbox. A post Slack refuses for good (the channel is gone,
the message is invalid) raises `PostRejected`.

The client should not retry 429s itself (see `build_client`): here a 429 pauses the
channel, where the SDK's handler would sleep inside the call, blind to the others.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import TokenBucket, backoff_s
from bot.errors import SlackRateLimited, SlackRefused, SlackUnavailable, SlackUnreachable
from bot.telemetry.metrics import Metrics
from bot.telemetry.tracing import Tracing

log = logging.getLogger(__name__)

PER_SECOND = 1.0
BURST = 10
"""Slack's short burst in a channel, as observed: the allowance a channel starts with and recovers to."""
SLOW_DOWN = 0.9
"""A 429 leaves the channel this share of its rate (and half its burst)..."""
MIN_RATE_SHARE = 0.25
"""...never less than this share of `per_second`."""
RECOVER_SHARE = 0.01
"""Each post Slack accepts gives back this share of `per_second`..."""
BURST_RECOVERY = 0.1
"""...and this much of a post of burst: a burst halved by one refusal is whole again after ~50 posts."""
PROGRESS_YIELD_S = 300.0
"""A progress post yields to answers queued up to this long after it, and no longer: it is not starved. Long,
because a thread's answer waits behind its own status post: the threads already under way finish first."""
CALL_TIMEOUT_S = 15.0
GIVE_UP_AFTER_S = 60.0
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 15.0


class Priority(Enum):
    ANSWER = "answer"  # what a person waits for: an answer part, a notice, a final state, a reminder
    PROGRESS = "progress"  # a status message whose calls still run: its own edits supersede it


class PostFailed(Exception):
    """Not delivered after retrying for a while; it may still be owed (the outbox takes it)."""


class PostRejected(Exception):
    """Slack refused the post for good (its `error` says why); retrying cannot help."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


@dataclass
class PostStats:
    """What the queue did, for `/metrics` (`threadbot_slack_posts_*`)."""

    sent: int = 0
    rate_limited: int = 0
    retried: int = 0
    failed: int = 0  # handed back as PostFailed
    rejected: int = 0


@dataclass
class _Channel:
    """One channel's allowance as Slack has shown it, and the posts waiting for it (most urgent first)."""

    bucket: TokenBucket
    waiting: list[tuple[float, int, asyncio.Future[None]]] = field(default_factory=list)
    free: asyncio.Event = field(default_factory=asyncio.Event)  # no post of the channel on the wire
    pump: asyncio.Task[None] | None = None
    from_full: bool = False  # the post on the wire took the bucket's first token since it was full

    def __post_init__(self) -> None:
        self.free.set()


class PostQueue:
    def __init__(
        self,
        client: AsyncWebClient,
        *,
        per_second: float = PER_SECOND,
        burst: int = BURST,
        call_timeout_s: float = CALL_TIMEOUT_S,
        give_up_after_s: float = GIVE_UP_AFTER_S,
        progress_yield_s: float = PROGRESS_YIELD_S,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.stats = PostStats()
        self._metrics = metrics or Metrics()
        self._tracing = tracing or Tracing()
        self._client = client
        self._per_second = per_second
        self._burst = burst
        self._call_timeout_s = call_timeout_s
        self._give_up_after_s = give_up_after_s
        self._progress_yield_s = progress_yield_s
        self._clock = clock
        self._channels: dict[str, _Channel] = {}
        self._arrivals = itertools.count()

    async def post(
        self,
        *,
        channel: str,
        text: str,
        thread_ts: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
        priority: Priority = Priority.ANSWER,
    ) -> str:
        """Post and return the new message's ts; `PostFailed` or `PostRejected` when it did not land."""
        attributes = {"slack.channel.id": channel, "slack.post.priority": priority.value}
        with self._tracing.span("slack chat.postMessage", attributes, kind="client") as span:
            ts = await self._post(channel, text, thread_ts, blocks, metadata, priority)
            span.set({"slack.message.ts": ts})
            return ts

    @property
    def waiting(self) -> int:
        """Posts queued for their channel's turn (not those on the wire)."""
        return sum(1 for pace in self._channels.values() for *_, granted in pace.waiting if not granted.done())

    def backlog_s(self, channel: str) -> float:
        """About how long a post queued in `channel` now would wait: the posts ahead of it at the rate Slack
        is believed to allow, after a pause it asked for."""
        pace = self._channels.get(channel)
        if pace is None:
            return 0.0
        ahead = sum(1 for *_, granted in pace.waiting if not granted.done())
        return max(0.0, pace.bucket.paused_until - self._clock()) + ahead / pace.bucket.rate

    def allowance(self, channel: str) -> tuple[float, float]:
        """The (posts a second, burst) this queue now believes Slack allows in `channel`."""
        bucket = self._channel(channel).bucket
        return bucket.rate, bucket.capacity

    async def _post(
        self,
        channel: str,
        text: str,
        thread_ts: str | None,
        blocks: list[dict[str, Any]] | None,
        metadata: dict[str, Any] | None,
        priority: Priority,
    ) -> str:
        pace = self._channel(channel)
        queued_at = self._clock()
        order = queued_at + (self._progress_yield_s if priority is Priority.PROGRESS else 0.0)
        arrival = next(self._arrivals)
        deadline = queued_at + self._give_up_after_s
        attempts = 0
        while True:
            await self._turn(pace, order, arrival)
            sent_at = self._clock()
            try:
                async with asyncio.timeout(self._call_timeout_s):
                    response = await self._client.chat_postMessage(
                        channel=channel,
                        thread_ts=thread_ts,
                        text=text,
                        blocks=blocks,
                        metadata=metadata,
                        unfurl_links=False,
                        unfurl_media=False,
                        parse="none",
                        link_names=False,
                    )
                self.stats.sent += 1
                self._accepted(pace)
                self._metrics.observe("slack_post_lag_seconds", sent_at - queued_at)
                return str(response["ts"])
            except SlackRateLimited as exc:
                self.stats.rate_limited += 1
                self._refused(pace, exc.retry_after_s)
                log.info("chat.postMessage rate limited in %s; pausing its posts for %.0fs", channel, exc.retry_after_s)
                delay_s = 0.0
            except SlackUnavailable as exc:
                delay_s = self._backoff_s(attempts)
                log.warning("chat.postMessage in %s failed (HTTP %s, %s); retrying", channel, exc.status, exc.error)
            except SlackRefused as exc:
                self.stats.rejected += 1
                raise PostRejected(exc.reason) from None
            except (TimeoutError, SlackUnreachable) as exc:
                delay_s = self._backoff_s(attempts)
                log.warning("chat.postMessage in %s failed (%r); retrying", channel, exc)
            finally:
                pace.free.set()
            attempts += 1
            if self._clock() + delay_s > deadline:
                self.stats.failed += 1
                raise PostFailed(f"not delivered to {channel} after {attempts} attempts")
            self.stats.retried += 1
            pace.bucket.pause(self._clock(), delay_s)

    def _channel(self, channel: str) -> _Channel:
        pace = self._channels.get(channel)
        if pace is None:
            pace = self._channels[channel] = _Channel(TokenBucket(self._per_second, self._burst, self._clock()))
        return pace

    async def _turn(self, pace: _Channel, order: float, arrival: int) -> None:
        """Wait until the channel's pump hands this post the wire (a token taken for it); the caller then
        sends it and sets `pace.free`."""
        granted = asyncio.get_running_loop().create_future()
        heapq.heappush(pace.waiting, (order, arrival, granted))
        if pace.pump is None:
            pace.pump = asyncio.get_running_loop().create_task(self._pump(pace), name="slack-post-pump")
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                pace.free.set()  # handed the wire, then cancelled before sending: pass it on
            raise

    async def _pump(self, pace: _Channel) -> None:
        """Hands the wire to the most urgent waiting post whenever the channel may post; ends when none waits.

        It looks again after every wait: a post that arrived meanwhile may be more urgent, a 429 may have
        paused the channel."""
        try:
            while pace.waiting:
                await pace.free.wait()
                delay = pace.bucket.wait_s(self._clock())
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                _, _, granted = heapq.heappop(pace.waiting)
                if granted.done():  # its caller stopped waiting
                    continue
                pace.from_full = pace.bucket.tokens >= pace.bucket.capacity  # `wait_s` has just refilled it
                pace.bucket.take(self._clock())
                pace.free.clear()
                granted.set_result(None)
        finally:
            pace.pump = None

    def _accepted(self, pace: _Channel) -> None:
        bucket = pace.bucket
        if pace.from_full:  # Slack's bucket began to refill when the post reached it: say as late as can be
            bucket.forgo(self._clock())
        bucket.rate = min(self._per_second, bucket.rate + self._per_second * RECOVER_SHARE)
        bucket.capacity = min(float(self._burst), bucket.capacity + BURST_RECOVERY)

    def _refused(self, pace: _Channel, retry_after_s: float) -> None:
        """Slack said no: wait what it asked, and believe in a smaller allowance until posts land again."""
        bucket = pace.bucket
        bucket.rate_limited(self._clock(), retry_after_s)
        bucket.capacity = max(1.0, math.floor(bucket.capacity / 2))
        bucket.rate = max(self._per_second * MIN_RATE_SHARE, bucket.rate * SLOW_DOWN)

    @staticmethod
    def _backoff_s(attempts: int) -> float:
        """The pause after `attempts` earlier tries failed: the first retry waits `BACKOFF_BASE_S`."""
        return backoff_s(attempts + 1, first_s=BACKOFF_BASE_S, max_s=BACKOFF_MAX_S, jitter=random.random())


async def thread_holds(
    client: AsyncWebClient, *, channel: str, thread_ts: str, mark: dict[str, Any], max_pages: int | None = None
) -> bool:
    """Whether the thread holds a message carrying the metadata `mark` (a `SlackError` if it cannot be read):
    how a post that may have landed before a 500 or a kill is recognised before it is tried again. The
    walk starts at the root; past `max_pages` pages it gives up, and the post goes out unchecked."""
    first = await client.conversations_replies(channel=channel, ts=thread_ts, include_all_metadata=True, limit=200)
    pages = 0
    async for page in first:  # slack_sdk follows `next_cursor` itself
        if any(message.get("metadata") == mark for message in page.get("messages") or []):
            return True
        pages += 1
        if max_pages is not None and pages >= max_pages:
            log.warning("thread %s/%s too long to check for an earlier post", channel, thread_ts)
            break
    return False
