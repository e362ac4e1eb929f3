"""Wiring: the one place where the parts are built and joined, and torn down in reverse.

In order: `open_ground` opens the store with its lock or lease and picks the
coordination seam (the only place the mode is chosen); the edge is built on that
store; `run_core` builds the registry, the engine and the scheduler around the
edge as the engine's output, and stops them at exit before the ground closes.
`open_core` is both steps for the edges whose output needs no store (console, oneshot).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
from bot.coordination import Coordination, open_alone
from bot.mcp.config import McpServerConfig, load_mcp_config
from bot.model.client import deferred_anthropic_provider
from bot.model.metering import GroupedBook, MeteredProvider, UsageMeter
from bot.operator_tools import SourcedTool, load_entry_point_tools, load_module_tools, unique_tools
from bot.policy import Policy
from bot.schedule import Scheduler, build_scheduler
from bot.schedule.firing import Clock
from bot.store import Store
from bot.telemetry.agent import AgentTelemetry
from bot.toolcall import ToolCall
from bot.types import EngineOutput, Provider, SessionFilter, TimezoneLookup
from tools import builtin_tools
from tools.base import Tool
from tools.sandbox import Sandbox

if TYPE_CHECKING:
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
    coordination: Coordination
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


@dataclass(frozen=True, slots=True)
class Extensions:
    """What the operator configured beyond the variables: the tool modules, the MCP servers, the policy."""

    operator: list[SourcedTool]
    mcp_servers: list[McpServerConfig]
    policy: Policy

    @classmethod
    def load(cls, settings: Settings) -> Extensions:
        """Loaded before anything opens: a broken operator module, MCP file or policy stops the start there."""
        return cls(
            operator=[*load_module_tools(settings.bot_tool_modules), *load_entry_point_tools()],
            mcp_servers=load_mcp_config(settings.bot_mcp_config) if settings.bot_mcp_config else [],
            policy=Policy.load(settings.bot_policy_file),
        )


@dataclass(frozen=True, slots=True)
class Ground:
    """What a process stands on before anything else is built: the operator's extensions, the store,
    opened with its lock or lease, and the coordination seam that says how this process shares the
    database (bot/coordination.py)."""

    settings: Settings
    extensions: Extensions
    store: Store
    coordination: Coordination


@contextlib.asynccontextmanager
async def open_ground(settings: Settings, *, replica: bool = False) -> AsyncIterator[Ground]:
    """Open the store and the seam; closed in reverse at exit.

    The one place the mode is chosen: with `replica` (the Slack daemon) and `BOT_DATABASE_URL` this
    process is one replica of a cluster; otherwise it is alone on its database (the console and oneshot
    only visit a cluster's)."""
    _warn_unsandboxed(settings)
    extensions = Extensions.load(settings)
    async with contextlib.AsyncExitStack() as stack:
        store: Store
        coordination: Coordination
        if replica and settings.database_url is not None:  # the mode, chosen once
            from bot.cluster.node import open_cluster  # procrastinate and psycopg: cluster mode only

            store, coordination = await open_cluster(settings, stack)
        else:
            store, coordination = await open_alone(settings, stack)
        yield Ground(settings, extensions, store, coordination)


@contextlib.asynccontextmanager
async def open_core(settings: Settings, output: EngineOutput, **options: Any) -> AsyncIterator[Core]:
    """The console's and oneshot's lifespan: the ground, then the core around `output` (see `run_core`)."""
    async with open_ground(settings) as ground, run_core(ground, output, **options) as core:
        yield core


@contextlib.asynccontextmanager
async def run_core(
    ground: Ground,
    output: EngineOutput,
    *,
    provider: Provider | None = None,
    prompt_extra: str = "",
    abandon_on_exit: bool = False,
    user_timezone: TimezoneLookup | None = None,
    clock: Clock | None = None,
    owns: SessionFilter | None = None,
    askers: AskerLookup | None = None,
    shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    telemetry: AgentTelemetry | None = None,
) -> AsyncIterator[Core]:
    """Build the engine on `ground` around `output`; on exit stop turns and calls (the store stays open).

    With `abandon_on_exit` (oneshot) calls still running are left `orphaned` instead
    of being waited for: the process is going away without finishing them.
    `user_timezone` names the asking person's zone for reminders (the Slack edge
    passes a `users.info` lookup); `clock` is "now" for the scheduler (tests);
    `owns` keeps the scheduler to this edge's sessions; `askers` tells the tool policy who asks in a
    session (the Slack edge adds the channel and user groups); `shutdown_grace_s` is how long running
    turns and calls get to finish at exit (tests shorten it); `telemetry` receives the engine's spans and
    durations.
    """
    telemetry = telemetry or AgentTelemetry()
    settings, store, coordination = ground.settings, ground.store, ground.coordination
    operator, mcp_servers, policy = ground.extensions.operator, ground.extensions.mcp_servers, ground.extensions.policy
    async with contextlib.AsyncExitStack() as stack:
        if provider is None:
            model = deferred_anthropic_provider(settings)
            stack.push_async_callback(model.close)
            provider = model
        usage = UsageMeter()
        provider = MeteredProvider(
            provider, book=GroupedBook(store), meter=usage, model=settings.bot_model, telemetry=telemetry
        )
        registry = _registry(settings, store, output, telemetry)
        toolbox = Toolbox(fixed_tools(settings, registry, operator))
        registry.subscribe(output.call_changed)
        mcp = None
        if mcp_servers:
            from bot.mcp.source import McpTools  # the SDK takes seconds to import; only load it when used

            # Closed before the store; its calls are cancelled by the registry's shutdown first, while the
            # sessions can still tell the servers.
            mcp = await stack.enter_async_context(McpTools(mcp_servers, reserved=toolbox.names))
            toolbox.add_source(mcp)
        # Once every tool is known: an approval a previous process asked for may be an MCP server's call.
        orphans = await coordination.recover(registry, lambda calls: registry.take_up_asked(calls, toolbox.get))
        runner = _runner(settings, provider, registry, store, toolbox, output, policy, askers, prompt_extra, telemetry)
        engine = Engine(
            runner=runner,
            registry=registry,
            store=store,
            output=output,
            max_injections_per_turn=settings.bot_max_injections_per_turn,
            coordination=coordination,
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
            periodic=coordination.ticks,
            on_change=coordination.reminder_changed,
        )
        await scheduler.start()
        core = Core(settings, store, registry, toolbox, engine, provider, scheduler, usage, orphans, coordination, mcp)
        try:
            yield core
        finally:
            await scheduler.stop()  # first: no wait may come due into an engine that is shutting down
            if abandon_on_exit:
                # The engine first: an orphaned call must not look like news that starts a turn.
                await engine.shutdown(grace_s=0)
                await registry.abandon()
            else:
                await coordination.wind_down(engine, registry, shutdown_grace_s)


def _warn_unsandboxed(settings: Settings) -> None:
    if settings.shell is not None and settings.shell.sandbox is Sandbox.NONE:
        log.warning(
            "BOT_SHELL_SANDBOX=none: run_command sees every file the daemon can (bot.db included); only its "
            "environment is scrubbed. Keep it for a container that is itself the boundary"
        )


def _registry(settings: Settings, store: Store, output: EngineOutput, telemetry: AgentTelemetry) -> CallRegistry:
    return CallRegistry(
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


def _runner(
    settings: Settings,
    provider: Provider,
    registry: CallRegistry,
    store: Store,
    toolbox: Toolbox,
    output: EngineOutput,
    policy: Policy,
    askers: AskerLookup | None,
    prompt_extra: str,
    telemetry: AgentTelemetry,
) -> TurnRunner:
    return TurnRunner(
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
