"""A fake terminal: a pseudo-terminal of fixed size whose output is drawn on a `pyte` screen.

Why a screen emulator instead of matching the byte stream: a full-screen prompt moves the cursor, erases and
repaints; what a person sees is the screen that results, so tests assert on that. The screen also answers
cursor-position requests, as a real terminal does, so prompt_toolkit runs as it would in xterm or tmux.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import struct
import termios
from collections.abc import Callable
from pathlib import Path

import pyte

Check = Callable[[list[str]], bool]


class _AnsweringScreen(pyte.Screen):
    """A pyte screen that sends its replies (cursor position, status) back to the program."""

    def __init__(self, columns: int, lines: int, reply: Callable[[str], None]) -> None:
        super().__init__(columns, lines)
        self._reply = reply

    def write_process_input(self, data: str) -> None:
        self._reply(data)

    def draw(self, data: str) -> None:
        # pyte 0.8 drops the rest of a row after U+FE0F (the emoji-presentation selector, as in "⚠️");
        # a terminal shows the symbol and goes on, so the emulator sees the symbol alone.
        super().draw(data.replace("\ufe0f", ""))


class FakeTerminal:
    """Runs one program on a pty of `columns` × `lines`; `rows()` is what the screen shows now."""

    def __init__(self, *, columns: int = 80, lines: int = 24) -> None:
        self.columns = columns
        self.lines = lines
        self._master, self._slave = os.openpty()
        fcntl.ioctl(self._slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        self._screen = _AnsweringScreen(columns, lines, self._answer)
        self._stream = pyte.ByteStream(self._screen)
        self._changed = asyncio.Event()
        self._watchers: list[Callable[[list[str]], None]] = []
        self.process: asyncio.subprocess.Process | None = None
        self.transcript = bytearray()
        """Every byte the program wrote, for failure messages."""

    async def start(self, *argv: str, env: dict[str, str], cwd: Path) -> asyncio.subprocess.Process:
        """Start `argv` with the pty as its controlling terminal and its stdin, stdout and stderr."""
        self.process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=self._slave,
            stdout=self._slave,
            stderr=self._slave,
            env={**env, "TERM": "xterm", "COLUMNS": str(self.columns), "LINES": str(self.lines)},
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_take_controlling_terminal,
        )
        os.close(self._slave)
        asyncio.get_running_loop().add_reader(self._master, self._on_readable)
        return self.process

    def rows(self) -> list[str]:
        """The screen's rows, trailing blanks removed."""
        return [row.rstrip() for row in self._screen.display]

    def cursor_row(self) -> str:
        return self.rows()[self._screen.cursor.y]

    def watch(self, watcher: Callable[[list[str]], None]) -> None:
        """Call `watcher(rows)` after every change of the screen (to check what must hold at all times)."""
        self._watchers.append(watcher)

    def type(self, keys: str) -> None:
        """Keystrokes, as a person types them (`\\r` is Enter, `\\x03` Ctrl-C, `\\x04` Ctrl-D)."""
        os.write(self._master, keys.encode())

    async def wait_for(self, check: Check, what: str, timeout_s: float = 15) -> list[str]:
        """Wait until `check(rows)` holds; returns those rows. On timeout the failure shows the screen."""
        try:
            async with asyncio.timeout(timeout_s):
                while not check(self.rows()):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            screen = "\n".join(f"|{row}" for row in self.rows())
            raise AssertionError(f"the screen never showed {what}; it shows:\n{screen}") from None
        return self.rows()

    async def wait_exit(self, timeout_s: float = 20) -> int:
        assert self.process is not None
        return await asyncio.wait_for(self.process.wait(), timeout_s)

    async def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self._master)
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.process is None:
            os.close(self._slave)
        os.close(self._master)

    def _on_readable(self) -> None:
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: the program closed the terminal
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self._master)
            return
        self.transcript += data
        self._stream.feed(data)
        rows = self.rows()
        for watcher in self._watchers:
            watcher(rows)
        self._changed.set()

    def _answer(self, data: str) -> None:
        os.write(self._master, data.encode())


def _take_controlling_terminal() -> None:
    """In the child, after `setsid`: the pty on stdin becomes its terminal, so Ctrl-C there is SIGINT."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
