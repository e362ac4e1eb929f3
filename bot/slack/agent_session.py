"""Agent sessions: every thread with a turn is one of Slack's agent sessions, its status what runs there.

Slack draws an agent session's status (`agents.sessions.setStatus`): `processing` shows a
spinner and the native **Stop** button (Slack shows Stop only then), `suspended` says the
agent waits, `active` that it is done and listening. A thread's status here is:

- `processing` while a turn runs or any of its calls runs (a call of an hour keeps it, so Stop
  stays there for the whole hour);
- `suspended` when nothing runs and the session only waits: for a person (an approval, an
  `ask_user` question) or for itself (a pending `wait_for` / `wait_until`);
- `active` otherwise.

It is fed by the engine output the edge already gets (turn started, calls started, a call
changed, turn finished), and decided when it is sent, from the live calls, so only the latest
state of a session is ever sent: a status that flips and flips back while a send waits for the
budget costs nothing. `setStatus` is Tier 3 (50+ calls a minute per workspace); every send takes a
token from one bucket of `per_minute` (40 by default, inside the tier) shared with the cluster's
other live replicas (`share_budget`), and a 429 empties the bucket and waits out `Retry-After`.
The first send of a session carries its title (the first request, which the events side keeps in
the session's address) and who started it; Slack ignores both once the session exists.

An app Slack does not take for an agent (`not_authorized`, `missing_scope` and the like) is said
once, in one line, and nothing is sent again: the threads look as they always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import TaskSet, TokenBucket, spend
from bot.errors import SlackRateLimited, SlackResponseError, SlackUnavailable, SlackUnreachable
from bot.slack.prompts import REFUSALS
from bot.store import ReminderKind, Store
from bot.toolcall import ToolCall

log = logging.getLogger(__name__)

PER_MINUTE = 40.0
"""Inside Tier 3's 50+ a minute, with room for the odd retry."""
BURST = 10
RETRY_S = 5.0
"""How long a session waits before its status is tried again when Slack could not be reached."""
TITLE_CHARS = 200
"""Slack's limit on a session's title."""
STOPPED_WARNING = "missing_agent_session_stopped_event_subscription"
REMEMBERED = 10_000
"""Sessions whose last sent status is kept; one forgotten is simply sent again when it next changes."""


class SessionStatus(StrEnum):
    PROCESSING = "processing"
    SUSPENDED = "suspended"
    ACTIVE = "active"


def status_of(*, turn_running: bool, calls: Iterable[ToolCall], waiting_for_itself: bool) -> SessionStatus:
    """What a session's status is, from what runs in it: pure, so it tests alone.

    A call waiting for a person does not run (Stop has nothing to stop there): it makes the session
    wait, as a pending wake-up does. `waiting_for_itself` is only asked when nothing else decides."""
    open_calls = [call for call in calls if not call.is_final]
    if turn_running or any(not call.awaiting_person for call in open_calls):
        return SessionStatus.PROCESSING
    if open_calls or waiting_for_itself:
        return SessionStatus.SUSPENDED
    return SessionStatus.ACTIVE


@dataclass(slots=True)
class _Session:
    turn_running: bool = False
    calls: dict[str, ToolCall] = field(default_factory=dict)
    sent: SessionStatus | None = None


@dataclass(frozen=True, slots=True)
class _Target:
    channel: str
    thread_ts: str
    title: str | None
    initiator: str | None


class AgentSessions:
    """Keeps each thread's agent session status in Slack, reading what the store knows of it; `start()` once
    the core is open."""

    def __init__(
        self, client: AsyncWebClient, store: Store, *, per_minute: float = PER_MINUTE, retry_s: float = RETRY_S
    ) -> None:
        self._client = client
        self._retry_s = retry_s
        self._bucket = TokenBucket(per_minute / 60.0, BURST, time.monotonic())
        self._store = store
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._targets: dict[str, _Target] = {}
        self._dirty: OrderedDict[str, None] = OrderedDict()
        """Sessions whose status may have changed, in the order they first did: the oldest is sent first."""
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks = TaskSet()
        self._started = False
        self.refused = False
        """Slack does not take the app for an agent: nothing is sent any more."""
        self._warned = False
        self.sent = 0

    def share_budget(self, replicas: int) -> None:
        """The budget is the workspace's: with `replicas` live processes each spends its share."""
        self._bucket.share(replicas)

    # -- what the edge reports ----------------------------------------------------------------

    def turn_started(self, key: str) -> None:
        self._session(key).turn_running = True
        self._mark(key)

    def calls_started(self, key: str, calls: list[ToolCall]) -> None:
        session = self._session(key)
        session.calls.update((call.id, call) for call in calls if not call.is_final)
        self._mark(key)

    def call_changed(self, call: ToolCall) -> None:
        session = self._session(call.session_key)
        if call.is_final:
            session.calls.pop(call.id, None)
        else:
            session.calls[call.id] = call
        self._mark(call.session_key)

    def turn_finished(self, key: str) -> None:
        self._session(key).turn_running = False
        self._mark(key)

    def settle(self, key: str) -> None:
        """Send the session's status as this process sees it now (after a Stop, whatever ran elsewhere)."""
        self._mark(key)

    # -- the sender ---------------------------------------------------------------------------

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._tasks.spawn(self._run(), "slack-agent-sessions")

    async def close(self, timeout_s: float) -> None:
        """Give the statuses still to send (turns ended by the shutdown) `timeout_s`, then stop."""
        if self._started:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout_s)
        await self._tasks.close(0)

    async def _run(self) -> None:
        while not self.refused:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty and not self.refused:
                key = next(iter(self._dirty))
                try:
                    await self._next(key)
                except Exception:  # a store that failed a read: this status is lost, not every later one
                    log.exception("the agent session status of %s was not sent", key)
                    self._dirty.pop(key, None)
            if not self._dirty:
                self._idle.set()

    async def _next(self, key: str) -> None:
        if await self._target(key) is None or await self._current(key) == self._session(key).sent:
            self._dirty.pop(key, None)  # nowhere to say it, or nothing new: no token spent
            return
        await spend(self._bucket)
        self._dirty.pop(key, None)
        await self._send(key)

    async def _current(self, key: str) -> SessionStatus:
        """The status from the live calls; the store is asked for the session's waits only when nothing else decides."""
        session = self._session(key)
        calls = list(session.calls.values())
        status = status_of(turn_running=session.turn_running, calls=calls, waiting_for_itself=False)
        if status is not SessionStatus.ACTIVE:
            return status
        return status_of(turn_running=False, calls=calls, waiting_for_itself=await self._waits(key))

    async def _waits(self, key: str) -> bool:
        """Whether the session has a wake-up pending (its own `wait_for` / `wait_until`)."""
        return any(reminder.kind is ReminderKind.WAKE for reminder in await self._store.pending_reminders(key))

    async def _send(self, key: str) -> None:
        target = await self._target(key)
        if target is None:
            return
        session = self._session(key)
        status = await self._current(key)
        first = session.sent is None
        try:
            response = await self._client.agents_sessions_setStatus(
                channel_id=target.channel,
                thread_ts=target.thread_ts,
                status=status.value,
                title=target.title if first else None,
                initiator_user_id=target.initiator if first else None,
            )
        except SlackRateLimited as exc:
            self._bucket.rate_limited(time.monotonic(), exc.retry_after_s)
            self._mark(key)
            return
        except (SlackUnavailable, SlackUnreachable, TimeoutError) as exc:
            log.info("agents.sessions.setStatus in %s failed (%s); trying again", key, str(exc) or type(exc).__name__)
            self._retry_later(key)
            return
        except SlackResponseError as exc:
            if str(exc.error) in REFUSALS:
                self._refuse(str(exc.error))
            else:  # this thread's session is refused (gone, archived): the others go on
                log.info("agents.sessions.setStatus in %s failed: %s", key, exc.reason)
                session.sent = status
            return
        session.sent = status
        self.sent += 1
        self._note_warning(response.get("warning"))

    def _retry_later(self, key: str) -> None:
        def again() -> None:
            self._mark(key)

        asyncio.get_running_loop().call_later(self._retry_s, again)

    def _refuse(self, error: str) -> None:
        self.refused = True
        self._dirty.clear()
        self._idle.set()
        log.warning(
            "Slack refuses agents.sessions.setStatus (%s): the app is not declared an agent (features.agent_view "
            "in deploy/slack-manifest.yml), so threads show no agent session status and no Stop button",
            error,
        )

    def _note_warning(self, warning: Any) -> None:
        if not self._warned and warning and STOPPED_WARNING in str(warning):
            self._warned = True
            log.warning(
                "Slack warns %s: subscribe the app to agent_session_stopped (deploy/slack-manifest.yml), "
                "else Slack shows no Stop button",
                STOPPED_WARNING,
            )

    async def _target(self, key: str) -> _Target | None:
        """Where the session lives, from its stored address; None for one with no thread (yet) or not Slack's."""
        target = self._targets.get(key)
        if target is not None:
            return target
        record = await self._store.get_session(key)
        address = record.address if record is not None else {}
        channel, thread_ts = address.get("channel"), address.get("thread_ts")
        if address.get("edge", "slack") != "slack" or not channel or not thread_ts:
            return None
        title = address.get("title")
        requester = address.get("requester")
        target = _Target(
            channel=str(channel),
            thread_ts=str(thread_ts),
            title=str(title)[:TITLE_CHARS] if title else None,
            initiator=str(requester) if requester else None,
        )
        self._targets[key] = target
        return target

    # -- internals ----------------------------------------------------------------------------

    def _session(self, key: str) -> _Session:
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session()
            while len(self._sessions) > REMEMBERED:
                old, forgotten = next(iter(self._sessions.items()))
                if forgotten.turn_running or forgotten.calls or old in self._dirty:
                    break
                del self._sessions[old]
                self._targets.pop(old, None)
        else:
            self._sessions.move_to_end(key)
        return session

    def _mark(self, key: str) -> None:
        if self.refused:
            return
        self._dirty.setdefault(key, None)
        self._idle.clear()
        self._wake.set()
