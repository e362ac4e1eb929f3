"""The set of tools offered to the model, and the check of a call against its schema."""

from __future__ import annotations

from collections.abc import Iterable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from bot.calls.models import JSON
from tools.base import Tool


class Toolbox:
    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        for item in tools:
            self.add(item)

    def add(self, item: Tool) -> None:
        Draft202012Validator.check_schema(item.input_schema)
        self._tools[item.name] = item
        self._validators[item.name] = Draft202012Validator(item.input_schema)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def specs(self) -> list[dict[str, JSON]]:
        return [item.spec() for item in self._tools.values()]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def problem(self, name: str, args: JSON) -> str | None:
        """Why this call cannot run (unknown tool, arguments breaking the schema), or None."""
        validator = self._validators.get(name)
        if validator is None:
            return f"unknown tool {name!r}; available tools: {', '.join(self._tools)}"
        if not isinstance(args, dict):
            return "arguments must be a JSON object"
        error = best_match(validator.iter_errors(args))
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path)
        return f"invalid arguments for {name}: {error.message}" + (f" (at {where})" if where else "")
