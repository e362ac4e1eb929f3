"""The App Home: each person's running calls, waits, reminders, threads and week, kept current while open.

Slack says a person opened the home tab with `app_home_opened` (`tab: home`) and never says
when they leave, so an opening is watched for `watch_s`: the view is published at once and
again every `refresh_s` while watched (elapsed times move, calls end, on this replica or any
other), and at once after a Cancel pressed in it. Everything in it is read from the store,
so it is right after a restart and whichever replica the event reached.

`views.publish` is Tier 4 (100+ calls a minute per workspace). Every publish takes a token
from one bucket of `per_minute` (80 by default, inside the tier) shared with the cluster's
other live replicas (`share_budget`), so many people watching at once see slower refreshes,
never a 429 storm; a 429 that comes anyway empties the bucket. A home tab the app has not enabled
(`not_enabled`) is said once, and nothing more is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.clock import utcnow
from bot.concurrency import TaskSet, TokenBucket, spend
from bot.config import Settings
from bot.errors import SlackRateLimited, SlackResponseError, SlackUnreachable
from bot.slack.admission import Admission
from bot.slack.filters import may_cancel
from bot.slack.home_view import MAX_THREADS, PersonWork, home_view
from bot.store import Reminder, Store
from bot.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

WATCH_S = 600.0
"""How long an opening is taken to mean the tab is still on screen."""
REFRESH_S = 15.0
PUBLISHES_PER_MINUTE = 80.0
BURST = 10

CancelReminder = Callable[[int, str], Awaitable[Reminder | None]]
"""Cancels a pending reminder (id, session key) wherever it is scheduled; the scheduler's `cancel`."""


def thread_link(workspace_url: str, address: dict[str, Any]) -> str | None:
    """A link to a session's thread: `https://team.slack.com/archives/C…/p…` (the root's ts without its dot)."""
    channel, thread_ts = address.get("channel"), address.get("thread_ts")
    if not workspace_url or not channel or not thread_ts:
        return None
    return f"{workspace_url.rstrip('/')}/archives/{channel}/p{str(thread_ts).replace('.', '')}"


def week_start(now: datetime) -> datetime:
    """Monday 00:00 UTC of `now`'s week: what "this week" counts from."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


class HomeTab:
    """Publishes and refreshes each watching person's home tab; cancels reminders from its buttons."""

    def __init__(
        self,
        *,
        client: AsyncWebClient,
        store: Store,
        settings: Settings,
        cancel_reminder: CancelReminder,
        requesters: Callable[[str], Awaitable[set[str]]],
        admission: Admission,
        metrics: Metrics,
        workspace_url: str = "",
        watch_s: float = WATCH_S,
        refresh_s: float = REFRESH_S,
        per_minute: float = PUBLISHES_PER_MINUTE,
    ) -> None:
        self._client = client
        self._store = store
        self._settings = settings
        self._cancel_reminder = cancel_reminder
        self._requesters = requesters
        self._admission = admission
        self._metrics = metrics
        self._workspace_url = workspace_url
        self._watch_s = watch_s
        self._refresh_s = refresh_s
        self._bucket = TokenBucket(per_minute / 60.0, BURST, time.monotonic())
        self._until: dict[str, float] = {}
        """Who is watching, and until when (monotonic)."""
        self._pokes: dict[str, asyncio.Event] = {}
        self._tasks = TaskSet()
        self._budget = asyncio.Lock()
        self._disabled = False

    async def opened(self, body: dict[str, Any]) -> None:
        """`app_home_opened`: on the home tab, publish for that person and watch it for `watch_s`."""
        event = body.get("event") or {}
        user = str(event.get("user") or "")
        if event.get("tab") != "home" or not user or self._disabled:
            return
        if not self._admission.admits(user, team=str(body.get("team_id") or "")):
            return
        self._until[user] = time.monotonic() + self._watch_s
        if user in self._pokes:
            self._pokes[user].set()
            return
        self._pokes[user] = asyncio.Event()
        if self._tasks.spawn(self._watch(user), f"slack-home:{user}") is None:
            self._pokes.pop(user, None)

    def share_budget(self, replicas: int) -> None:
        """The publish budget is the workspace's: with `replicas` live processes each spends its share."""
        self._bucket.share(replicas)

    def poke(self, user: str) -> None:
        """Something the person did in their home (a Cancel) changed it: publish again now."""
        if user in self._pokes:
            self._pokes[user].set()

    async def on_cancel_reminder(self, body: dict[str, Any]) -> None:
        """The Cancel of a wait or a reminder: only whoever set it, the session's requester or an allowed user."""
        person = body.get("user") or {}
        user = str(person.get("id") or "")
        if not self._admission.admits(user, team=str(person.get("team_id") or "")):
            log.info("ignoring a cancel of a reminder by %s: not someone the bot answers", user)
            return
        for action in body.get("actions") or []:
            value = str(action.get("value") or "")
            reminder = await self._store.get_reminder(int(value)) if value.isdigit() else None
            if reminder is None:
                continue
            requesters = await self._requesters(reminder.session_key) | {reminder.requester or ""}
            if not may_cancel(user, requesters=requesters - {""}, allowed_users=self._settings.bot_allowed_users):
                log.info("ignoring a cancel of reminder %d by %s: not whoever set it", reminder.id, user)
                continue
            if await self._cancel_reminder(reminder.id, reminder.session_key) is not None:
                self._metrics.inc("cancels_total")
        self.poke(user)

    async def close(self, timeout_s: float) -> None:
        self._until.clear()
        for poke in self._pokes.values():
            poke.set()
        await self._tasks.close(timeout_s)

    async def _watch(self, user: str) -> None:
        poke = self._pokes[user]
        try:
            while time.monotonic() < self._until.get(user, 0.0) and not self._disabled:
                poke.clear()
                await self._publish(user)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(poke.wait(), timeout=self._refresh_s)
        finally:
            self._pokes.pop(user, None)
            self._until.pop(user, None)

    async def _publish(self, user: str) -> None:
        view = home_view(await self.work_of(user), utcnow(), lambda address: thread_link(self._workspace_url, address))
        await self._take_token()
        try:
            await self._client.views_publish(user_id=user, view=view)
        except SlackRateLimited:
            self._bucket.drain(time.monotonic())
        except SlackResponseError as exc:
            if exc.error == "not_enabled":
                self._disabled = True
                log.warning("Slack refuses views.publish (not_enabled): the app's home tab is off; no App Home")
            else:
                log.info("views.publish for %s failed: %s", user, exc.reason)
        except (SlackUnreachable, TimeoutError) as exc:  # Slack out of reach: the next refresh tries again
            log.info("views.publish for %s failed: %s", user, str(exc) or type(exc).__name__)

    async def _take_token(self) -> None:
        """Wait for the budget's next token; one waiter at a time, so the bucket is never overdrawn."""
        async with self._budget:
            await spend(self._bucket)

    async def work_of(self, user: str) -> PersonWork:
        """What the home tab shows `user`, all of it from the store."""
        now = utcnow()
        calls = await self._store.open_calls_of(user)
        reminders = await self._store.pending_reminders_of(user)
        threads = await self._store.recent_threads_of(user, limit=MAX_THREADS)
        addresses: dict[str, dict[str, object]] = {thread.session_key: thread.address for thread in threads}
        keys = {call.session_key for call in calls} | {reminder.session_key for reminder in reminders}
        for key in keys - addresses.keys():
            record = await self._store.get_session(key)
            if record is not None:
                addresses[key] = record.address
        since = week_start(now)
        return PersonWork(
            user=user,
            calls=calls,
            reminders=reminders,
            threads=threads,
            addresses=addresses,
            tokens_this_week=await self._store.tokens_since(since, requester=user),
            model_calls_this_week=await self._store.model_calls_since(since, requester=user),
        )
