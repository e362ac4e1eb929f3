"""Slack's Socket Mode connection on a thread and event loop of its own, so an ack never waits for the daemon.

On the daemon's loop an envelope's ack waits for every callback that is ready before it: in a burst of
mentions that is hundreds of turns' model streams, store hand-offs and posts, and the ack's p99 grew with the
load (55 ms at 200 events/s, where bolt alone acks in 8 ms) while Slack redelivers what is not acked within
3 s. Here the websocket, bolt's dispatch and the ack run on a loop of their own; the listeners' work goes to
the daemon's loop (`relay`, which `build_app` puts around every listener), and a cluster's ack still waits
for that work's durable effect, as bolt's `process_before_response` has it. The thread holds the GIL only
for a frame's few hundred microseconds, and Python hands the GIL over within its switch interval (5 ms), so
what the daemon's loop is busy with no longer decides when Slack hears back.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.health import SocketHealth
from bot.telemetry.metrics import Metrics

T = TypeVar("T")
LISTENER_GRACE_S = 5.0
"""How long closing waits for listeners whose work is still running on the daemon's loop."""
Relay = Callable[[Coroutine[Any, Any, None]], Awaitable[None]]
"""How a listener's work reaches the loop it belongs to (the daemon's), from the loop bolt runs on."""


async def in_place(work: Coroutine[Any, Any, None]) -> None:
    """Where bolt runs on the daemon's own loop (HTTP events, tests): the work is simply awaited."""
    await work


async def run_on(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    """Run `work` on `loop` (another thread's) and wait for it here; cancelling the wait cancels the work."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))


def relay_to(loop: asyncio.AbstractEventLoop) -> Relay:
    """Each listener's work run on `loop` (the daemon's), from the loop bolt runs on."""
    return functools.partial(run_on, loop)


class SocketThread:
    """Owns the Socket Mode handler, its health watch, and the thread and loop they run on."""

    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        *,
        base_url: str,
        timeout_s: float,
        ping_interval_s: float,
        metrics: Metrics,
        max_silence_s: float,
    ) -> None:
        """`app`'s listeners must hand their work on through `relay_to(the daemon's loop)`: they run here."""
        self._app = app
        self._app_token = app_token
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._ping_interval_s = ping_interval_s
        self._metrics = metrics
        self._max_silence_s = max_silence_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="slack-socket", daemon=True)
        self._handler: AsyncSocketModeHandler | None = None
        self.health: SocketHealth | None = None

    async def start(self) -> SocketHealth:
        """Start the thread and build the handler and its health watch there, not connected yet."""
        self._thread.start()
        return await run_on(self._loop, self._build())

    async def connect(self) -> None:
        """Open the connection (raising what opening it raised) and start watching it."""
        await run_on(self._loop, self._connect())

    async def close(self) -> None:
        """Close the connection (Slack redelivers what it sends from now on), then stop the thread's loop."""
        if not self._thread.is_alive():
            return
        try:
            await run_on(self._loop, self._disconnect())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join)
            self._loop.close()

    async def _build(self) -> SocketHealth:
        # On this loop: the SDK client and the handler's aiohttp session belong to the loop they are made on.
        # The Socket Mode client reads slack_sdk's own errors when it reconnects (a rate-limited
        # apps.connections.open waits its Retry-After): it gets a plain SDK client, not the project's.
        web_client = AsyncWebClient(base_url=self._base_url, timeout=int(self._timeout_s))
        self._handler = AsyncSocketModeHandler(
            self._app, self._app_token, web_client=web_client, ping_interval=self._ping_interval_s
        )
        self.health = SocketHealth(self._handler.client, self._metrics, max_silence_s=self._max_silence_s)
        return self.health

    async def _connect(self) -> None:
        assert self._handler is not None and self.health is not None, "start() builds them"
        await self._handler.connect_async()  # type: ignore[no-untyped-call]
        self.health.start()

    async def _disconnect(self) -> None:
        if self.health is not None:
            await self.health.close()  # first: no reconnect while closing
        if self._handler is not None:
            await self._handler.close_async()  # type: ignore[no-untyped-call]
        # Listeners still waiting for their work on the daemon's loop (a cluster's ack waits for the durable
        # effect) get a moment; the rest are cancelled, their events unacked, so Slack delivers them again.
        listeners = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        if listeners:
            _, pending = await asyncio.wait(listeners, timeout=LISTENER_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
