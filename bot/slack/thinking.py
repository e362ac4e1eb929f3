""" "is thinking…" under a session's thread while the model works (`assistant.threads.setStatus`).

Slack clears the status when the bot posts and after two minutes, so it is set again for
every model call. An app without the feature (no assistant scope, a token of the wrong
type) says so once; from then on it is not asked again.

The status runs in the session's queue (it must come before the answer it precedes, and its
clearing after), so it must never wait there. Slack's method docs give its rate limit only as
"Special", without a figure; it is taken to be Tier 3 (50+ a minute per workspace) like its twin
`agents.sessions.setStatus`. One token bucket for the whole process holds it to that, shared with
the cluster's other live replicas (`share_budget`). With no token there now, the status is skipped,
not waited for: it is cosmetic, and Slack clears it on the next post anyway (a skipped clearing
leaves it showing until then, or two minutes at most). A 429 pauses it for its `Retry-After`. Give
it a client that does not sleep out 429s itself (`build_client(retry_rate_limits=False)`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import TokenBucket
from bot.errors import SlackRateLimited, SlackResponseError
from bot.slack.sessions import Sessions

log = logging.getLogger(__name__)

THINKING = "is thinking…"
UNAVAILABLE = frozenset({"unknown_method", "missing_scope", "not_allowed_token_type", "method_deprecated"})
"""assistant.threads.setStatus errors that mean "this app cannot use it at all": stop trying."""
PER_MINUTE = 50.0
"""Tier 3's 50 a minute (assumed: the docs say "Special"); nothing is retried, so no room is kept for retries."""
BURST = 10


class ThinkingStatus:
    def __init__(
        self,
        client: AsyncWebClient,
        sessions: Sessions,
        *,
        per_minute: float = PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._sessions = sessions
        self._available = True
        self._clock = clock
        self._bucket = TokenBucket(per_minute / 60.0, BURST, clock())
        self.skipped = 0
        """Statuses not sent for want of a token (or during a 429's pause)."""

    def share_budget(self, replicas: int) -> None:
        """The budget is the workspace's: with `replicas` live processes each spends its share."""
        self._bucket.share(replicas)

    async def show(self, key: str, on: bool) -> None:
        """Show (or clear) "is thinking…" under the thread, if the budget has a token now; apps without the
        feature just skip it."""
        address = await self._sessions.address(key)
        if address is None or address.thread_ts is None or not self._available:
            return
        if not on and not address.thinking:
            return
        if not self._bucket.try_take(self._clock()):
            self.skipped += 1
            return
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=address.channel, thread_ts=address.thread_ts, status=THINKING if on else ""
            )
            address.thinking = on
        except SlackRateLimited as exc:
            self._bucket.rate_limited(self._clock(), exc.retry_after_s)
            log.info("assistant.threads.setStatus answered 429: 'thinking' paused for %.0f s", exc.retry_after_s)
        except SlackResponseError as exc:
            if exc.error in UNAVAILABLE:
                self._available = False
                log.info("assistant.threads.setStatus is not available (%s); not showing 'thinking'", exc.error)
