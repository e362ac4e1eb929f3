"""`python -m bot console`: chat in a terminal, steer by typing while tools run.

A reader thread feeds stdin lines to the loop (stdin cannot be awaited portably),
so typing never blocks the engine. A line typed while a turn runs is an
injection. Ctrl-C during a turn cancels its running calls (twice: the whole
turn); at the idle prompt it exits, as do Ctrl-D and an empty line. Works the
same with piped stdin: at end of input it lets the running turn finish first.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import TextIO

from bot.agent.engine import Engine
from bot.app import open_core
from bot.config import Settings
from bot.console.output import ConsoleOutput

EOF_MARK = None


class ConsoleChat:
    def __init__(self, settings: Settings, *, session: str, stdin: TextIO, stdout: TextIO) -> None:
        self._settings = settings
        self._key = f"console:{session}"
        self._stdin = stdin
        self._stdout = stdout
        self._interactive = stdin.isatty() and stdout.isatty()
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._interrupts = 0
        self._quit = asyncio.Event()
        self._cancels: set[asyncio.Task[object]] = set()
        self._pending_read: asyncio.Task[str | None] | None = None

    async def run(self) -> int:
        output = ConsoleOutput(
            self._stdout, interactive=self._interactive, files_dir=self._settings.bot_data_dir / "files"
        )
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._read_stdin, args=(loop,), daemon=True, name="stdin-reader").start()
        async with open_core(self._settings, output, owns=lambda key: key.startswith("console:")) as core:
            engine = core.engine
            loop.add_signal_handler(signal.SIGINT, lambda: self._on_interrupt(core.engine))
            try:
                if self._interactive:
                    self._stdout.write("threadbot console — Ctrl-D or an empty line to exit, Ctrl-C cancels tools\n")
                while not self._quit.is_set():
                    self._prompt()
                    line = await self._next_line()
                    if line is EOF_MARK or not line.strip():
                        break
                    self._interrupts = 0
                    engine.submit(self._key, line)
                    if not await self._steer_until_idle(engine):
                        break
                if not self._interactive:
                    # End of piped input: let background calls and the turns they start finish first.
                    await engine.settle(self._key)
            finally:
                loop.remove_signal_handler(signal.SIGINT)
                if self._pending_read is not None:
                    self._pending_read.cancel()
        return 0

    async def _steer_until_idle(self, engine: Engine) -> bool:
        """Feed typed lines to the running turn until it ends; False when input ended meanwhile."""
        turn = asyncio.ensure_future(engine.wait_turn(self._key))
        while True:
            reading = self._reading()
            await asyncio.wait([turn, reading], return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                return True  # the turn ended first; the read stays pending for the next prompt
            self._pending_read = None
            line = reading.result()
            if line is EOF_MARK or not line.strip():
                await turn
                return False
            engine.submit(self._key, line)

    async def _next_line(self) -> str | None:
        line = await self._reading()
        self._pending_read = None
        return line

    def _reading(self) -> asyncio.Task[str | None]:
        """The one outstanding read of the input queue: cancelling a read could swallow a line."""
        if self._pending_read is None:
            self._pending_read = asyncio.ensure_future(self._lines.get())
        return self._pending_read

    def _on_interrupt(self, engine: Engine) -> None:
        if not engine.is_busy(self._key):
            self._quit.set()
            self._lines.put_nowait(EOF_MARK)  # wakes the prompt
            return
        self._interrupts += 1
        if self._interrupts == 1:
            self._stdout.write("\n(cancelling running tool calls — Ctrl-C again stops the whole turn)\n")
            cancel = engine.cancel_calls(self._key, by="you (Ctrl-C)")
        else:
            cancel = engine.cancel_turn(self._key, by="you (Ctrl-C)")
        task: asyncio.Task[object] = asyncio.ensure_future(cancel)
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    def _prompt(self) -> None:
        if self._interactive:
            self._stdout.write("you: ")
            self._stdout.flush()

    def _read_stdin(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            for line in self._stdin:
                loop.call_soon_threadsafe(self._lines.put_nowait, line.rstrip("\n"))
            loop.call_soon_threadsafe(self._lines.put_nowait, EOF_MARK)
        except RuntimeError:
            return  # the loop closed while we waited for input: the chat is over


async def chat(settings: Settings, *, session: str) -> int:
    return await ConsoleChat(settings, session=session, stdin=sys.stdin, stdout=sys.stdout).run()
