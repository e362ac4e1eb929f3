"""Every `chat.postMessage` of the process, paced per channel: Slack allows about one post a second in a channel.

Posts to one channel go one at a time, in the order they were asked for, through a
token bucket (`per_second`, short bursts of `burst`); a 429 pauses that channel for its
`Retry-After` and the post is tried again, as is one that met a server error, a
network error or no answer within `call_timeout_s`, with backoff, for at most
`give_up_after_s`. What still has not landed then is not dropped: `PostFailed`
tells the caller to hand it to the outbox. A post Slack refuses for good (the
channel is gone, the message is invalid) raises `PostRejected`.

The client should not retry 429s itself (see `build_client`): here a 429 pauses the
channel, where the SDK's handler would sleep inside the call, blind to the others.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import TokenBucket, backoff_s
from bot.errors import SlackRateLimited, SlackRefused, SlackUnavailable, SlackUnreachable
from bot.telemetry.metrics import Metrics
from bot.telemetry.tracing import Tracing

log = logging.getLogger(__name__)

PER_SECOND = 1.0
BURST = 3
CALL_TIMEOUT_S = 15.0
GIVE_UP_AFTER_S = 60.0
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 15.0


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
    bucket: TokenBucket
    paused_until: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class PostQueue:
    def __init__(
        self,
        client: AsyncWebClient,
        *,
        per_second: float = PER_SECOND,
        burst: int = BURST,
        call_timeout_s: float = CALL_TIMEOUT_S,
        give_up_after_s: float = GIVE_UP_AFTER_S,
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
        self._clock = clock
        self._channels: dict[str, _Channel] = {}

    async def post(
        self,
        *,
        channel: str,
        text: str,
        thread_ts: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Post and return the new message's ts; `PostFailed` or `PostRejected` when it did not land."""
        with self._tracing.span("slack chat.postMessage", {"slack.channel.id": channel}, kind="client") as span:
            ts = await self._post(channel, text, thread_ts, blocks, metadata)
            span.set({"slack.message.ts": ts})
            return ts

    async def _post(
        self,
        channel: str,
        text: str,
        thread_ts: str | None,
        blocks: list[dict[str, Any]] | None,
        metadata: dict[str, Any] | None,
    ) -> str:
        pace = self._channel(channel)
        queued_at = self._clock()
        deadline = queued_at + self._give_up_after_s
        attempts = 0
        async with pace.lock:
            while True:
                await self._wait_turn(pace)
                sent_at = self._clock()
                pace.bucket.take(sent_at)
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
                    self._metrics.observe("slack_post_lag_seconds", sent_at - queued_at)
                    return str(response["ts"])
                except SlackRateLimited as exc:
                    self.stats.rate_limited += 1
                    pace.paused_until = max(pace.paused_until, self._clock() + exc.retry_after_s)
                    pace.bucket.drain(self._clock())
                    log.info(
                        "chat.postMessage rate limited in %s; pausing its posts for %.0fs", channel, exc.retry_after_s
                    )
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
                attempts += 1
                if self._clock() + delay_s > deadline:
                    self.stats.failed += 1
                    raise PostFailed(f"not delivered to {channel} after {attempts} attempts")
                self.stats.retried += 1
                pace.paused_until = max(pace.paused_until, self._clock() + delay_s)

    def _channel(self, channel: str) -> _Channel:
        pace = self._channels.get(channel)
        if pace is None:
            pace = self._channels[channel] = _Channel(TokenBucket(self._per_second, self._burst, self._clock()))
        return pace

    async def _wait_turn(self, pace: _Channel) -> None:
        """Only the holder of the channel's lock moves its pause or takes its tokens: one wait is enough."""
        delay = max(pace.paused_until - self._clock(), pace.bucket.wait_s(self._clock()))
        if delay > 0:
            await asyncio.sleep(delay)

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
