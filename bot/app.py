"""Wiring: the one place where the parts are built and joined, and torn down in reverse.

Every edge (Slack, console, oneshot) opens the same `Core` with itself as the
engine's output. `open_core` is the lifespan: it owns the store, the registry,
the scheduler and the model client, and closes them even when start-up fails.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anthropic

from bot.agent.engine import Engine
from bot.agent.prompt import system_prompt
from bot.agent.toolbox import Toolbox
from bot.agent.turn import TurnRunner, TurnSettings
from bot.calls.models import ToolCall
from bot.calls.registry import CallRegistry
from bot.calls.system_tools import system_tools
from bot.config import Settings
from bot.errors import ConfigError
from bot.model.anthropic import AnthropicProvider
from bot.schedule import Scheduler, build_scheduler
from bot.schedule.firing import Clock
from bot.store import Store
from bot.types import EngineOutput, Provider, SessionFilter, TimezoneLookup
from tools import builtin_tools

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
    orphans: list[ToolCall]
    """Calls a previous process left unfinished, marked orphaned at this start (edges may repaint them)."""


def anthropic_provider(settings: Settings, *, max_retries: int = 2) -> AnthropicProvider:
    """The model client; `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` are read by the SDK itself."""
    client = anthropic.AsyncAnthropic(max_retries=max_retries)
    if client.api_key is None and client.auth_token is None:
        raise ConfigError("ANTHROPIC_API_KEY: not set (the Anthropic API key the model is called with)")
    return AnthropicProvider(model=settings.bot_model, max_tokens=settings.bot_max_tokens, client=client)


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
    before_store_closes: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Core]:
    """Build the engine around `output`; on exit stop turns and calls, then close the store.

    With `abandon_on_exit` (oneshot) calls still running are left `orphaned` instead
    of being waited for: the process is going away without finishing them.
    `user_timezone` names the asking person's zone for reminders (the Slack edge
    passes a `users.info` lookup); `clock` is "now" for the scheduler (tests);
    `owns` keeps the scheduler to this edge's sessions. `before_store_closes` lets an
    edge send what the shutdown itself produced while the store can still be written.
    """
    async with contextlib.AsyncExitStack() as stack:
        store = await Store.open(settings.db_path)
        stack.push_async_callback(store.close)
        if provider is None:
            model = anthropic_provider(settings)
            stack.push_async_callback(model.close)
            provider = model
        registry = CallRegistry(
            store=store,
            work_dir=settings.bot_data_dir / "work",
            max_concurrent=settings.bot_max_concurrent_tools,
            max_per_session=settings.bot_max_concurrent_tools_per_session,
            default_timeout_s=settings.bot_tool_timeout_s,
            zone=settings.zone,
        )
        orphans = await registry.recover()
        registry.subscribe(output.call_changed)
        toolbox = Toolbox(builtin_tools(enable_shell=settings.bot_enable_shell))
        for item in system_tools(registry, wait_max_s=settings.bot_status_wait_max_s):
            toolbox.add(item)
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
        )
        engine = Engine(
            runner=runner,
            registry=registry,
            store=store,
            output=output,
            max_injections_per_turn=settings.bot_max_injections_per_turn,
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
        )
        await scheduler.start()
        core = Core(settings, store, registry, toolbox, engine, provider, scheduler, orphans)
        try:
            yield core
        finally:
            await scheduler.stop()  # first: no wait may come due into an engine that is shutting down
            if abandon_on_exit:
                # The engine first: an orphaned call must not look like news that starts a turn.
                await engine.shutdown(grace_s=0)
                await registry.abandon()
            else:
                await engine.shutdown(grace_s=SHUTDOWN_GRACE_S)
                await registry.shutdown(grace_s=SHUTDOWN_GRACE_S)
            if before_store_closes is not None:
                await before_store_closes()
