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
import gc
import importlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot import __version__
from bot.app import Core, open_ground, run_core
from bot.config import Settings
from bot.coordination import Crew
from bot.errors import ConfigError, ThreadbotError
from bot.schedule.heartbeat import HEARTBEAT_SESSION_PREFIX
from bot.slack.admission import Admission
from bot.slack.agent_session import AgentSessions
from bot.slack.app import (
    REQUEST_TIMEOUT_S,
    Identity,
    Ingress,
    build_app,
    build_client,
    meet_slack,
    slack_http_session,
)
from bot.slack.approvals import ApprovalButtons
from bot.slack.askers import PolicyAskers
from bot.slack.cancel import Canceller
from bot.slack.edits import EditScheduler
from bot.slack.events import INJECTION_REACTION, MessageRouter
from bot.slack.feedback_clicks import FeedbackButtons
from bot.slack.filters import SESSION_PREFIX
from bot.slack.health import daemon_health
from bot.slack.journal import FinalJournal
from bot.slack.output import SlackEdge
from bot.slack.posts import PostQueue
from bot.slack.socket_thread import SocketThread, relay_to
from bot.slack.surface import agent_surface
from bot.slack.tokens import token_problem
from bot.store import OwedMessage
from bot.telemetry.agent import AgentTelemetry
from bot.telemetry.metrics import Metrics
from bot.telemetry.tracing import Tracing
from bot.toolcall import ToolCall

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
INGRESS_GRACE_S = 5.0
LATE_IMPORTS = ("bot.model.anthropic", "jsonschema")
LISTENER_SHUTDOWN_S = 2.0  # per aiohttp listener (Events API, metrics): open requests get this long


async def serve(settings: Settings, *, port: int, slack_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
    """Run the daemon until SIGTERM/SIGINT: Socket Mode with `SLACK_APP_TOKEN`, else HTTP on `port`.

    `slack_timeout_s` bounds the start-up questions to Slack (`meet_slack`), as `check` bounds its own."""
    app_token = settings.slack_app_token.get_secret_value() if settings.slack_app_token else None
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN: required for run (the bot token, xoxb-…)")
    if app_token is None and settings.slack_signing_secret is None:
        raise ConfigError("SLACK_SIGNING_SECRET: required in HTTP mode (or set SLACK_APP_TOKEN for Socket Mode)")
    if (problem := token_problem(settings)) is not None:
        raise ConfigError(problem)
    async with slack_http_session() as session:
        client = build_client(settings, session)
        # Both tokens before any restart work: a refused one must not resume turns, then exit.
        me = await meet_slack(client, app_token, slack_timeout_s)
        pacing_client = build_client(settings, session, retry_rate_limits=False)
        telemetry = AgentTelemetry(Metrics(), Tracing.from_environ())
        signals = _Signals(asyncio.get_running_loop())
        try:
            await _run(settings, client, pacing_client, me, app_token, port, signals.stopping, telemetry)
        except asyncio.CancelledError:
            if not signals.forced:
                raise
            log.warning("stopped without waiting for running work")
        finally:
            signals.remove()
            await telemetry.tracing.close()
    log.info("threadbot stopped%s", signals.took())


async def _run(
    settings: Settings,
    client: AsyncWebClient,
    pacing_client: AsyncWebClient,
    me: Identity,
    app_token: str | None,
    port: int,
    stopping: asyncio.Event,
    telemetry: AgentTelemetry,
) -> None:
    """In order: the store and the lease, the Slack edge on them, the core around the edge, the events in,
    and the listeners last; torn down in reverse. The edits and posts get `pacing_client`, on the same
    connection pool without the 429 retries (see `build_client`); every other Slack call goes through `client`."""
    metrics = telemetry.metrics
    ingress: Ingress | None = None
    async with contextlib.AsyncExitStack() as stack:
        ground = await stack.enter_async_context(open_ground(settings, replica=True))
        coordination = ground.coordination
        edits = EditScheduler(
            pacing_client,
            per_minute=settings.bot_slack_edits_per_minute,
            journal=FinalJournal(ground.store),
            metrics=telemetry.metrics,
        )
        posts = PostQueue(pacing_client, metrics=telemetry.metrics, tracing=telemetry.tracing)
        await edits.start()
        stack.push_async_callback(edits.close, settings.bot_stop_flush_s)
        edge = SlackEdge(
            client,
            edits,
            store=ground.store,
            shared=coordination.shared,
            team_id=me.team_id,
            metrics=metrics,
            posts=posts,
            upload_over_chars=settings.bot_upload_over_chars,
            tracing=telemetry.tracing,
            agent_sessions=(agent_sessions := AgentSessions(client, ground.store)),
            surface=settings.bot_slack_surface,
            stream_client=pacing_client,
        )

        def owns(key: str) -> bool:
            return key.startswith((SESSION_PREFIX, HEARTBEAT_SESSION_PREFIX))

        async def flush_slack() -> None:
            """Once the core has stopped, while the store is open: what is not delivered by then stays owed
            in it, for the next start. A replica that lost its lease sends nothing more: the thread is
            another replica's now."""
            revoked = ingress is not None and ingress.revoked.is_set()
            drain = 0.0 if coordination.lost.is_set() or revoked else 1.0
            await edge.close(settings.bot_stop_flush_s * drain)
            await edits.close(settings.bot_stop_flush_s * drain)

        # Posts the shutdown itself queued (cancelled calls) still record where they went.
        stack.push_async_callback(flush_slack)
        core = await stack.enter_async_context(
            run_core(
                ground,
                edge,
                user_timezone=edge.sessions.user_timezone,
                askers=PolicyAskers(client, edge.sessions, uses_groups=ground.extensions.policy.uses_groups),
                owns=owns,
                telemetry=telemetry,
            )
        )
        agent_sessions.start()
        ingress = _ingress(settings, client, core, edge, me, telemetry)
        await edge.resume()
        await edge.repaint(core.orphans)
        crew = Crew(
            engine=core.engine,
            scheduler=core.scheduler,
            take_up_asked=lambda calls: core.registry.take_up_asked(calls, core.toolbox.get),
            edge=_SlackDuties(edge, ingress),
            owns=owns,
        )
        await coordination.join(crew)  # once events can be cancelled: from here on this process takes work
        stack.push_async_callback(ingress.close, INGRESS_GRACE_S)
        _gauges(metrics, core, edge, edits, posts, ingress)
        socket_thread, socket = None, None
        if app_token is not None:
            app = build_app(settings, client, ingress, me, relay_to(asyncio.get_running_loop()))
            socket_thread = SocketThread(
                app,
                app_token,
                base_url=client.base_url,
                timeout_s=client.timeout,
                ping_interval_s=settings.bot_socket_ping_interval_s,
                metrics=metrics,
                max_silence_s=settings.bot_socket_max_silence_s,
            )
            stack.push_async_callback(socket_thread.close)  # first on the way out: no reconnect while closing
            socket = await socket_thread.start()
            metrics.gauge("socket_connected", "1 while the Socket Mode connection is up", lambda: socket.connected)
        else:
            app = build_app(settings, client, ingress, me)
        if settings.bot_metrics_port is not None:
            health = daemon_health(lambda: ingress.accepting, socket)
            runner = await _listen(metrics.web_app(health), settings.bot_metrics_port, host=settings.bot_metrics_host)
            stack.push_async_callback(runner.cleanup)
        if socket_thread is not None:
            await socket_thread.connect()
            _log_start(settings, me, "Socket Mode")
        else:
            events_app = app.web_app(path=EVENTS_PATH, port=port)
            events_app.middlewares.append(metrics.timed("event_ack_seconds"))  # bolt answers once it has acked
            runner = await _listen(events_app, port)
            stack.push_async_callback(runner.cleanup)
            _log_start(settings, me, f"HTTP events on port {port} at {EVENTS_PATH}")
        await _freeze_start_up()
        await _until_set(stopping, ingress.revoked, coordination.lost)
        if coordination.lost.is_set():
            log.error("stopping at once: this replica lost its lease, and its threads are another's now")
        elif not ingress.revoked.is_set():  # a revocation was said once, when it came (Ingress.revoke)
            log.info("stopping: no new events; letting running work finish")
        await core.scheduler.stop()  # no heartbeat, wait or reminder starts new work while the rest winds down
    if ingress.revoked.is_set():
        # Exit status 2, as for a bad configuration: a supervisor must not restart a daemon whose token is gone.
        raise ConfigError(
            f"SLACK_BOT_TOKEN: Slack sent {ingress.revoked_by}, the token no longer works; "
            "reinstall the app and set its new tokens"
        )
    if coordination.lost.is_set():
        # Not 0: a supervisor (systemd's Restart=on-failure, compose's restart policy) starts a new replica.
        raise ThreadbotError("this replica lost its lease in the database and stopped; start it again")


async def _freeze_start_up() -> None:
    """What start-up built (modules, clients, the app: some 200k objects) lives as long as the daemon. Left
    in the collector's generations, every full collection walks all of it on the event loop, a pause of
    150-250 ms that lands on whatever event is being acked; frozen, collections see only what came after.
    What start-up leaves out to say hello sooner is part of it, imported here in a worker thread so that no
    first turn pays for it on the loop: the model SDK (its import began while the daemon connected,
    bot/model/client.py) and jsonschema, which checks a call's arguments (bot/agent/toolbox.py).

    Frozen without a collection first: that collection would be the very pause this avoids, with the GIL held
    (the Socket Mode thread's acks wait for it too), to free the few hundred objects start-up leaves
    unreachable, which stay instead."""
    for module in LATE_IMPORTS:
        await asyncio.to_thread(importlib.import_module, module)
    gc.freeze()


def _log_start(settings: Settings, me: Identity, mode: str) -> None:
    """One line that tells an operator who is up, where, and with what, in words."""
    log.info(
        "threadbot %s is up as %s; %s; model %s; data dir %s",
        __version__,
        me.describe(),
        mode,
        settings.bot_model,
        settings.bot_data_dir.resolve(),
    )


def _ingress(
    settings: Settings,
    client: AsyncWebClient,
    core: Core,
    edge: SlackEdge,
    me: Identity,
    telemetry: AgentTelemetry,
) -> Ingress:
    """Events in: messages, cancels and decisions, each handed to the coordination seam where its work
    may be another process's."""
    metrics = telemetry.metrics
    admission = Admission.of(settings, me.team_id)
    coordination = core.coordination
    canceller = Canceller(
        client=client,
        engine=core.engine,
        registry=core.registry,
        board=edge.board,
        turns=edge.turns,
        sessions=edge.sessions,
        settings=settings,
        metrics=metrics,
        coordination=coordination,
        admission=admission,
        store=core.store,
        agent_sessions=edge.agent_sessions,
    )
    approvals = ApprovalButtons(
        client=client,
        registry=core.registry,
        admission=admission,
        metrics=metrics,
        store=core.store,
        coordination=coordination,
    )
    router = MessageRouter(
        client=client,
        store=core.store,
        engine=core.engine,
        edge=edge,
        sessions=edge.sessions,
        settings=settings,
        bot_user_id=me.user_id,
        metrics=metrics,
        coordination=coordination,
        admission=admission,
        answers=approvals,
    )
    home, threads = agent_surface(settings, client, core, edge, me, metrics, admission)
    return Ingress(
        router=router,
        canceller=canceller,
        approvals=approvals,
        metrics=metrics,
        ack_after=coordination.shared,
        tracing=telemetry.tracing,
        home=home,
        threads=threads,
        feedback=FeedbackButtons(client=client, store=core.store, admission=admission, metrics=metrics),
    )


class _SlackDuties:
    """What the Slack edge does for the coordination seam (`EdgeDuties`)."""

    def __init__(self, edge: SlackEdge, ingress: Ingress) -> None:
        self._edge = edge
        self._ingress = ingress

    async def repaint(self, orphans: list[ToolCall]) -> None:
        await self._edge.repaint(orphans)

    def take_over(self, owed: list[OwedMessage]) -> None:
        self._edge.take_over(owed)

    def share_budget(self, processes: int) -> None:
        self._edge.share_budget(processes)
        if self._edge.agent_sessions is not None:
            self._edge.agent_sessions.share_budget(processes)
        if self._ingress.home is not None:
            self._ingress.home.share_budget(processes)

    async def injected(self, ref: dict[str, Any]) -> None:
        await self._ingress.router.react(ref["channel"], ref["ts"], INJECTION_REACTION)

    async def relayed(self, kind: str, body: dict[str, Any]) -> None:
        await self._ingress.relayed(kind, body)


async def _until_set(*events: asyncio.Event | None) -> None:
    """Wait for the first of these events (a signal, or a lost lease) to be set."""
    waits = [asyncio.create_task(event.wait()) for event in events if event is not None]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def _gauges(
    metrics: Metrics, core: Core, edge: SlackEdge, edits: EditScheduler, posts: PostQueue, ingress: Ingress
) -> None:
    metrics.count_tasks(asyncio.get_running_loop())
    metrics.gauge("tool_calls_running", "tool calls running now", lambda: core.registry.running_count)
    metrics.gauge("handlers_in_flight", "Slack events being handled", lambda: len(ingress.tasks))
    metrics.gauge("sessions_posting", "sessions with Slack posts queued", lambda: edge.busy_sessions)
    metrics.gauge("status_messages_open", "status messages with calls not final", edge.board.open_messages)
    metrics.gauge("slack_edits_sent", "chat.update calls that landed", lambda: edits.stats.sent)
    metrics.gauge("slack_edits_coalesced", "edits replaced by a newer state", lambda: edits.stats.coalesced)
    metrics.gauge("slack_edits_rate_limited", "chat.update 429s", lambda: edits.stats.rate_limited)
    metrics.gauge("slack_edits_gone", "edits dropped: message gone", lambda: edits.stats.gone)
    metrics.gauge("slack_edits_timed_out", "chat.update calls unanswered in time", lambda: edits.stats.timed_out)
    metrics.gauge("slack_posts_sent", "chat.postMessage calls that landed", lambda: posts.stats.sent)
    metrics.gauge("slack_posts_rate_limited", "chat.postMessage 429s", lambda: posts.stats.rate_limited)
    metrics.gauge("slack_posts_retried", "chat.postMessage calls tried again", lambda: posts.stats.retried)
    metrics.gauge("slack_posts_handed_back", "posts handed to the outbox", lambda: posts.stats.failed)
    metrics.gauge("slack_posts_rejected", "posts Slack refused for good", lambda: posts.stats.rejected)
    metrics.gauge("slack_posts_waiting", "posts waiting for their channel's turn", lambda: posts.waiting)
    metrics.gauge("slack_posts_owed", "posts kept in the outbox until Slack has them", lambda: edge.outbox_owed)
    if (sessions := edge.agent_sessions) is not None:
        metrics.gauge("agent_session_statuses_sent", "agent session statuses that landed", lambda: sessions.sent)
    _token_counters(metrics, core)


def _token_counters(metrics: Metrics, core: Core) -> None:
    """Four token counters and the estimated cost by model, read from the core's `UsageMeter` when scraped."""
    totals = core.usage.totals
    prices = core.settings.prices

    def reader(part: str) -> Callable[[], dict[str, float]]:
        return lambda: {model: float(getattr(usage, part)) for model, usage in totals.items()}

    for name, kind, part in (
        ("model_input_tokens_total", "uncached input tokens", "input_tokens"),
        ("model_output_tokens_total", "output tokens", "output_tokens"),
        ("model_cache_read_tokens_total", "input tokens read from the prompt cache", "cache_read_tokens"),
        ("model_cache_write_tokens_total", "input tokens written to the prompt cache", "cache_write_tokens"),
    ):
        metrics.counter_family(name, f"{kind}, by model", "model", reader(part))

    def cost() -> dict[str, float]:
        return {model: prices[model].cost(usage) for model, usage in totals.items() if model in prices}

    metrics.counter_family(
        "model_cost_usd_total", "estimated US$ of the model calls (BOT_MODEL_PRICES), by model", "model", cost
    )


async def _listen(app: web.Application, port: int, *, host: str = "0.0.0.0") -> web.AppRunner:
    """Serve `app` on `host:port`; the Events API listens everywhere (Slack must reach it), metrics where told."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=LISTENER_SHUTDOWN_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ThreadbotError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from exc
    return runner


class _Signals:
    """SIGTERM/SIGINT set `stopping`; a second one cancels the serving task outright."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task = asyncio.current_task()
        self.stopping = asyncio.Event()
        self.forced = False
        self._since: float | None = None
        for signum in self.SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._on_signal, signum)

    def _on_signal(self, signum: signal.Signals) -> None:
        if not self.stopping.is_set():
            log.info("%s received", signum.name)
            self._since = self._loop.time()
            self.stopping.set()
        elif self._task is not None and not self.forced:
            log.warning("second %s: stopping now", signum.name)
            self.forced = True
            self._task.cancel()

    def took(self) -> str:
        """How long the stop took since the first signal, as a suffix for the final line."""
        return "" if self._since is None else f" ({self._loop.time() - self._since:.1f}s after the signal)"

    def remove(self) -> None:
        for signum in self.SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self._loop.remove_signal_handler(signum)
