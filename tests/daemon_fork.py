"""Daemon processes forked from a server that has imported the daemon's code once, for the suite's speed.

A fresh `python -m bot run` spends about 2.5 s of CPU importing before it does anything (anthropic's types
alone are 1.7 s), and the suite starts well over a hundred daemons on a machine of two cores. Here a
multiprocessing fork server imports those modules once per test worker, and each daemon is a fork of it
that sets its own environment, working directory and log, then runs the same `main(["run", ...])` that
`python -m bot` runs. It is still a process of its own, talking to the fakes over sockets, stopped by
SIGTERM and killed by SIGKILL like any other. Nothing else is shared: the server never runs the daemon,
so every fork starts from the same freshly imported state. This module imports nothing of the tests, so
the server does not either. The server starts inside the first test that starts a daemon, so it inherits
the session's hermetic environment (conftest.py `hermetic`); a daemon's own variables come from its test.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
from pathlib import Path

PRELOAD = [
    "anthropic",
    "bot.__main__",
    "bot.slack.daemon",
    "bot.model.anthropic",
    "bot.store.postgres",
    "bot.cluster.node",
]
"""What every daemon imports at its start (a module that fails to import is left to the daemon itself)."""

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _run(argv: list[str], env: dict[str, str], cwd: str, log_path: str) -> None:
    """In the fork: become what `python -m bot <argv>` in `cwd` with `env` would be, then run it."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [str(Path(cwd) / "bot"), *argv]
    sys.path.insert(0, cwd)  # as `-m` puts the working directory first
    from bot.__main__ import main

    raise SystemExit(main(argv))


class DaemonProcess:
    """The part of `asyncio.subprocess.Process` the tests use, for a forked daemon."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        assert process.pid is not None
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        """Its exit status once it ended, negative for the signal that ended it (as asyncio reports it)."""
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        if self.returncode is None:  # the server writes the status on the sentinel when the fork ends
            loop = asyncio.get_running_loop()
            ended = loop.create_future()
            sentinel = self._process.sentinel
            loop.add_reader(sentinel, lambda: ended.done() or ended.set_result(None))
            try:
                await ended
            finally:
                loop.remove_reader(sentinel)
        code = self.returncode
        assert code is not None
        return code


async def fork_daemon(argv: list[str], *, env: dict[str, str], cwd: Path, log_path: Path) -> DaemonProcess:
    """Start one daemon; the first call in a worker also starts the fork server (it imports for seconds)."""
    # Daemonic: a daemon a failed test left running is stopped when the worker exits, not waited for.
    process = _context.Process(target=_run, args=(argv, env, str(cwd), str(log_path)), daemon=True)
    await asyncio.to_thread(process.start)
    return DaemonProcess(process)
