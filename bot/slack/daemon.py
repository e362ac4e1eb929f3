"""`serve()`: the Slack daemon's lifespan, from the token check to a graceful stop.

Everything is built inside the running loop (bolt's Socket Mode handler and
aiohttp insist), in one `AsyncExitStack`, so it is torn down in reverse: stop
taking events (socket or HTTP listener closed), let the handlers in flight finish,
shut the core down (running turns get a grace period, then are cancelled), post
what the engine still had to say, and flush the final edits. SIGTERM and SIGINT
start that; a second signal cancels the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.app import Core, open_core
from bot.config import Settings
from bot.errors import ConfigError, ThreadbotError
from bot.schedule.heartbeat import HEARTBEAT_SESSION_PREFIX
from bot.slack.app import Identity, Ingress, build_app, build_client, identify
from bot.slack.cancel import Canceller
from bot.slack.edits import EditScheduler
from bot.slack.events import MessageRouter
from bot.slack.filters import SESSION_PREFIX
from bot.slack.metrics import Metrics
from bot.slack.output import SlackEdge

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
INGRESS_GRACE_S = 5.0
EDGE_DRAIN_S = 10.0
EDITS_FLUSH_S = 10.0


async def serve(settings: Settings, *, port: int) -> None:
    """Run the daemon until SIGTERM/SIGINT: Socket Mode with `SLACK_APP_TOKEN`, else HTTP on `port`."""
    app_token = settings.slack_app_token.get_secret_value() if settings.slack_app_token else None
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN: required for run (the bot token, xoxb-…)")
    if app_token is None and settings.slack_signing_secret is None:
        raise ConfigError("SLACK_SIGNING_SECRET: required in HTTP mode (or set SLACK_APP_TOKEN for Socket Mode)")
    async with aiohttp.ClientSession() as session:
        client = build_client(settings, session)
        me = await identify(client)
        edits = EditScheduler(build_client(settings, session, retry_rate_limits=False))
        signals = _Signals(asyncio.get_running_loop())
        try:
            await _run(settings, client, edits, me, app_token, port, signals.stopping)
        except asyncio.CancelledError:
            if not signals.forced:
                raise
            log.warning("stopped without waiting for running work")
        finally:
            signals.remove()


async def _run(
    settings: Settings,
    client: AsyncWebClient,
    edits: EditScheduler,
    me: Identity,
    app_token: str | None,
    port: int,
    stopping: asyncio.Event,
) -> None:
    """`edits` has a client of its own, on the same connection pool, without the 429 retries (see `build_client`);
    every other Slack call goes through `client`."""
    metrics = Metrics()
    async with contextlib.AsyncExitStack() as stack:
        await edits.start()
        stack.push_async_callback(edits.close, EDITS_FLUSH_S)
        edge = SlackEdge(
            client, edits, team_id=me.team_id, metrics=metrics, upload_over_chars=settings.bot_upload_over_chars
        )
        core = await stack.enter_async_context(
            open_core(
                settings,
                edge,
                user_timezone=edge.user_timezone,
                owns=lambda key: key.startswith((SESSION_PREFIX, HEARTBEAT_SESSION_PREFIX)),
                # Posts the shutdown itself queued (cancelled calls) still record where they went.
                before_store_closes=lambda: edge.close(EDGE_DRAIN_S),
            )
        )
        edge.attach(core.store)
        await edge.repaint(core.orphans)
        ingress = _ingress(settings, client, core, edge, me, metrics)
        stack.push_async_callback(ingress.close, INGRESS_GRACE_S)
        _gauges(metrics, core, edge, edits, ingress)
        if settings.bot_metrics_port is not None:
            runner = await _listen(metrics.web_app(lambda: ingress.accepting), settings.bot_metrics_port)
            stack.push_async_callback(runner.cleanup)
        app = build_app(settings, client, ingress, me)
        if app_token is not None:
            await _check_app_token(client, app_token)
            handler = AsyncSocketModeHandler(app, app_token)
            stack.push_async_callback(handler.close_async)
            await handler.connect_async()  # type: ignore[no-untyped-call]
            log.info("threadbot is up as <@%s> in team %s (Socket Mode)", me.user_id, me.team_id)
        else:
            runner = await _listen(app.web_app(path=EVENTS_PATH, port=port), port)
            stack.push_async_callback(runner.cleanup)
            log.info("threadbot is up as <@%s>: HTTP events on port %d%s", me.user_id, port, EVENTS_PATH)
        await stopping.wait()
        log.info("stopping: no new events; letting running work finish")


def _ingress(
    settings: Settings, client: AsyncWebClient, core: Core, edge: SlackEdge, me: Identity, metrics: Metrics
) -> Ingress:
    router = MessageRouter(
        client=client,
        store=core.store,
        engine=core.engine,
        edge=edge,
        settings=settings,
        bot_user_id=me.user_id,
        metrics=metrics,
    )
    canceller = Canceller(
        client=client, engine=core.engine, registry=core.registry, edge=edge, settings=settings, metrics=metrics
    )
    return Ingress(router=router, canceller=canceller, metrics=metrics)


def _gauges(metrics: Metrics, core: Core, edge: SlackEdge, edits: EditScheduler, ingress: Ingress) -> None:
    metrics.gauge("tool_calls_running", "tool calls running now", lambda: core.registry.running_count)
    metrics.gauge("handlers_in_flight", "Slack events being handled", lambda: len(ingress.tasks))
    metrics.gauge("sessions_posting", "sessions with Slack posts queued", lambda: edge.busy_sessions)
    metrics.gauge("status_messages_open", "status messages with calls not final", edge.board.open_messages)
    metrics.gauge("slack_edits_sent", "chat.update calls that landed", lambda: edits.stats.sent)
    metrics.gauge("slack_edits_coalesced", "edits replaced by a newer state", lambda: edits.stats.coalesced)
    metrics.gauge("slack_edits_rate_limited", "chat.update 429s", lambda: edits.stats.rate_limited)
    metrics.gauge("slack_edits_gone", "edits dropped: message gone", lambda: edits.stats.gone)


async def _check_app_token(client: AsyncWebClient, app_token: str) -> None:
    """Ask for a Socket Mode URL once: the SDK's own connect retries a refused token forever, quietly."""
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        raise ConfigError(f"SLACK_APP_TOKEN: Slack refused it ({exc.response.get('error')})") from None


async def _listen(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, "0.0.0.0", port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ThreadbotError(f"cannot listen on port {port}: {exc.strerror or exc}") from exc
    return runner


class _Signals:
    """SIGTERM/SIGINT set `stopping`; a second one cancels the serving task outright."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task = asyncio.current_task()
        self.stopping = asyncio.Event()
        self.forced = False
        for signum in self.SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._on_signal, signum)

    def _on_signal(self, signum: signal.Signals) -> None:
        if not self.stopping.is_set():
            log.info("%s received", signum.name)
            self.stopping.set()
        elif self._task is not None and not self.forced:
            log.warning("second %s: stopping now", signum.name)
            self.forced = True
            self._task.cancel()

    def remove(self) -> None:
        for signum in self.SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self._loop.remove_signal_handler(signum)
