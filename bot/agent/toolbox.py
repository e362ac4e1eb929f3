"""The set of tools offered to the model, and the check of a call against its schema.

Fixed tools (built-in, system, the operator's) are added once. A source (the MCP
servers) can change its tools while the daemon runs, so it is asked again at every
lookup; a fixed tool wins over a source's tool of the same name.

Schemas are checked where tools come from outside (the operator's loader, the MCP
source), so that a bad one is refused with its origin; a validator is built at a
tool's first call, which keeps jsonschema off the start-up path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from bot.toolcall import JSON
from tools.base import Tool

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


class ToolSource(Protocol):
    def tools(self) -> Sequence[Tool]:
        """The source's tools as of now."""
        ...


class Toolbox:
    def __init__(self, tools: Iterable[Tool], sources: Iterable[ToolSource] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, tuple[Tool, Draft202012Validator]] = {}
        self._sources = list(sources)
        for item in tools:
            self.add(item)

    def add(self, item: Tool) -> None:
        self._tools[item.name] = item

    def add_source(self, source: ToolSource) -> None:
        self._sources.append(source)

    def _all(self) -> dict[str, Tool]:
        if not self._sources:
            return self._tools
        tools = dict(self._tools)
        for source in self._sources:
            for item in source.tools():
                tools.setdefault(item.name, item)
        return tools

    def get(self, name: str) -> Tool | None:
        found = self._tools.get(name)
        if found is not None or not self._sources:
            return found
        return self._all().get(name)

    def specs(self) -> list[dict[str, JSON]]:
        return [item.spec() for item in self._all().values()]

    @property
    def names(self) -> list[str]:
        return list(self._all())

    def _validator(self, item: Tool) -> Draft202012Validator:
        cached = self._validators.get(item.name)
        if cached is not None and cached[0] is item:
            return cached[1]
        from jsonschema import Draft202012Validator

        validator = Draft202012Validator(item.input_schema)
        self._validators[item.name] = (item, validator)
        return validator

    def problem(self, name: str, args: JSON) -> str | None:
        """Why this call cannot run (unknown tool, arguments breaking the schema), or None."""
        item = self.get(name)
        if item is None:
            return f"unknown tool {name!r}; available tools: {', '.join(self.names)}"
        if not isinstance(args, dict):
            return "arguments must be a JSON object"
        from jsonschema.exceptions import best_match

        error = best_match(self._validator(item).iter_errors(args))
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path)
        return f"invalid arguments for {name}: {error.message}" + (f" (at {where})" if where else "")
