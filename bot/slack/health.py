"""What `/healthz` says: is the daemon taking events, and is its Socket Mode connection alive.

slack_sdk's aiohttp client already keeps the connection up: it pings every `ping_interval`, marks the
session stale when no pong came back for four intervals, and reconnects (`monitor_current_session`);
aiohttp's own heartbeat closes a socket whose pong is late. Two things it lacks, and this module adds:

- a record of it: connected or not, how many sessions were opened (each begins with Slack's `hello`),
  when the last envelope and the last pong arrived. `/healthz` and `/metrics` show it.
- a bound on silence. A socket can answer pings and still deliver nothing (a known failure of Slack
  bots: the app looks up, nobody gets an answer). After `max_silence_s` without any envelope the
  connection is replaced, the same way the SDK replaces a stale one. A quiet workspace pays one
  reconnect per bound; Slack redelivers whatever it sent during the switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from aiohttp import WSMessage
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from bot.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

Report = dict[str, object]


def _iso(epoch_s: float | None) -> str | None:
    return None if epoch_s is None else datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")


class SocketHealth:
    """Watches one Socket Mode client: listens to its frames, and replaces a connection gone silent."""

    def __init__(self, client: SocketModeClient, metrics: Metrics, *, max_silence_s: float) -> None:
        """`max_silence_s` 0 turns the silence bound off (the SDK's ping/pong check still runs)."""
        self._client = client
        self._metrics = metrics
        self._max_silence_s = max_silence_s
        self._heard = asyncio.Event()
        self._watchdog: asyncio.Task[None] | None = None
        self.sessions = 0
        self._greeted: object | None = None  # the websocket Slack last said `hello` on
        self.last_envelope_at: float | None = None
        self._arrived: dict[str, float] = {}  # envelope id -> when its frame came in, until it is acked
        client.on_message_listeners.append(self._on_message)
        # After bolt's own listener (the handler appended it when built), which returns once the ack is sent.
        client.socket_mode_request_listeners.append(self._acked)

    @property
    def reconnects(self) -> int:
        return max(self.sessions - 1, 0)

    @property
    def connected(self) -> bool:
        """An open websocket on which Slack has said `hello`, which the SDK does not consider stale (it sets
        `stale` when pongs stop). Until its hello, Slack sends no events on a new connection."""
        session = self._client.current_session
        if session is None or session.closed or self._client.stale or self._client.closed:
            return False
        return session is self._greeted

    def report(self) -> Report:
        last_pong = self._client.last_ping_pong_time
        return {
            "connected": self.connected,
            "sessions": self.sessions,
            "reconnects": self.reconnects,
            "last_envelope_at": _iso(self.last_envelope_at),
            "last_pong_at": _iso(last_pong),
        }

    def start(self) -> None:
        if self._max_silence_s > 0:
            self._watchdog = asyncio.create_task(self._watch(), name="socket-silence-watchdog")

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    async def _on_message(self, message: WSMessage) -> None:
        """Every text frame is an envelope (events, `hello`, `disconnect`); a `hello` opens a session."""
        self.last_envelope_at = time.time()
        self._heard.set()
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            envelope = json.loads(message.data)
            if envelope.get("envelope_id"):
                self._arrived[str(envelope["envelope_id"])] = time.monotonic()
            if envelope.get("type") == "hello":
                self.sessions += 1
                self._greeted = self._client.current_session
                if self.sessions > 1:
                    self._metrics.inc("socket_reconnects_total")
                    log.info("Socket Mode reconnected (session %d)", self.sessions)

    async def _acked(self, client: object, request: SocketModeRequest) -> None:
        if (arrived := self._arrived.pop(request.envelope_id, None)) is not None:
            self._metrics.observe("event_ack_seconds", time.monotonic() - arrived)

    async def _watch(self) -> None:
        while True:
            self._heard.clear()
            try:
                # `asyncio.timeout`, not `wait_for`: on 3.11 `wait_for` swallows a cancel that arrives as the
                # envelope does, and the watchdog would then outlive `close()`, hanging the shutdown.
                async with asyncio.timeout(self._max_silence_s):
                    await self._heard.wait()
            except TimeoutError:
                log.warning("no Socket Mode envelope for %gs: replacing the connection", self._max_silence_s)
                try:
                    await self._client.connect_to_new_endpoint(force=True)
                except Exception as exc:  # the SDK retries on its own; the next bound tries again
                    log.warning("Socket Mode reconnect failed: %s", exc)


def daemon_health(accepting: Callable[[], bool], socket: SocketHealth | None) -> Callable[[], tuple[bool, Report]]:
    """Healthy while events are taken and, in Socket Mode, the connection is up; the report says which."""

    def health() -> tuple[bool, Report]:
        taking = accepting()
        report: Report = {"accepting": taking, "mode": "http" if socket is None else "socket"}
        ok = taking
        if socket is not None:
            report["socket"] = socket.report()
            ok = ok and socket.connected
        report["status"] = "ok" if ok else ("stopping" if not taking else "disconnected")
        return ok, report

    return health
