"""The interactive console, on prompt_toolkit: the prompt stays at the bottom, output scrolls above it.

One `PromptSession` stays open for the whole chat, so the prompt is there after every
turn, background result or reminder, and what the person is typing is redrawn, never
erased, when output arrives. A line entered while a turn runs goes into that turn
and is acknowledged. Ctrl-C while a turn runs cancels its calls (twice: the turn);
with nothing running it leaves, as do Ctrl-D and an empty line (a running turn is let
finish first, its live rows still drawn and Ctrl-C still heard). Logs go above the
prompt too, and only from WARNING up: a chat is not a daemon's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from functools import partial

from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application, get_app_or_none, run_in_terminal
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import FormattedTextControl, Layout, Window
from prompt_toolkit.output import Output
from prompt_toolkit.patch_stdout import patch_stdout

from bot.agent.engine import Engine
from bot.app import Core, open_core
from bot.config import Settings
from bot.console import console_key, owns_console_session, typed
from bot.console.interrupts import Interrupts
from bot.console.screen import TerminalOutput
from bot.console.thinking import WatchedProvider
from bot.model.client import anthropic_provider
from bot.text import clean_text
from bot.toolcall import CallStatus, ToolCall

BANNER = "threadbot console — Ctrl-D or an empty line to exit, Ctrl-C cancels tools"
PROMPT = "you: "
FINISHING = "(letting the running turn finish — Ctrl-C cancels its calls, twice the turn)"
REFRESH_S = 0.5
"""How often the live rows are redrawn while nothing else happens, so the seconds shown tick."""


class TerminalChat:
    def __init__(self, settings: Settings, *, session: str) -> None:
        self._settings = settings
        self._key = console_key(session)

    async def run(self) -> int:
        model = anthropic_provider(self._settings)  # a missing key stops the chat before anything is drawn
        try:
            with patch_stdout(), _logs_above_prompt():
                prompt: PromptSession[str] = PromptSession(erase_when_done=True, refresh_interval=REFRESH_S)
                printer = AbovePrompt(prompt.output)
                thinking = WatchedProvider(model, on_change=_repaint)
                output = TerminalOutput(
                    print_line=printer,
                    refresh=_repaint,
                    columns=lambda: prompt.output.get_size().columns,
                    thinking_s=lambda: thinking.thinking_s,
                    files_dir=self._settings.bot_data_dir / "files",
                )
                printer(BANNER)
                try:
                    async with open_core(self._settings, output, provider=thinking, owns=owns_console_session) as core:
                        interrupts = Interrupts(
                            self._key,
                            engine=core.engine,
                            registry=core.registry,
                            say=output.line,
                            turns_ended=lambda: output.turns_ended,
                        )
                        await self._converse(prompt, output, interrupts, core)
                finally:
                    await printer.drain()
        finally:
            await model.close()
        return 0

    async def _converse(
        self, prompt: PromptSession[str], output: TerminalOutput, interrupts: Interrupts, core: Core
    ) -> None:
        engine = core.engine
        bindings = _interrupt_bindings(interrupts)
        waits = partial(waits_for_slot, core)

        def message() -> StyleAndTextTuples:
            rows = output.live_rows(waits)
            return [("class:status", "".join(row + "\n" for row in rows)), ("", PROMPT)]

        while True:
            try:
                line = clean_text(await prompt.prompt_async(message, key_bindings=bindings))
            except (EOFError, KeyboardInterrupt):
                break
            if not line.strip():
                break
            if not output.approvals.answer(line, core.registry):
                output.said(line, engine.submit(self._key, typed(line)))
        if engine.is_busy(self._key):
            output.line(FINISHING)
            await _finish_turn(engine, self._key, interrupts, output, waits)


class AbovePrompt:
    """Prints settled lines above the prompt, in order; lines that come together share one repaint."""

    def __init__(self, output: Output) -> None:
        self._output = output
        self._lines: list[str] = []
        self._last: Awaitable[None] | None = None

    def __call__(self, line: str) -> None:
        if not self._lines:
            asyncio.get_running_loop().call_soon(self._flush)
        self._lines.append(line)

    async def drain(self) -> None:
        """Print what is still queued (the chat is ending: no later repaint will)."""
        self._flush()
        if self._last is not None:
            await self._last

    def _flush(self) -> None:
        if not self._lines:
            return
        text = "".join(line + "\n" for line in self._lines)
        self._lines = []
        self._last = run_in_terminal(partial(self._write, text))

    def _write(self, text: str) -> None:
        self._output.write(text)  # prompt_toolkit escapes control sequences: a tool cannot drive the terminal
        self._output.flush()


def _repaint() -> None:
    """Repaint the live rows where they are drawn now: in the prompt, or after it in `_finish_turn`'s view."""
    if (app := get_app_or_none()) is not None:
        app.invalidate()


def _interrupt_bindings(interrupts: Interrupts) -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("c-c")
    @bindings.add("<sigint>")
    def _interrupt(event: KeyPressEvent) -> None:
        if not interrupts.press():
            event.app.exit(exception=EOFError())

    return bindings


async def _finish_turn(
    engine: Engine, key: str, interrupts: Interrupts, output: TerminalOutput, waits: Callable[[ToolCall], bool]
) -> None:
    """The prompt is gone, but the live rows stay, repainted, until the running turn ends: whoever left
    still sees what it waits for. No input is taken; Ctrl-C interrupts as it does at the prompt."""

    def rows() -> StyleAndTextTuples:
        return [("class:status", "\n".join(output.live_rows(waits)))]

    app: Application[None] = Application(
        layout=Layout(Window(FormattedTextControl(rows), dont_extend_height=True)),
        key_bindings=_interrupt_bindings(interrupts),
        erase_when_done=True,
        refresh_interval=REFRESH_S,
    )

    async def until_the_turn_ends() -> None:
        await engine.wait_turn(key)
        if not app.is_done:  # Ctrl-C may have left already, as it does when nothing runs
            app.exit()

    def start() -> None:
        app.create_background_task(until_the_turn_ends())

    with contextlib.suppress(EOFError):
        await app.run_async(pre_run=start)


def waits_for_slot(core: Core, call: ToolCall) -> bool:
    """A `pending` call is shown as pending only when the caps really hold it back, not just before it starts."""
    tool = core.toolbox.get(call.tool_name)
    if tool is None or not tool.uses_slot:
        return False
    return call.status is CallStatus.PENDING and core.registry.slots_full(call.session_key, tool.kind)


@contextlib.contextmanager
def _logs_above_prompt() -> Iterator[None]:
    """Inside `patch_stdout`: terminal log handlers write to the proxy (above the prompt), and only warnings
    and errors; a log file keeps its own stream."""
    root = logging.getLogger()
    level = root.level
    handlers = [
        handler
        for handler in root.handlers
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
    ]
    streams = [handler.setStream(sys.stderr) for handler in handlers]
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)
