"""`/healthz`'s verdict from its parts, and how the Socket Mode record counts sessions (the e2e tests run it live)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import WSMessage, WSMsgType
from slack_sdk.socket_mode.aiohttp import SocketModeClient

from bot.slack.health import SocketHealth, daemon_health
from bot.telemetry.metrics import Metrics


@pytest.fixture
async def socket_client() -> AsyncIterator[SocketModeClient]:
    client = SocketModeClient(app_token="xapp-test")
    try:
        yield client
    finally:
        await client.close()


def frame(payload: dict[str, object]) -> WSMessage:
    return WSMessage(WSMsgType.TEXT, json.dumps(payload), None)


def test_http_mode_is_healthy_while_accepting() -> None:
    accepting = True
    health = daemon_health(lambda: accepting, None)
    assert health() == (True, {"accepting": True, "mode": "http", "status": "ok"})
    accepting = False
    assert health() == (False, {"accepting": False, "mode": "http", "status": "stopping"})


async def test_socket_mode_needs_a_live_connection(socket_client: SocketModeClient) -> None:
    socket = SocketHealth(socket_client, Metrics(), max_silence_s=0)
    ok, report = daemon_health(lambda: True, socket)()
    assert (ok, report["status"], report["mode"]) == (False, "disconnected", "socket")
    assert report["socket"] == {
        "connected": False,
        "sessions": 0,
        "reconnects": 0,
        "last_envelope_at": None,
        "last_pong_at": None,
    }


async def test_each_hello_is_a_session_and_later_ones_count_as_reconnects(socket_client: SocketModeClient) -> None:
    metrics = Metrics()
    socket = SocketHealth(socket_client, metrics, max_silence_s=0)
    [listener] = socket_client.on_message_listeners
    await listener(frame({"type": "hello"}))
    await listener(frame({"type": "events_api", "envelope_id": "e1"}))
    assert (socket.sessions, socket.reconnects, metrics.counts["socket_reconnects_total"]) == (1, 0, 0)
    await listener(frame({"type": "hello"}))
    await listener(WSMessage(WSMsgType.TEXT, "not json", None))  # counted as heard, not as a session
    assert (socket.sessions, socket.reconnects, metrics.counts["socket_reconnects_total"]) == (2, 1, 1)
    assert socket.report()["last_envelope_at"] is not None
    assert "threadbot_socket_reconnects_total 1.0\n" in metrics.render()
