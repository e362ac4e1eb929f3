"""The MCP servers file (`BOT_MCP_CONFIG`): the `mcpServers` format of `.mcp.json` and Claude Desktop.

A stdio server has `command` (with optional `args`, `env`, `cwd`); a remote one has
`type: "http"` and `url` (with optional `headers`). Our own keys per server:
`enabled`, `allowedTools` / `deniedTools` (tool names as the server gives them),
`timeoutSeconds` (per call) and `startupTimeoutSeconds` (connect and handshake).
`${VAR}` and `${VAR:-default}` in any string are read from the environment, or
from `.env` in the working directory as every other setting is, so secrets stay
out of the file. A mistake stops the program at start with one line
naming the file, the server and the key.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from bot.errors import ConfigError

DEFAULT_STARTUP_TIMEOUT_S = 30.0
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_KNOWN_KEYS = frozenset(
    {"type", "command", "args", "env", "cwd", "url", "headers", "enabled"}
    | {"allowedTools", "deniedTools", "timeoutSeconds", "startupTimeoutSeconds"}
)


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    url: str = ""
    headers: Mapping[str, str] | None = None
    enabled: bool = True
    allowed_tools: frozenset[str] | None = None
    """None: every tool the server lists (minus the denied ones)."""
    denied_tools: frozenset[str] = frozenset()
    timeout_s: float | None = None
    """None: the daemon's BOT_TOOL_TIMEOUT_S."""
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S

    def offers(self, tool_name: str) -> bool:
        """Whether the operator lets the model see this tool of the server."""
        if tool_name in self.denied_tools:
            return False
        return self.allowed_tools is None or tool_name in self.allowed_tools


def load_mcp_config(path: Path, environ: Mapping[str, str] | None = None) -> list[McpServerConfig]:
    """Every server of the file, enabled or not, in the file's order."""
    environ = _environment() if environ is None else environ
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"BOT_MCP_CONFIG: cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"BOT_MCP_CONFIG: {path} is not valid JSON: {exc}") from None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f'BOT_MCP_CONFIG: {path} needs an object "mcpServers" mapping server names to settings')
    return [_server(path, name, entry, environ) for name, entry in servers.items()]


def _server(path: Path, name: str, entry: Any, environ: Mapping[str, str]) -> McpServerConfig:
    where = f"BOT_MCP_CONFIG: {path}: server {name!r}"
    if not SERVER_NAME.fullmatch(name):
        raise ConfigError(f"{where}: a server name is 1-40 letters, digits, '_' or '-'")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object")
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KNOWN_KEYS))})")
    try:
        values = _expand(entry, environ)
        return _build(name, values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _build(name: str, values: dict[str, Any]) -> McpServerConfig:
    kind = values.get("type", "http" if "url" in values else "stdio")
    if kind in ("http", "streamable-http", "streamableHttp"):
        transport = Transport.HTTP
    elif kind == "stdio":
        transport = Transport.STDIO
    else:
        raise ValueError(f'"type" must be "stdio" or "http", not {kind!r}')
    common: dict[str, Any] = {
        "enabled": _boolean(values, "enabled", default=True),
        "allowed_tools": frozenset(_strings(values["allowedTools"], "allowedTools"))
        if "allowedTools" in values
        else None,
        "denied_tools": frozenset(_strings(values.get("deniedTools", []), "deniedTools")),
        "timeout_s": _seconds(values, "timeoutSeconds"),
        "startup_timeout_s": _seconds(values, "startupTimeoutSeconds") or DEFAULT_STARTUP_TIMEOUT_S,
    }
    if transport is Transport.HTTP:
        url = values.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError('an http server needs "url": "http(s)://…"')
        return McpServerConfig(name, transport, url=url, headers=_mapping(values, "headers"), **common)
    command = values.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ValueError('a stdio server needs "command" (or "type": "http" with "url")')
    cwd = values.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError('"cwd" must be a string')
    return McpServerConfig(
        name,
        transport,
        command=command,
        args=tuple(_strings(values.get("args", []), "args")),
        env=_mapping(values, "env"),
        cwd=Path(cwd).expanduser() if cwd else None,
        **common,
    )


def _environment() -> dict[str, str]:
    """The environment over `.env`, the precedence pydantic-settings gives the daemon's own variables."""
    dotenv = {key: value for key, value in dotenv_values(".env").items() if value is not None}
    return {**dotenv, **os.environ}


def _expand(value: Any, environ: Mapping[str, str]) -> Any:
    """`${VAR}` / `${VAR:-default}` replaced in every string; an unset variable without a default is an error."""
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            variable, default = match.group(1), match.group(2)
            if variable in environ:
                return environ[variable]
            if default is not None:
                return default
            raise ValueError(f"${{{variable}}} is used but {variable} is not set in the environment")

        return _VARIABLE.sub(replace, value)
    if isinstance(value, list):
        return [_expand(item, environ) for item in value]
    if isinstance(value, dict):
        return {key: _expand(item, environ) for key, item in value.items()}
    return value


def _strings(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'"{key}" must be a list of strings')
    return list(value)


def _mapping(values: dict[str, Any], key: str) -> dict[str, str] | None:
    value = values.get(key)
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise ValueError(f'"{key}" must be an object of strings')
    return dict(value)


def _boolean(values: dict[str, Any], key: str, *, default: bool) -> bool:
    value = values.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f'"{key}" must be true or false')
    return value


def _seconds(values: dict[str, Any], key: str) -> float | None:
    value = values.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f'"{key}" must be a positive number of seconds')
    return float(value)
