"""The operator's own tools: from modules named in `BOT_TOOL_MODULES` and the `threadbot.tools` entry points.

A module provides its tools as module-level `Tool` objects (built with
`tools.base.tool`). An entry point may name a `Tool`, a module, or a list of
`Tool`s. Every tool keeps its origin, so that two tools with one name, or a schema
that is not JSON Schema, stop the daemon at start with an error naming where the
tool came from, instead of one silently hiding the other or failing at its first call.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

from bot.errors import ConfigError
from tools.base import Tool

ENTRY_POINT_GROUP = "threadbot.tools"


@dataclass(frozen=True, slots=True)
class SourcedTool:
    tool: Tool
    origin: str


def module_tools(module: ModuleType) -> list[Tool]:
    """The module's top-level `Tool` objects, in the order it defines them."""
    return [value for value in vars(module).values() if isinstance(value, Tool)]


def _sourced(tools: Iterable[Tool], origin: str) -> list[SourcedTool]:
    from jsonschema import Draft202012Validator  # only a daemon with tools of its operator's pays the import
    from jsonschema.exceptions import SchemaError

    for item in tools:
        try:
            Draft202012Validator.check_schema(item.input_schema)
        except SchemaError as exc:
            raise ConfigError(f"{origin}: tool {item.name!r} has an invalid input schema: {exc.message}") from None
    return [SourcedTool(item, origin) for item in tools]


def load_module_tools(names: Iterable[str]) -> list[SourcedTool]:
    found: list[SourcedTool] = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise ConfigError(f"BOT_TOOL_MODULES: cannot import {name!r}: {type(exc).__name__}: {exc}") from None
        tools = module_tools(module)
        if not tools:
            raise ConfigError(f"BOT_TOOL_MODULES: module {name!r} defines no Tool (build them with tools.base.tool)")
        found.extend(_sourced(tools, f"module {name}"))
    return found


def load_entry_point_tools(points: Iterable[EntryPoint] | None = None) -> list[SourcedTool]:
    """Tools of installed packages; `points` defaults to the `threadbot.tools` group."""
    found: list[SourcedTool] = []
    for point in entry_points(group=ENTRY_POINT_GROUP) if points is None else points:
        origin = f"entry point {point.name} = {point.value}" + (f" ({point.dist.name})" if point.dist else "")
        try:
            loaded: Any = point.load()
        except Exception as exc:
            raise ConfigError(f"{origin}: cannot load: {type(exc).__name__}: {exc}") from None
        if isinstance(loaded, Tool):
            tools = [loaded]
        elif isinstance(loaded, ModuleType):
            tools = module_tools(loaded)
        elif isinstance(loaded, list | tuple) and all(isinstance(item, Tool) for item in loaded):
            tools = list(loaded)
        else:
            raise ConfigError(f"{origin}: names a {type(loaded).__name__}, not a Tool, a list of Tools or a module")
        found.extend(_sourced(tools, origin))
    return found


def unique_tools(tools: Iterable[SourcedTool]) -> list[Tool]:
    """The tools, in order; a name used twice is a `ConfigError` naming both origins."""
    seen: dict[str, SourcedTool] = {}
    for item in tools:
        first = seen.get(item.tool.name)
        if first is not None:
            raise ConfigError(f"tool name {item.tool.name!r} is declared twice: by {first.origin} and by {item.origin}")
        seen[item.tool.name] = item
    return [item.tool for item in seen.values()]
