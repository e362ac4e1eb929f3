"""Running tests/mcp_server.py for a test: as a stdio command in a config file, or as an HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

SERVER = Path(__file__).resolve().parent / "mcp_server.py"
WAIT_S = 30.0  # an upper bound: generous, so a loaded machine is slow, not failing


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_until(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Wait for a condition another process brings about (a line in its file or log).

    There is no event to wait on across processes, so it is looked at every 10 ms, for at most `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s}s")
        await asyncio.sleep(0.01)


class Record:
    """The server's event file: `pid N`, `start steps`, `cancelled steps`, each with its monotonic time."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[tuple[float, str]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [(float(at), event) for at, _, event in (line.partition(" ") for line in lines)]

    def times(self, event: str) -> list[float]:
        return [at for at, seen in self.events() if seen == event]

    def pids(self) -> list[int]:
        return [int(event.split()[1]) for _, event in self.events() if event.startswith("pid ")]

    async def wait(self, event: str, count: int = 1, timeout_s: float = WAIT_S) -> float:
        """Wait until `event` was recorded `count` times; returns when the server recorded the last one."""
        await wait_until(lambda: len(self.times(event)) >= count, f"the MCP server recording {event!r} x{count}")
        return self.times(event)[count - 1]


def stdio_entry(record: Record, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER)], "env": {"MCP_TEST_RECORD": str(record.path)}, **extra}


def write_config(path: Path, servers: dict[str, dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


@contextlib.asynccontextmanager
async def http_server(record: Record) -> AsyncIterator[str]:
    """tests/mcp_server.py serving streamable HTTP on a free port; yields its URL once it accepts connections."""
    port = free_port()
    env = {**os.environ, "MCP_TEST_RECORD": str(record.path)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        "--http",
        str(port),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if time.monotonic() > deadline or process.returncode is not None:
                    raise RuntimeError("the HTTP MCP server did not start") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGTERM)
        await process.wait()
