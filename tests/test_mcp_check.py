"""`threadbot check` starts each MCP server and says ✓ with its tool count or ✗ with the reason."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp_support import Record, free_port, http_server, stdio_entry, write_config

from bot import check
from bot.config import Settings
from bot.mcp.check import check_mcp


async def test_working_servers_are_listed_with_their_tool_counts(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    record = Record(tmp_path / "record.txt")
    async with http_server(record) as url:
        servers = {"local": stdio_entry(record, deniedTools=["grow"]), "remote": {"type": "http", "url": url}}
        settings = make_settings(bot_mcp_config=write_config(tmp_path / "mcp.json", servers))
        report = await check_mcp(settings, 30)
    lines = report.splitlines()
    assert lines[0].startswith("MCP servers answer")
    assert lines[1:] == ["  ✓ local: 7 tools", "  ✓ remote: 8 tools"]


async def test_each_failure_is_named_and_the_check_exits_non_zero(
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    record = Record(tmp_path / "record.txt")
    servers = {
        "good": stdio_entry(record),
        "missing": {"command": "/nonexistent/bin/mcp-server"},
        "garbage": {"command": sys.executable, "args": ["-c", "print('hello, I am not MCP')"]},
        "silent": {
            "command": sys.executable,
            "args": ["-c", "import time; time.sleep(60)"],
            "startupTimeoutSeconds": 0.5,
        },
        "off": {"command": "/nonexistent/too", "enabled": False},
        "nowhere": {"type": "http", "url": f"http://127.0.0.1:{free_port()}/mcp", "startupTimeoutSeconds": 5},
    }
    settings = make_settings(bot_mcp_config=write_config(tmp_path / "mcp.json", servers))
    monkeypatch.setattr(check, "CHECKS", {"mcp": check_mcp})
    assert await check.run_checks(settings) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed[1] == "✗ mcp: 4 of 5 MCP servers failed"
    assert printed[2] == "  ✓ good: 8 tools"
    assert printed[3] == "  ✗ missing: command not found: /nonexistent/bin/mcp-server"
    assert printed[4].startswith("  ✗ garbage: handshake failed: ")
    assert printed[5] == "  ✗ silent: no answer to the handshake within 0.5s"
    assert printed[6].startswith("  ✗ nowhere: cannot reach http://127.0.0.1:"), printed[6]


async def test_a_broken_file_and_no_file(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    assert await check_mcp(make_settings(), 30) == "no MCP servers configured (BOT_MCP_CONFIG is not set)"
    bad = tmp_path / "mcp.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(Exception, match='needs an object "mcpServers"'):
        await check_mcp(make_settings(bot_mcp_config=bad), 30)
