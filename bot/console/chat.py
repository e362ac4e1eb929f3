"""`python -m bot console`: chat in a terminal, steer by typing while tools run.

On a terminal the chat runs on prompt_toolkit (`bot.console.terminal`). Here is the
piped form, for scripts: a reader thread feeds stdin lines to the loop (stdin cannot
be awaited portably), so reading never blocks the engine. A line read while a turn
runs is an injection. SIGINT during a turn cancels its running calls (twice: the
whole turn); otherwise it exits, as do end of input and an empty line. At end of
input it lets the running turn, its background calls and the turns they start finish.
"""

from __future__ import annotations

import asyncio
import io
import signal
import sys
import threading
from typing import TextIO

from bot.agent.engine import Engine
from bot.app import open_core
from bot.calls.registry import CallRegistry
from bot.config import Settings
from bot.console import console_key, owns_console_session, typed
from bot.console.interrupts import Interrupts
from bot.console.output import ConsoleOutput
from bot.console.terminal import TerminalChat
from bot.text import clean_text

EOF_MARK = None


class PipedChat:
    def __init__(self, settings: Settings, *, session: str, stdin: TextIO, stdout: TextIO) -> None:
        self._settings = settings
        self._key = console_key(session)
        self._stdin = stdin
        self._output = ConsoleOutput(stdout, files_dir=settings.bot_data_dir / "files")
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._quit = asyncio.Event()
        self._pending_read: asyncio.Task[str | None] | None = None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._read_stdin, args=(loop,), daemon=True, name="stdin-reader").start()
        async with open_core(self._settings, self._output, owns=owns_console_session) as core:
            engine = core.engine
            interrupts = Interrupts(self._key, engine=engine, registry=core.registry, say=self._output.line)
            loop.add_signal_handler(signal.SIGINT, lambda: self._on_interrupt(interrupts))
            try:
                while not self._quit.is_set():
                    line = await self._next_line()
                    if line is EOF_MARK or not line.strip():
                        break
                    if self._output.approvals.answer(line, core.registry):
                        continue
                    interrupts.reset()
                    engine.submit(self._key, typed(line))
                    if not await self._steer_until_idle(engine, core.registry):
                        break
                # End of input: let background calls and the turns they start finish first.
                await engine.settle(self._key)
            finally:
                loop.remove_signal_handler(signal.SIGINT)
                if self._pending_read is not None:
                    self._pending_read.cancel()
        return 0

    async def _steer_until_idle(self, engine: Engine, registry: CallRegistry) -> bool:
        """Feed lines read to the running turn until it ends; False when input ended meanwhile."""
        turn = asyncio.ensure_future(engine.wait_turn(self._key))
        while True:
            reading = self._reading()
            await asyncio.wait([turn, reading], return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                return True  # the turn ended first; the read stays pending for the next line
            self._pending_read = None
            line = reading.result()
            if line is EOF_MARK or not line.strip():
                await turn
                return False
            if not self._output.approvals.answer(line, registry):
                engine.submit(self._key, typed(line))

    async def _next_line(self) -> str | None:
        line = await self._reading()
        self._pending_read = None
        return line

    def _reading(self) -> asyncio.Task[str | None]:
        """The one outstanding read of the input queue: cancelling a read could swallow a line."""
        if self._pending_read is None:
            self._pending_read = asyncio.ensure_future(self._lines.get())
        return self._pending_read

    def _on_interrupt(self, interrupts: Interrupts) -> None:
        if not interrupts.press():
            self._quit.set()
            self._lines.put_nowait(EOF_MARK)  # wakes the read

    def _read_stdin(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            for line in self._stdin:
                # Undecodable input bytes arrive as lone surrogates (surrogateescape); the model cannot take them.
                loop.call_soon_threadsafe(self._lines.put_nowait, clean_text(line.rstrip("\n")))
            loop.call_soon_threadsafe(self._lines.put_nowait, EOF_MARK)
        except RuntimeError:
            return  # the loop closed while we waited for input: the chat is over


async def chat(settings: Settings, *, session: str) -> int:
    if sys.stdin.isatty() and sys.stdout.isatty():
        return await TerminalChat(settings, session=session).run()
    if isinstance(sys.stdin, io.TextIOWrapper):
        # Under a UTF-8 locale stdin is strict: one undecodable byte would end the chat. Keep the bytes as
        # surrogates instead; `clean_text` turns them into U+FFFD for the model.
        sys.stdin.reconfigure(errors="surrogateescape")
    return await PipedChat(settings, session=session, stdin=sys.stdin, stdout=sys.stdout).run()
