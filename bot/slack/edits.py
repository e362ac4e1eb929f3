"""One scheduler for every ``chat.update`` of the process: Slack's edit budget, spent where it matters.

Why a single one: ``chat.update`` is limited per method per workspace (Tier 3, about 50 a minute), so a throttle
in each renderer would still add up to 429s. Here each message keeps only its newest desired state, edits of one
message are spaced, a token bucket keeps the whole process under the rate, a 429 pauses every edit until its
``Retry-After``, and a final state is retried until it lands or Slack says the message is gone.

A few calls may be in flight at once, each for a different message and each bounded by ``call_timeout_s``: one
call that Slack never answers then holds up only its own message (it is retried when its time is up), not every
edit of the process. Edits of one message never overlap, so they cannot overtake each other. The client given
here should not have slack_sdk's ``AsyncRateLimitErrorRetryHandler`` (the daemon's has not): that handler would
sleep out a 429 inside the call, blind to the pause, and only hand over the 429s it gave up on; here every 429
pauses every edit for its ``Retry-After``, drains the bucket, and the state that got it goes back in line with
its priority.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import TokenBucket, backoff_s
from bot.errors import SlackRateLimited, SlackResponseError, SlackUnavailable, SlackUnreachable
from bot.slack.journal import FinalJournal
from bot.slack.render import EmptyMessage, sendable
from bot.store import OwedMessage
from bot.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (channel, ts)

# chat.update errors meaning the message can no longer be edited: retrying cannot help.
GONE_ERRORS = frozenset(
    {"message_not_found", "channel_not_found", "cant_update_message", "is_archived", "edit_window_closed"}
)
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 30.0
# How many finalised messages to remember, so a late progress update cannot overwrite a final one.
FINAL_MEMORY = 4096
MAX_IN_FLIGHT = 4
"""Edits on the wire at once: enough that a stalled call does not stop the others, few enough to stay polite."""
CALL_TIMEOUT_S = 10.0
"""An edit Slack has not answered by then is given up for now and retried (an edit is safe to repeat)."""


@dataclass
class EditStats:
    """Counters for logs, metrics and tests."""

    sent: int = 0  # chat.update calls that landed
    coalesced: int = 0  # unsent states replaced by a newer state of the same message
    rate_limited: int = 0  # 429s that reached us (all of them, with a client without the SDK's 429 retries)
    retried: int = 0  # failed attempts queued again (429, 5xx, network, timeouts, rejected finals)
    timed_out: int = 0  # calls Slack did not answer within call_timeout_s
    dropped_nonfinal: int = 0  # non-final states given up: rejected, after the message's final, or at close()
    gone: int = 0  # states given up because the message can no longer be edited (final or not)


@dataclass
class _Edit:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]] | None
    final: bool
    since: float  # when this message started waiting: the longest wait goes first
    final_at: float  # when its final state was first asked for: among finals, the oldest goes first
    not_before: float  # backoff after a failure
    attempts: int = 0


class EditScheduler:
    """Owns every ``chat.update`` of the process; renderers call ``update()`` as often as they like."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        per_minute: float = 50,
        burst: int = 10,
        min_interval_s: float = 1.0,
        max_in_flight: int = MAX_IN_FLIGHT,
        call_timeout_s: float = CALL_TIMEOUT_S,
        journal: FinalJournal | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        """With a `journal`, every final state is also written to the store until Slack shows it (see journal.py)."""
        self.stats = EditStats()
        self._metrics = metrics or Metrics()
        self._journal = journal
        self._client = client
        self._min_interval_s = min_interval_s
        self._max_in_flight = max_in_flight
        self._call_timeout_s = call_timeout_s
        self._in_flight: dict[Key, asyncio.Task[None]] = {}
        self._on_wire: dict[Key, _Edit] = {}
        self._clock = clock
        self._bucket = TokenBucket(per_minute / 60.0, burst, clock())
        self._pending: dict[Key, _Edit] = {}
        self._last_sent: dict[Key, float] = {}  # only messages edited within the last min_interval_s
        self._finalized: OrderedDict[Key, None] = OrderedDict()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def update(
        self, channel: str, ts: str, *, text: str, blocks: list[dict[str, Any]] | None = None, final: bool = False
    ) -> None:
        """Record the newest desired state of a message; never blocks, never raises for Slack's sake.

        ``final=True`` is the message's last word: it is retried until it lands (or the message is gone), and
        later non-final states of that message are ignored, so a late progress tick cannot undo "done". A newer
        final still replaces it."""
        try:
            text, blocks = sendable(text, blocks)
        except EmptyMessage:
            log.error("not editing %s/%s into an empty message", channel, ts)
            return
        key = (channel, ts)
        old = self._pending.get(key)
        if not final and (self._closing or key in self._finalized or (old is not None and old.final)):
            self.stats.dropped_nonfinal += 1
            return
        if old is not None:
            self.stats.coalesced += 1
        now = self._clock()
        self._pending[key] = _Edit(
            channel,
            ts,
            text,
            blocks,
            final,
            since=old.since if old else now,
            final_at=old.final_at if old and old.final else now,
            not_before=old.not_before if old else now,
            attempts=old.attempts if old else 0,
        )
        if final:
            if self._journal is not None:
                self._journal.owe(channel, ts, text, blocks)
            self._finalized[key] = None
            self._finalized.move_to_end(key)
            if len(self._finalized) > FINAL_MEMORY:
                self._finalized.popitem(last=False)
        self._idle.clear()
        self._wake.set()

    def keep_if_lost(self, channel: str, ts: str, *, text: str, blocks: list[dict[str, Any]] | None) -> None:
        """Write a state to the journal without sending it: what the next process is to show if this one dies
        first (a streamed message, which is not edited while it streams). A final recorded since wins."""
        if self._journal is not None and (channel, ts) not in self._finalized:
            self._journal.owe(channel, ts, text, blocks)

    def forget_kept(self, channel: str, ts: str) -> None:
        """The message showed its last word by other means (its stream closed): nothing of it is owed now."""
        if self._journal is not None and (channel, ts) not in self._finalized:
            self._journal.settle(channel, ts, None)

    def share_budget(self, replicas: int) -> None:
        """Slack's edit budget is the workspace's: with `replicas` live processes each spends its share."""
        self._bucket.share(replicas)

    def backlog_s(self) -> float:
        """About how long the edits waiting now take to go at the budget's rate: how late a new message's next
        state would be shown (an upper bound for a final, which goes ahead of progress)."""
        return len(self._pending) / self._bucket.rate

    def resume(self, owed: list[OwedMessage]) -> None:
        """At start: the final states a previous process recorded but never got onto Slack, in line again."""
        for message in owed:
            if message.ts is not None and message.channel is not None:
                self.update(message.channel, message.ts, text=message.text, blocks=message.blocks, final=True)

    async def start(self) -> None:
        """Start the worker in the running loop (not in ``__init__``: the loop may not exist yet)."""
        if self._closing:
            raise RuntimeError("EditScheduler is closed")
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="slack-edit-scheduler")

    async def close(self, timeout_s: float = 10.0) -> None:
        """Drop pending progress, flush pending finals within ``timeout_s`` (still within the budget), stop.

        Once closed, closing again does nothing."""
        if self._closing:
            return
        self._closing = True
        for key, edit in list(self._pending.items()):
            if not edit.final:
                del self._pending[key]
                self.stats.dropped_nonfinal += 1
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await self.idle(timeout_s)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        calls = list(self._in_flight.values())
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        if self._pending:
            kept = "kept in the store for the next start" if self._journal is not None else "lost"
            log.warning("shutting down with %d final message edits undelivered (%s)", len(self._pending), kept)
        if self._journal is not None:
            await self._journal.close(timeout_s)
        self._idle.set()

    def owes_final(self, channel: str, ts: str) -> bool:
        """Whether a final state of this message is recorded but not shown yet."""
        key = (channel, ts)
        return any(e is not None and e.final for e in (self._pending.get(key), self._on_wire.get(key)))

    async def idle(self, timeout_s: float | None = None) -> None:
        """Wait until nothing is pending or on the wire; TimeoutError after ``timeout_s``."""
        await asyncio.wait_for(self._idle.wait(), timeout_s)

    # ---- the worker ------------------------------------------------------------------------------------------

    def _ready_at(self, edit: _Edit) -> float:
        """Spacing is checked here, not when the state is recorded, so an edit queued during its message's
        previous call still waits ``min_interval_s`` after that call lands."""
        last = self._last_sent.get((edit.channel, edit.ts))
        return edit.not_before if last is None else max(edit.not_before, last + self._min_interval_s)

    def _waiting(self) -> list[_Edit]:
        """Pending states whose message has no call on the wire (a message's edits never overlap)."""
        return [e for key, e in self._pending.items() if key not in self._in_flight]

    def _due_in(self, now: float) -> float | None:
        """Seconds until the next edit may go (0: now); None when nothing can go before a call ends.

        While the budget is spent (the usual state with hundreds of threads) no edit may go before it refills,
        whichever it is, so that wait is the answer without looking at the pending states: every new state wakes
        this loop, and scanning them all on each wake made the scheduler's CPU grow with the square of the threads.
        """
        if not self._pending or len(self._in_flight) >= self._max_in_flight:
            return None
        gate_s = self._bucket.wait_s(now)
        if gate_s > 0:
            return gate_s
        waiting = self._waiting()
        if not waiting:
            return None
        return max(0.0, min(self._ready_at(e) for e in waiting) - now)

    def _pick(self, now: float) -> _Edit:
        """Finals before progress, the oldest final first (so no final waits longer than it must), then the
        message whose progress has waited longest (fairness across threads)."""
        due = (e for e in self._waiting() if self._ready_at(e) <= now)
        edit = min(due, key=lambda e: (not e.final, e.final_at if e.final else e.since))
        del self._pending[(edit.channel, edit.ts)]
        return edit

    async def _run(self) -> None:
        """Sleep on the wake event (a new state, a call ending) or until the next edit is due; no polling tick."""
        while True:
            self._wake.clear()
            now = self._clock()
            delay = self._due_in(now)
            if delay is None:
                if not self._pending and not self._in_flight:
                    self._idle.set()
                await self._wake.wait()
            elif delay > 0:
                # `asyncio.timeout`, not `wait_for`, which on 3.11 can swallow the cancel that stops this loop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
            else:
                edit = self._pick(now)
                self._bucket.take(now)
                key = (edit.channel, edit.ts)
                call = asyncio.create_task(self._send(edit), name=f"slack-edit:{edit.channel}/{edit.ts}")
                self._in_flight[key], self._on_wire[key] = call, edit
                call.add_done_callback(functools.partial(self._landed, key))

    def _landed(self, key: Key, _call: asyncio.Task[None]) -> None:
        self._in_flight.pop(key, None)
        self._on_wire.pop(key, None)
        self._wake.set()

    async def _send(self, edit: _Edit) -> None:
        sent_at = self._clock()
        try:
            async with asyncio.timeout(self._call_timeout_s):
                await self._client.chat_update(
                    channel=edit.channel, ts=edit.ts, text=edit.text, blocks=edit.blocks, parse="none", link_names=False
                )
        except SlackResponseError as exc:
            self._on_api_error(edit, exc)
        except asyncio.CancelledError:
            # Stopped mid-call (close() ran out of time): a final is still owed, and counted as such.
            if edit.final:
                self._pending.setdefault((edit.channel, edit.ts), edit)
            else:
                self.stats.dropped_nonfinal += 1
            raise
        except TimeoutError:
            self.stats.timed_out += 1
            log.warning(
                "chat.update %s/%s: no answer within %.0fs; retrying", edit.channel, edit.ts, self._call_timeout_s
            )
            self._requeue(edit, backoff=True)
        except SlackUnreachable as exc:
            log.warning("chat.update %s/%s failed (%s); retrying", edit.channel, edit.ts, exc.reason)
            self._requeue(edit, backoff=True)
        except Exception:  # a bug or an SDK surprise must neither kill the worker nor lose a final
            log.exception("chat.update %s/%s raised unexpectedly; retrying", edit.channel, edit.ts)
            self._requeue(edit, backoff=True)
        else:
            now = self._clock()
            self.stats.sent += 1
            self._metrics.observe("slack_edit_lag_seconds", sent_at - edit.since)
            if edit.final and self._journal is not None:
                self._journal.settle(edit.channel, edit.ts, edit.text)
            self._last_sent = {k: t for k, t in self._last_sent.items() if t > now - self._min_interval_s}
            self._last_sent[(edit.channel, edit.ts)] = now

    def _on_api_error(self, edit: _Edit, exc: SlackResponseError) -> None:
        error = exc.error
        where = f"{edit.channel}/{edit.ts}"
        if isinstance(exc, SlackRateLimited):
            pause_s = exc.retry_after_s
            self.stats.rate_limited += 1
            self._bucket.rate_limited(self._clock(), pause_s)
            log.warning("chat.update rate limited at %s; pausing all edits for %.0fs", where, pause_s)
            self._requeue(edit, backoff=False)
        elif isinstance(exc, SlackUnavailable):
            log.warning("chat.update %s failed (HTTP %s, %s); retrying", where, exc.status, error)
            self._requeue(edit, backoff=True)
        elif error in GONE_ERRORS:
            self.stats.gone += 1
            if self._journal is not None:
                self._journal.settle(edit.channel, edit.ts, None)
            log.info("chat.update %s: %s; giving up on this message", where, error)
        elif edit.final:
            log.error("chat.update %s rejected a final state (%s); retrying with backoff", where, error)
            self._requeue(edit, backoff=True)
        else:
            self.stats.dropped_nonfinal += 1
            log.warning("chat.update %s rejected a progress state (%s); dropped", where, error)

    def _requeue(self, edit: _Edit, *, backoff: bool) -> None:
        """Put a failed state back, unless a newer one arrived meanwhile: it wins, keeping the place in line."""
        self.stats.retried += 1
        edit.attempts += 1
        if backoff:
            delay_s = backoff_s(edit.attempts, first_s=BACKOFF_BASE_S, max_s=BACKOFF_MAX_S, jitter=random.random())
            edit.not_before = self._clock() + delay_s
        key = (edit.channel, edit.ts)
        newer = self._pending.get(key)
        if newer is None:
            self._pending[key] = edit
            return
        self.stats.coalesced += 1
        newer.since = min(newer.since, edit.since)
        if edit.final and newer.final:
            newer.final_at = min(newer.final_at, edit.final_at)
        newer.not_before = max(newer.not_before, edit.not_before)
        newer.attempts = edit.attempts
