"""One turn in Slack's agent surface: a single message, streamed when Slack can start a stream now, whose text
and task cards outlive the stream.

The message is started with `chat.startStream` when the turn first has something to show, the model's
words and the calls' cards are appended with `chat.appendStream` (slack_sdk's `chat_stream` helper, with
its buffer off: the pacing here is the buffer), and it is closed with `chat.stopStream` once the turn is
over and every call it started is final.

Stream or plain post: starts are the scarce thing (Tier 2, 20 a minute for the whole workspace), so a turn
never queues behind them. When it first has something to show, it streams if a start token is there now
(for a turn already final, a start and a stop: it opens and closes in one go). If not, a turn already final
is posted whole at once (one `chat.postMessage` through the post queue, owed: no stream, no edit); one not
final waits up to `START_WAIT_S` (or, while edits or its channel's posts are backed up, as long as they would
take) for a start token or for its end, and is then streamed, or posted whole and from then on kept current
by `chat.update` exactly like a stream Slack ended (below). Either way it is one message per turn with its
task cards, a per-call cancel reaction on it, and a final state that always lands.

Slack ends a stream by itself: about five minutes after it started, after a pause, or whenever it likes;
`chat.appendStream` and `chat.stopStream` then answer `message_not_in_streaming_state`. That is never the
end of what the thread shows: the same message is from then on written whole with `chat.update` (its text
as a `markdown` block, each call a `task_card` block), through the process's `EditScheduler`, so an
hour-long call keeps its live progress and its final state lands like every final edit (retried, and kept
in the store until Slack shows it). This is what slack_sdk's maintainers point to (the helper exposes `ts`
for it), and it keeps one message per turn, where a follow-on stream would start a second. Nothing of the
text is lost on the way: the helper keeps the text of a failed append in its buffer and sends it with the
next one, and a rewrite shows the turn's whole text.

A kill -9 leaves no chance to say anything. So while the message streams, the state a restart would
leave it in (its running calls orphaned) is kept in the final journal without being sent
(`EditScheduler.keep_if_lost`); the next process delivers it as it delivers any owed final, and a stream
that closes normally takes it back (`forget_kept`).

Budgets (Slack's method docs): `chat.appendStream` is Tier 4 (100+ a minute), `chat.stopStream` Tier 2
(20+ a minute); `chat.startStream` is taken to be Tier 2 like its twin. Each is a workspace-wide token
bucket here (`StreamBudget`); one message is appended at most once a second (a card whose status did not
change, at most every `PROGRESS_INTERVAL_S`), a 429 pauses its method
for its `Retry-After`, and an edit after the stream spends `chat.update`'s Tier 3 budget in the
`EditScheduler` like every other edit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from slack_sdk.models.messages.chunk import TaskUpdateChunk
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import TokenBucket, backoff_s, spend
from bot.errors import SlackRateLimited, SlackRefused, SlackUnavailable, SlackUnreachable
from bot.slack.edits import EditScheduler
from bot.slack.render import Block, defuse
from bot.slack.task_cards import TEXT_MAX_CHARS, task_chunk, turn_message
from bot.toolcall import CallStatus, ToolCall

log = logging.getLogger(__name__)

APPEND_INTERVAL_S = 1.0
PROGRESS_INTERVAL_S = 3.0
"""How often a running call's card is appended when only its progress line moved."""
START_WAIT_S = 3.0
"""How long a turn with something to show but not final yet waits for a stream start (or for its end) when the
workspace has no start token now (longer while the edit budget is backed up: see `_start_token`): one refill
of `chat.startStream`'s Tier 2 (20 a minute, one every 3 s), so a budget only just emptied by a burst still
streams the next turn, and a turn that is about to end (an answer without calls mostly takes a second or two)
is posted once, whole, with no edit. Beyond it, a start would be a queue: the turn is posted and kept current
by `chat.update` instead."""
START_ATTEMPTS = 3
"""Failed starts (Slack unreachable, 5xx) before the turn is posted as a plain message instead."""
TIERS_PER_MINUTE = {"chat.startStream": 20.0, "chat.appendStream": 100.0, "chat.stopStream": 20.0}
BURSTS = {"chat.startStream": 5, "chat.appendStream": 10, "chat.stopStream": 5}
NOT_AN_AGENT = frozenset(
    {"not_authorized", "unknown_method", "missing_scope", "not_allowed_token_type", "no_permission", "not_enabled"}
)
"""What `chat.startStream` answers an app that may not stream at all (as opposed to a problem of one message)."""
_HOLD_BACK = 12
"""Characters at the end of the text held back while it streams if they may be the start of a mention."""


class StreamBudget:
    """Slack's limits on the three stream methods, for the whole process (they are the workspace's)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, scale: float = 1.0) -> None:
        self._clock = clock
        now = clock()
        self._buckets = {
            method: TokenBucket(per_minute * scale / 60.0, BURSTS[method], now)
            for method, per_minute in TIERS_PER_MINUTE.items()
        }

    async def spend(self, method: str) -> None:
        """Wait for a token of `method` (and the end of its 429 pause), then take it."""
        await spend(self._buckets[method], self._clock)

    def wait_s(self, *methods: str) -> float:
        """Seconds until a token of each of `methods` is there and none of them is paused (0: now)."""
        now = self._clock()
        return max(self._buckets[m].wait_s(now) for m in methods)

    def try_spend(self, *methods: str) -> bool:
        """Take a token of each of `methods` if every one is there now; else take none and say False."""
        if self.wait_s(*methods) > 0:
            return False
        now = self._clock()
        for method in methods:
            self._buckets[method].take(now)
        return True

    def share(self, replicas: int) -> None:
        """The limits are the workspace's: with `replicas` live processes each spends its share."""
        for bucket in self._buckets.values():
            bucket.share(replicas)

    def pause(self, method: str, seconds: float) -> None:
        self._buckets[method].rate_limited(self._clock(), seconds)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a turn's message goes, and who it is for (a channel stream needs its recipient)."""

    channel: str
    thread_ts: str
    team: str
    user: str | None


class Phase(enum.Enum):
    NEW = "new"  # nothing on Slack yet
    STREAMING = "streaming"
    EDITING = "editing"  # the stream is over: the message is written whole with chat.update
    UNPOSTED = "unposted"  # neither stream nor post landed: the final state is posted, owed, when it comes
    DONE = "done"


Poster = Callable[[str, list[Block], bool], Awaitable[tuple[str, str] | None]]


class TurnMessage:
    """The Slack side of one turn in agent mode; the engine's reports go in (`add_text`, `add_calls`,
    `changed`, `finish`) and never wait; one task of its own talks to Slack."""

    def __init__(
        self,
        session_key: str,
        *,
        client: AsyncWebClient,
        edits: EditScheduler,
        budget: StreamBudget,
        post: Poster,
        post_backlog_s: Callable[[str], float],
        refused: Callable[[str], None],
        append_interval_s: float = APPEND_INTERVAL_S,
        start_wait_s: float = START_WAIT_S,
    ) -> None:
        """`post` posts in the session's thread (owed: the outbox delivers it), `post_backlog_s` says how long
        a post in a channel would wait now; `refused` hears the error of a `chat.startStream` Slack refused."""
        self.session_key = session_key
        self.text = ""
        self._break = False  # the model's last answer ended: its next one starts a new paragraph
        self.calls: dict[str, ToolCall] = {}
        self.finished = False
        self.channel: str | None = None
        self.ts: str | None = None
        self.phase = Phase.NEW
        self._client = client
        self._edits = edits
        self._budget = budget
        self._post = post
        self._post_backlog_s = post_backlog_s
        self._refused = refused
        self._interval_s = append_interval_s
        self._start_wait_s = start_wait_s
        self._stream: AsyncChatStream | None = None
        self._given = 0  # characters of `text` handed to the stream helper (it keeps what failed to go)
        self._shown: dict[str, tuple[str, str]] = {}  # what the stream shows of each card: (status, details)
        self._sent_at: dict[str, float] = {}  # when each card was last appended
        self._rewake: asyncio.TimerHandle | None = None
        self._last_call = 0.0
        self._failures = 0
        self._revision = 0
        self._wake = asyncio.Event()
        self._opened = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ---- what the engine reports ------------------------------------------------------------------------------

    def add_text(self, delta: str) -> None:
        if self._break and delta.strip():
            self.text += "\n\n"
            self._break = False
        self.text += delta
        self._wake.set()

    def end_text(self) -> None:
        """One answer of the model is complete; another may follow in the same turn (after its calls)."""
        self._break = bool(self.text.strip())

    def add_calls(self, calls: list[ToolCall]) -> None:
        for call in calls:
            self.calls[call.id] = call
        self._wake.set()
        self._keep()

    def changed(self, call: ToolCall) -> bool:
        """A call of this message moved on; False if it is not one of its calls."""
        if call.id not in self.calls:
            return False
        self.calls[call.id] = call
        self._wake.set()
        if call.is_final:
            self._keep()
        return True

    def finish(self) -> None:
        """The turn is over (its calls may run on): the message closes once they are final too."""
        self.finished = True
        self._wake.set()
        self._keep()

    @property
    def final(self) -> bool:
        return self.finished and all(call.is_final for call in self.calls.values())

    @property
    def open_calls(self) -> list[ToolCall]:
        return [call for call in self.calls.values() if not call.is_final]

    # ---- Slack --------------------------------------------------------------------------------------------------

    def abandon(self) -> None:
        """The turn has nowhere to be shown (its session has no Slack thread): nothing is ever sent for it."""
        self.phase = Phase.DONE

    async def open(self, place: Place) -> None:
        """Start talking to Slack (run it in the session's queue: the message comes after what is posted before
        it); returns once the message exists, or its first attempt failed."""
        self._stream = await self._client.chat_stream(
            channel=place.channel,
            thread_ts=place.thread_ts,
            recipient_team_id=place.team or None,
            recipient_user_id=place.user,
            task_display_mode="timeline",
            buffer_size=1,
        )
        self.channel = place.channel
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"slack-turn:{self.session_key}")
        await self._opened.wait()

    async def close(self) -> None:
        """At shutdown: a final state not shown yet goes to the edit scheduler (which keeps it for the next start)."""
        if self._rewake is not None:
            self._rewake.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.final and self.phase in (Phase.STREAMING, Phase.EDITING) and self.ts is not None:
            self._edit()

    async def _run(self) -> None:
        try:
            while self.phase is not Phase.DONE:
                await self._wake.wait()
                self._wake.clear()
                if self.phase in (Phase.NEW, Phase.STREAMING):
                    await self._stream_once()
                elif self.phase is Phase.EDITING:
                    self._edit()
                elif self.phase is Phase.UNPOSTED and self.final:
                    await self._post_whole()
                self._opened.set()
        finally:
            self._opened.set()

    async def _stream_once(self) -> None:
        assert self._stream is not None
        if not (self.final or self._news()):
            return
        if (paid := await self._pay()) is None:
            await self._post_whole()
            return
        final, method = paid
        delta = self._text_delta(final)
        chunks = self._changed_cards()
        if not (final or delta or chunks):
            return
        self._given += len(delta)
        try:
            if final:
                await self._stream.stop(markdown_text=delta or None, chunks=[*chunks] or None)
            else:
                await self._stream.append(markdown_text=delta or None, chunks=[*chunks] if chunks else None)
        except SlackRateLimited as exc:
            self._budget.pause(method, exc.retry_after_s)
            self._wake.set()
            return
        except SlackRefused as exc:
            await self._ended(exc.error or exc.reason, method)
            return
        except (SlackUnavailable, SlackUnreachable, TimeoutError) as exc:
            await self._failed(method, exc)
            return
        finally:
            self._last_call = time.monotonic()
        self._failures = 0
        self._shown.update((chunk.id, _seen(chunk)) for chunk in chunks)
        self._sent_at.update((chunk.id, self._last_call) for chunk in chunks)
        if self.phase is Phase.NEW:
            self.ts = self._stream.ts
            self.phase = Phase.STREAMING
            self._keep()
        if final:
            self.phase = Phase.DONE
            if self.channel is not None and self.ts is not None:
                self._edits.forget_kept(self.channel, self.ts)
        elif self._news():
            self._wake.set()

    def _text_delta(self, final: bool) -> str:
        """The text not handed to the stream yet, within what one message shows; while more may come, the
        end is held back if it may be half a mention (`<!he`, `@chan`), which is made inert only whole."""
        end = min(len(self.text), TEXT_MAX_CHARS)
        if not final and not self.finished:
            tail = self.text[max(self._given, end - _HOLD_BACK) : end]
            cut = max(tail.rfind("<"), tail.rfind("@"))
            if cut >= 0 and ">" not in tail[cut:] and not tail[cut:].endswith((" ", "\n")):
                end -= len(tail) - cut
        return defuse(self.text[self._given : max(self._given, end)])

    def _changed_cards(self) -> list[TaskUpdateChunk]:
        """The cards to append: a new status at once; a new progress line once `PROGRESS_INTERVAL_S` has passed
        since the card was last appended (a woken check comes then), so a long call's ticking clock costs a
        few appends a minute of Tier 4's budget, not one a second."""
        now = time.monotonic()
        changed, due_in = [], None
        for chunk in map(task_chunk, self.calls.values()):
            shown = self._shown.get(chunk.id)
            if shown == _seen(chunk):
                continue
            wait_s = self._sent_at.get(chunk.id, -PROGRESS_INTERVAL_S) + PROGRESS_INTERVAL_S - now
            if shown is None or shown[0] != chunk.status or wait_s <= 0 or self.final:
                changed.append(chunk)
            else:
                due_in = wait_s if due_in is None else min(due_in, wait_s)
        if due_in is not None and not changed and self._rewake is None:
            self._rewake = asyncio.get_running_loop().call_later(due_in, self._woken)
        return changed

    def _woken(self) -> None:
        self._rewake = None
        self._wake.set()

    def _news(self) -> bool:
        """Whether the stream lags behind: text it may be given now, or a card that changed."""
        return bool(self._text_delta(self.final)) or bool(self._changed_cards())

    async def _pay(self) -> tuple[bool, str] | None:
        """Take the budget's tokens for the next stream call: whether it is the last (the stop) and its method;
        None when the stream cannot start soon (`_start_token`)."""
        if self.phase is Phase.NEW:
            if not await self._start_token():
                return None
            return (True, "chat.stopStream") if self.final else (False, "chat.startStream")
        final = self.final
        method = "chat.stopStream" if final else "chat.appendStream"
        await self._pace(method)
        if self.final and not final:  # it ended while this waited its turn: the stop closes it
            final, method = True, "chat.stopStream"
            await self._budget.spend(method)
        return final, method

    async def _start_token(self) -> bool:
        """Whether the stream may start now: the tokens it needs (a turn already final opens and closes it in one
        go: a start and a stop), now or, while the turn is not final, within `start_wait_s`. False: there are
        none to be had soon, and the turn is posted whole rather than kept waiting behind the workspace's starts."""
        # While edits are backed up, a message posted now could show none of the turn's changes before the edits
        # queued ahead of them have gone; while its channel's posts are, it would only wait in line, and land
        # showing what it showed when queued. For that long it waits for a start or for its end instead, and a
        # turn that ends meanwhile costs one post and no edit.
        backlog_s = max(self._edits.backlog_s(), self._post_backlog_s(self.channel) if self.channel else 0.0)
        deadline = time.monotonic() + max(self._start_wait_s, backlog_s)
        while True:
            methods = ("chat.startStream", "chat.stopStream") if self.final else ("chat.startStream",)
            if self._budget.try_spend(*methods):
                return True
            left_s = deadline - time.monotonic()
            if self.final or left_s <= 0:
                return False
            self._wake.clear()  # woken by the turn's news (it may be final now) or by the budget's next token
            # `asyncio.timeout`, not `wait_for`, which on 3.11 can swallow the cancel that closes this message.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left_s, self._budget.wait_s(*methods))):
                    await self._wake.wait()

    async def _pace(self, method: str) -> None:
        wait_s = self._last_call + self._interval_s - time.monotonic()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        await self._budget.spend(method)

    async def _ended(self, error: str, method: str) -> None:
        """Slack refused a stream call: a start that may not stream posts instead; an ended stream is rewritten."""
        if self.phase is Phase.NEW:
            self._refused(error)
            await self._post_whole()
            return
        log.info("%s in %s: %s; the message is kept current with chat.update", method, self.session_key, error)
        self.phase = Phase.EDITING
        self._wake.set()

    async def _failed(self, method: str, exc: BaseException) -> None:
        self._failures += 1
        log.warning("%s in %s failed (%s); retrying", method, self.session_key, exc)
        if self.phase is Phase.NEW and self._failures >= START_ATTEMPTS:
            await self._post_whole()
            return
        await asyncio.sleep(backoff_s(self._failures, first_s=0.5, max_s=30.0, jitter=random.random()))
        self._wake.set()

    async def _post_whole(self) -> None:
        """No stream for this turn: the message is posted whole (owed, once final) and then edited."""
        text, blocks = self._render()
        final = self.final
        where = await self._post(text, blocks, final)
        if where is not None:
            self.channel, self.ts = where
            self.phase = Phase.DONE if final else Phase.EDITING
            self._keep()
        else:  # owed if final (the outbox delivers it); else posted, owed, once final
            self.phase = Phase.DONE if final else Phase.UNPOSTED
        # What changed while the post was on its way woke the loop itself: nothing else is edited.

    def _edit(self) -> None:
        if self.channel is None or self.ts is None:
            return
        text, blocks = self._render()
        final = self.final
        self._edits.update(self.channel, self.ts, text=text, blocks=blocks, final=final)
        if final:
            self.phase = Phase.DONE

    def _render(self, calls: list[ToolCall] | None = None) -> tuple[str, list[Block]]:
        self._revision += 1
        return turn_message(
            self.text, calls if calls is not None else list(self.calls.values()), revision=str(self._revision)
        )

    def _keep(self) -> None:
        """Keep in the store what the message must show if this process dies now: its open calls orphaned."""
        if self.channel is None or self.ts is None or self.phase is Phase.DONE:
            return
        lost = [
            call if call.is_final or call.awaiting_person else dataclasses.replace(call, status=CallStatus.ORPHANED)
            for call in self.calls.values()
        ]
        text, blocks = self._render(lost)
        self._edits.keep_if_lost(self.channel, self.ts, text=text, blocks=blocks)


def _seen(chunk: TaskUpdateChunk) -> tuple[str, str]:
    return chunk.status, chunk.details or ""
