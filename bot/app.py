"""Wiring: the one place where the parts are built and joined, and torn down in reverse.

Every edge (Slack, console, oneshot) opens the same `Core` with itself as the
engine's output. `open_core` is the lifespan: it owns the store, the registry,
the scheduler and the model client, and closes them even when start-up fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.agent.budget import TokenBudget
from bot.agent.compaction import Compactor
from bot.agent.context import ContextSettings
from bot.agent.engine import Engine
from bot.agent.prompt import system_prompt
from bot.agent.toolbox import Toolbox
from bot.agent.turn import AskerLookup, TurnRunner, TurnSettings
from bot.calls.registry import CallRegistry
from bot.calls.system_tools import system_tools
from bot.config import Settings
from bot.mcp.config import load_mcp_config
from bot.model.client import deferred_anthropic_provider
from bot.model.metering import MeteredProvider, UsageMeter
from bot.operator_tools import SourcedTool, load_entry_point_tools, load_module_tools, unique_tools
from bot.policy import Policy
from bot.schedule import Scheduler, build_scheduler
from bot.schedule.firing import Clock
from bot.store import Store, open_store
from bot.store.lock import exclusive_database
from bot.telemetry.agent import AgentTelemetry
from bot.toolcall import ToolCall
from bot.types import EngineOutput, Provider, SessionFilter, TimezoneLookup
from tools import builtin_tools
from tools.base import Tool
from tools.sandbox import Sandbox

if TYPE_CHECKING:
    from bot.cluster.node import ClusterNode
    from bot.mcp.source import McpTools

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5.0


@dataclass(slots=True)
class Core:
    settings: Settings
    store: Store
    registry: CallRegistry
    toolbox: Toolbox
    engine: Engine
    provider: Provider
    scheduler: Scheduler
    usage: UsageMeter
    orphans: list[ToolCall]
    """Calls a previous process left unfinished, marked orphaned at this start (edges may repaint them)."""
    mcp: McpTools | None = None
    """The MCP servers of BOT_MCP_CONFIG, when set."""


def fixed_tools(settings: Settings, registry: CallRegistry, operator: list[SourcedTool]) -> list[Tool]:
    """Built-in, system and operator tools; a name declared twice stops the start, naming both origins."""
    builtin = [SourcedTool(item, "the built-in tools") for item in builtin_tools(shell=settings.shell)]
    system = [
        SourcedTool(item, "the system tools")
        for item in system_tools(registry, wait_max_s=settings.bot_status_wait_max_s)
    ]
    return unique_tools([*builtin, *system, *operator])


@contextlib.asynccontextmanager
async def open_core(
    settings: Settings,
    output: EngineOutput,
    *,
    provider: Provider | None = None,
    prompt_extra: str = "",
    abandon_on_exit: bool = False,
    user_timezone: TimezoneLookup | None = None,
    clock: Clock | None = None,
    owns: SessionFilter | None = None,
    askers: AskerLookup | None = None,
    before_store_closes: Callable[[], Awaitable[None]] | None = None,
    cluster: ClusterNode | None = None,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    telemetry: AgentTelemetry | None = None,
) -> AsyncIterator[Core]:
    """Build the engine around `output`; on exit stop turns and calls, then close the store.

    With `abandon_on_exit` (oneshot) calls still running are left `orphaned` instead
    of being waited for: the process is going away without finishing them.
    `user_timezone` names the asking person's zone for reminders (the Slack edge
    passes a `users.info` lookup); `clock` is "now" for the scheduler (tests);
    `owns` keeps the scheduler to this edge's sessions; `askers` tells the tool policy who asks in a
    session (the Slack edge adds the channel and user groups); `shutdown_grace_s` is how long running
    turns and calls get to finish at exit (tests shorten it). `before_store_closes` lets an
    edge send what the shutdown itself produced while the store can still be written.
    With `cluster` (BOT_DATABASE_URL) this process is one replica: its turns run as the
    cluster's thread jobs, it orphans only dead replicas' calls, and at exit it hands the
    threads it cut short to the others. `telemetry` receives the engine's spans and durations.
    """
    if settings.shell is not None and settings.shell.sandbox is Sandbox.NONE:
        log.warning(
            "BOT_SHELL_SANDBOX=none: run_command sees every file the daemon can (bot.db included); only its "
            "environment is scrubbed. Keep it for a container that is itself the boundary"
        )
    # Loaded first: a broken operator module or MCP file stops the start before anything opens.
    operator = [*load_module_tools(settings.bot_tool_modules), *load_entry_point_tools()]
    mcp_servers = load_mcp_config(settings.bot_mcp_config) if settings.bot_mcp_config else []
    policy = Policy.load(settings.bot_policy_file)
    telemetry = telemetry or AgentTelemetry()
    async with contextlib.AsyncExitStack() as stack:
        if settings.database_url is None:
            stack.enter_context(exclusive_database(settings.db_path))  # before recovery orphans anyone's calls
        store = await open_store(settings, replica=cluster.id if cluster is not None else None)
        stack.push_async_callback(store.close)
        if cluster is not None:
            await cluster.open()  # the lease first: the store's fence refuses writes without one
            stack.push_async_callback(cluster.close)
        if provider is None:
            model = deferred_anthropic_provider(settings)
            stack.push_async_callback(model.close)
            provider = model
        usage = UsageMeter()
        provider = MeteredProvider(provider, book=store, meter=usage, model=settings.bot_model, telemetry=telemetry)
        registry = CallRegistry(
            store=store,
            work_dir=settings.work_root,
            max_concurrent=settings.bot_max_concurrent_tools,
            max_per_session=settings.bot_max_concurrent_tools_per_session,
            max_io=settings.bot_max_concurrent_io_tools,
            default_timeout_s=settings.bot_tool_timeout_s,
            approval_timeout_s=settings.bot_approval_timeout_s,
            zone=settings.zone,
            max_per_user=settings.bot_max_concurrent_tools_per_user,
            notice=output.notice,
            telemetry=telemetry,
        )
        # On PostgreSQL every open call may be a live replica's: only the reaper orphans, and only a dead one's.
        orphans = await registry.recover(replicas=[] if settings.database_url is not None else None)
        registry.subscribe(output.call_changed)
        toolbox = Toolbox(fixed_tools(settings, registry, operator))
        mcp = None
        if mcp_servers:
            from bot.mcp.source import McpTools  # the SDK takes seconds to import; only load it when used

            # Entered after the store, so it closes before it; its calls are cancelled by the registry's
            # shutdown first, while the sessions can still tell the servers.
            mcp = await stack.enter_async_context(McpTools(mcp_servers, reserved=toolbox.names))
            toolbox.add_source(mcp)
        if settings.database_url is None:  # a cluster's replicas take up the gone ones' as they reap them
            registry.take_up_asked(await store.adopt_asked_calls(), toolbox.get)
        runner = TurnRunner(
            provider=provider,
            registry=registry,
            store=store,
            toolbox=toolbox,
            output=output,
            settings=TurnSettings(
                max_iterations=settings.bot_max_iterations,
                tool_result_max_chars=settings.bot_tool_result_max_chars,
                yield_strategy=settings.bot_yield_strategy,
                yield_on_injection=settings.bot_yield_on_injection,
            ),
            system_prompt=lambda session_key: system_prompt(settings.zone, prompt_extra),
            policy=policy,
            askers=askers,
            compactor=Compactor(
                provider=provider,
                settings=ContextSettings(
                    window_tokens=settings.bot_context_window,
                    compact_at=settings.bot_compact_at,
                    max_input_chars=settings.bot_max_input_chars,
                ),
            ),
            budget=TokenBudget(
                store, per_user=settings.bot_daily_tokens_per_user, per_channel=settings.bot_daily_tokens_per_channel
            )
            if settings.bot_daily_tokens_per_user or settings.bot_daily_tokens_per_channel
            else None,
            telemetry=telemetry,
        )
        engine = Engine(
            runner=runner,
            registry=registry,
            store=store,
            output=output,
            max_injections_per_turn=settings.bot_max_injections_per_turn,
            host=cluster,
        )
        scheduler = build_scheduler(
            settings,
            store=store,
            engine=engine,
            output=output,
            provider=provider,
            toolbox=toolbox,
            user_timezone=user_timezone,
            clock=clock,
            owns=owns,
            periodic=cluster.ticks if cluster is not None else None,
        )
        await scheduler.start()
        if cluster is not None:
            from bot.store.postgres import PostgresStore  # psycopg's pool: cluster mode only

            assert isinstance(store, PostgresStore)
            cluster.attach(
                store=store,
                engine=engine,
                scheduler=scheduler,
                take_up_asked=lambda calls: _take_up(registry, calls, toolbox),
            )
        core = Core(settings, store, registry, toolbox, engine, provider, scheduler, usage, orphans, mcp)
        try:
            yield core
        finally:
            await scheduler.stop()  # first: no wait may come due into an engine that is shutting down
            if abandon_on_exit:
                # The engine first: an orphaned call must not look like news that starts a turn.
                await engine.shutdown(grace_s=0)
                await registry.abandon()
            elif cluster is not None:
                await _hand_over(cluster, engine, registry, shutdown_grace_s)
            else:
                await engine.shutdown(grace_s=shutdown_grace_s)
                await registry.shutdown(grace_s=shutdown_grace_s)
            if before_store_closes is not None:
                await before_store_closes()


async def _take_up(registry: CallRegistry, calls: list[ToolCall], toolbox: Toolbox) -> None:
    registry.take_up_asked(calls, toolbox.get)


async def _hand_over(cluster: ClusterNode, engine: Engine, registry: CallRegistry, grace_s: float) -> None:
    """A replica's exit: take no more turns, let running ones finish for a grace period, then offer
    the threads cut short to the other replicas (their input is still owed in the store).

    A replica that lost its lease has nothing left to hand over: another one is taking its threads
    (its writes are refused already), so it stops its turns and calls at once, finishing nothing."""
    worker = asyncio.create_task(cluster.stop_jobs())
    if cluster.lost.is_set():
        await engine.shutdown(grace_s=0)
        await registry.abandon()
        await worker
        return
    cut_short = await engine.shutdown(grace_s=grace_s)
    await registry.shutdown(grace_s=grace_s)
    await worker
    for key in cut_short:
        try:
            await cluster.offer(key)
        except Exception as exc:  # the others' backstop finds the owed input anyway
            log.warning("could not hand %s to another replica: %s", key, exc)
