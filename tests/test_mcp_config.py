"""The MCP servers file and the model-facing tool names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.errors import ConfigError
from bot.mcp.config import DEFAULT_STARTUP_TIMEOUT_S, Transport, load_mcp_config
from bot.mcp.naming import MAX_NAME_CHARS, model_tool_names

API_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document, encoding="utf-8")
    return path


def test_stdio_and_http_servers_with_variables_from_the_environment(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "git": {
                    "command": "uvx",
                    "args": ["mcp-server-git", "--repository", "${REPO}"],
                    "env": {"TOKEN": "${GIT_TOKEN}"},
                    "cwd": "/srv",
                    "deniedTools": ["git_reset"],
                    "timeoutSeconds": 120,
                },
                "ci": {
                    "type": "http",
                    "url": "https://ci.example/mcp",
                    "headers": {"Authorization": "Bearer ${CI_TOKEN}"},
                    "allowedTools": ["run_pipeline"],
                    "enabled": False,
                },
                "local": {"command": "server", "env": {"LEVEL": "${LEVEL:-info}"}},
            }
        },
    )
    git, ci, local = load_mcp_config(path, {"REPO": "/srv/repo", "GIT_TOKEN": "s3cret", "CI_TOKEN": "t0k"})
    assert git.transport is Transport.STDIO and git.command == "uvx"
    assert git.args == ("mcp-server-git", "--repository", "/srv/repo")
    assert git.env == {"TOKEN": "s3cret"} and git.cwd == Path("/srv")
    assert git.timeout_s == 120 and git.startup_timeout_s == DEFAULT_STARTUP_TIMEOUT_S
    assert git.offers("git_log") and not git.offers("git_reset")
    assert ci.transport is Transport.HTTP and ci.url == "https://ci.example/mcp"
    assert ci.headers == {"Authorization": "Bearer t0k"} and not ci.enabled
    assert ci.offers("run_pipeline") and not ci.offers("delete_pipeline")
    assert local.env == {"LEVEL": "info"} and local.timeout_s is None


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{not json", "is not valid JSON"),
        ({"servers": {}}, 'needs an object "mcpServers"'),
        ({"mcpServers": {"a": {"command": "x", "comand": "y"}}}, "server 'a': unknown key 'comand'"),
        ({"mcpServers": {"a": {"args": ["x"]}}}, "server 'a': a stdio server needs \"command\""),
        ({"mcpServers": {"a": {"type": "http", "url": "ftp://x"}}}, 'an http server needs "url"'),
        ({"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}, '"type" must be "stdio" or "http"'),
        ({"mcpServers": {"a": {"command": "x", "timeoutSeconds": 0}}}, '"timeoutSeconds" must be a positive'),
        ({"mcpServers": {"a": {"command": "x", "enabled": "yes"}}}, '"enabled" must be true or false'),
        ({"mcpServers": {"a": {"command": "x", "args": "--flag"}}}, '"args" must be a list of strings'),
        ({"mcpServers": {"a b": {"command": "x"}}}, "a server name is 1-40 letters"),
        ({"mcpServers": {"a": {"command": "${MISSING}"}}}, "${MISSING} is used but MISSING is not set"),
    ],
)
def test_mistakes_are_one_clear_line(tmp_path: Path, document: Any, message: str) -> None:
    path = write(tmp_path, document)
    with pytest.raises(ConfigError) as caught:
        load_mcp_config(path, {})
    assert str(caught.value).startswith(f"BOT_MCP_CONFIG: {path}")
    assert message in str(caught.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"BOT_MCP_CONFIG: cannot read .*nope\.json"):
        load_mcp_config(tmp_path / "nope.json", {})


def test_tool_names_follow_the_convention_and_stay_valid_and_unique() -> None:
    names = model_tool_names("ci", ["run_pipeline", "get.status", "get_status", "x" * 80])
    assert names["run_pipeline"] == "mcp__ci__run_pipeline"
    assert names["get.status"] == "mcp__ci__get_status"  # sorted first, so it keeps the plain name
    assert names["get_status"] != names["get.status"] and names["get_status"].startswith("mcp__ci__get_status_")
    assert len(names["x" * 80]) == MAX_NAME_CHARS
    assert all(API_NAME.fullmatch(name) for name in names.values())
    assert len(set(names.values())) == len(names)
    # deterministic: the same tools, listed in another order, get the same names
    assert model_tool_names("ci", reversed(list(names))) == names


def test_tool_names_avoid_names_already_taken() -> None:
    names = model_tool_names("ci", ["run"], taken=["mcp__ci__run"])
    assert names["run"] != "mcp__ci__run" and API_NAME.fullmatch(names["run"])


def test_the_settings_read_the_mcp_file_and_tool_modules_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.config import load_settings

    monkeypatch.setenv("BOT_MCP_CONFIG", "/etc/threadbot/mcp.json")
    monkeypatch.setenv("BOT_TOOL_MODULES", "mytools, team.tools")
    settings = load_settings(_env_file=None)
    assert settings.bot_mcp_config == Path("/etc/threadbot/mcp.json")
    assert settings.bot_tool_modules == ("mytools", "team.tools")
    monkeypatch.setenv("BOT_MCP_CONFIG", "")
    assert load_settings(_env_file=None).bot_mcp_config is None


def test_variables_come_from_dotenv_too_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mcp.json"
    servers = {
        "ci": {"type": "http", "url": "https://ci.example/mcp", "headers": {"A": "${FROM_DOTENV}", "B": "${BOTH}"}}
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    (tmp_path / ".env").write_text("FROM_DOTENV=only-in-dotenv\nBOTH=from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FROM_DOTENV", raising=False)
    monkeypatch.setenv("BOTH", "from-environment")
    (ci,) = load_mcp_config(path)
    assert ci.headers == {"A": "only-in-dotenv", "B": "from-environment"}
