"""The tool policy: which tools a person may have run, which need an approver, which are refused.

Read from `BOT_POLICY_FILE` (TOML). A `[default]` table applies to everyone the allow-lists
admit; each `[[rule]]` applies when every list it gives (`users`, `groups`, `channels`)
matches the turn. Every matching pattern of the default and of the applicable rules counts,
and deny wins over ask over allow, so a rule can tighten the default but a broad `allow`
never undoes a `deny`. A tool no pattern names falls back to the built-in choice: built-in
and operator tools are allowed, `run_command` asks, an MCP tool is allowed when its server
marks it read-only and asks otherwise.

A question the model asks (`ask_user`) waits for a person whatever the verdict (a deny still refuses it): the
person who asked may answer it, and so may the approvers of the tables that apply to them.

A pattern is a glob on the tool's name (`mcp__github__*`), optionally with a glob on what the
call does in parentheses (`run_command(git status*)`): the command's text for `run_command`,
the arguments as compact JSON for any other tool. A pattern with arguments decides calls,
never whether the tool is offered: only a bare deny hides a tool from the model.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from bot.errors import ConfigError
from bot.toolcall import QUESTION_TOOL
from tools.base import Tool

SHELL_TOOL = "run_command"
MCP_PREFIX = "mcp__"

_TABLE_KEYS = frozenset({"allow", "ask", "deny", "approvers"})
_RULE_KEYS = _TABLE_KEYS | {"users", "groups", "channels"}
_TOML_LINE = re.compile(r"at line (\d+)")
_PATTERN = re.compile(r"^(?P<name>[^()\s]+)(?:\((?P<args>.*)\))?$", re.DOTALL)


class Verdict(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


_STRENGTH = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.DENY: 2}


class PolicyError(ConfigError):
    """A policy file that cannot be used; the message names the file, the line and the rule."""


@dataclass(frozen=True, slots=True)
class Asker:
    """Who a turn acts for, as far as the policy is concerned."""

    user: str | None
    channel: str | None = None
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Ruling:
    """What the policy says about one call: the verdict, the rule that decided it, who may approve (for a question:
    who may answer)."""

    verdict: Verdict
    rule: str
    approvers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Pattern:
    text: str
    name: str
    args: str | None

    def names(self, tool_name: str) -> bool:
        return fnmatch.fnmatchcase(tool_name, self.name)

    def matches(self, tool_name: str, arguments: Mapping[str, Any]) -> bool:
        return self.names(tool_name) and (
            self.args is None or fnmatch.fnmatchcase(_call_text(tool_name, arguments), self.args)
        )


@dataclass(frozen=True, slots=True)
class _Table:
    """`[default]` or one `[[rule]]`: its patterns by verdict, its approvers, and whom it applies to."""

    label: str
    patterns: Mapping[Verdict, tuple[_Pattern, ...]]
    approvers: tuple[str, ...] = ()
    users: frozenset[str] | None = None
    groups: frozenset[str] | None = None
    channels: frozenset[str] | None = None

    def applies(self, asker: Asker) -> bool:
        return (
            (self.users is None or asker.user in self.users)
            and (self.groups is None or bool(self.groups & asker.groups))
            and (self.channels is None or asker.channel in self.channels)
        )


@dataclass(frozen=True)
class Policy:
    tables: tuple[_Table, ...] = ()
    source: str = "built-in"
    uses_groups: bool = field(default=False)
    """Whether any rule names user groups: only then must an edge look up a person's groups."""

    @classmethod
    def load(cls, path: Path | None) -> Policy:
        """The file's policy, or the built-in one without a file; a bad file raises `PolicyError`."""
        if path is None:
            return cls()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"{path}: cannot read the policy file ({exc})") from exc
        lines = text.splitlines()
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            found = _TOML_LINE.search(str(exc))
            raise PolicyError(f"{path}:{found[1] if found else len(lines)}: not valid TOML ({exc})") from None
        unknown = set(data) - {"default", "rule"}
        if unknown:
            raise PolicyError(f"{path}:{_line_of(lines, sorted(unknown)[0])}: unknown table {sorted(unknown)[0]!r}")
        tables = []
        if "default" in data:
            tables.append(
                _table(_Where(path, lines, _line_of(lines, "[default]")), "[default]", data["default"], _TABLE_KEYS)
            )
        rules = data.get("rule", [])
        if not isinstance(rules, list):
            raise PolicyError(f"{path}:{_line_of(lines, 'rule')}: rule must be an array of tables ([[rule]])")
        starts = [number for number, line in enumerate(lines, start=1) if line.strip().startswith("[[rule]]")]
        for number, rule in enumerate(rules, start=1):
            start = starts[number - 1] if number <= len(starts) else 1
            tables.append(_table(_Where(path, lines, start), f"[[rule]] #{number}", rule, _RULE_KEYS))
        return cls(tuple(tables), str(path), any(table.groups is not None for table in tables))

    def rule_for(self, tool: Tool | None, tool_name: str, arguments: Mapping[str, Any], asker: Asker) -> Ruling:
        """The verdict on one call; deny wins over ask over allow."""
        found: Ruling | None = None
        approvers: list[str] = []
        for table in self.tables:
            if not table.applies(asker):
                continue
            approvers += [person for person in table.approvers if person not in approvers]
            for verdict, patterns in table.patterns.items():
                for pattern in patterns:
                    if pattern.matches(tool_name, arguments) and (
                        found is None or _STRENGTH[verdict] > _STRENGTH[found.verdict]
                    ):
                        found = Ruling(verdict, f"{self.source} {table.label}: {verdict} {pattern.text}")
        if found is None:
            found = _built_in(tool, tool_name)
        asker_only = (asker.user,) if asker.user else ()
        if tool_name == QUESTION_TOOL:
            return Ruling(found.verdict, found.rule, (*asker_only, *(p for p in approvers if p != asker.user)))
        who = tuple(approvers) or asker_only
        return Ruling(found.verdict, found.rule, who if found.verdict is Verdict.ASK else ())

    def hidden(self, names: Iterable[str], asker: Asker) -> frozenset[str]:
        """The tools a bare deny pattern takes away from this asker: they are not offered to the model."""
        bare = [
            pattern
            for table in self.tables
            if table.applies(asker)
            for pattern in table.patterns.get(Verdict.DENY, ())
            if pattern.args is None
        ]
        return frozenset(name for name in names if any(pattern.names(name) for pattern in bare))

    def describe(self) -> list[str]:
        """The effective policy, one line per table, for `check`."""
        if not self.tables:
            return [
                "built-in policy: built-in and operator tools allowed; run_command asks;"
                " MCP tools allowed when read-only, else ask; the person who asked approves"
            ]
        lines = [f"policy file {self.source} (unnamed tools: the built-in choice)"]
        for table in self.tables:
            scope = [
                f"{key}={','.join(sorted(value))}"
                for key, value in (("users", table.users), ("groups", table.groups), ("channels", table.channels))
                if value is not None
            ]
            verdicts = [
                f"{verdict}: {', '.join(pattern.text for pattern in patterns)}"
                for verdict, patterns in table.patterns.items()
                if patterns
            ]
            approvers = f"approvers: {', '.join(table.approvers)}" if table.approvers else "approvers: the asker"
            lines.append(f"{table.label} {' '.join(scope) or 'everyone'} | {' | '.join([*verdicts, approvers])}")
        return lines


def _built_in(tool: Tool | None, tool_name: str) -> Ruling:
    if tool_name == SHELL_TOOL:
        return Ruling(Verdict.ASK, "built-in: run_command asks")
    if tool_name.startswith(MCP_PREFIX) and not (tool is not None and tool.read_only):
        return Ruling(Verdict.ASK, "built-in: an MCP tool not marked read-only asks")
    return Ruling(Verdict.ALLOW, "built-in: allowed")


def _call_text(tool_name: str, arguments: Mapping[str, Any]) -> str:
    if tool_name == SHELL_TOOL:
        return str(arguments.get("command", ""))
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True, slots=True)
class _Where:
    """A table's place in the file, so an error can name the line of the key or pattern at fault."""

    path: Path
    lines: list[str]
    start: int

    def line(self, needle: str) -> str:
        return f"{self.path}:{_line_of(self.lines, needle, self.start)}"


def _table(where: _Where, label: str, data: object, keys: frozenset[str]) -> _Table:
    if not isinstance(data, dict):
        raise PolicyError(f"{where.path}:{where.start}: {label} must be a table")
    for key in data:
        if key not in keys:
            known = ", ".join(sorted(keys))
            raise PolicyError(f"{where.line(key)}: {label}: unknown key {key!r} (known: {known})")
    lists = {key: _strings(where, label, key, value) for key, value in data.items()}
    patterns = {
        verdict: tuple(_pattern(where, label, text) for text in lists.get(verdict.value, ())) for verdict in Verdict
    }
    scope = {key: frozenset(lists[key]) if key in lists else None for key in ("users", "groups", "channels")}
    if keys is _RULE_KEYS and all(value is None for value in scope.values()):
        raise PolicyError(
            f"{where.path}:{where.start}: {label} gives no users, groups or channels (for everyone: [default])"
        )
    return _Table(label, patterns, tuple(lists.get("approvers", ())), **scope)


def _strings(where: _Where, label: str, key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise PolicyError(f"{where.line(key)}: {label}: {key} must be a list of non-empty strings")
    return [item.strip() for item in value]


def _pattern(where: _Where, label: str, text: str) -> _Pattern:
    match = _PATTERN.match(text)
    if match is None:
        raise PolicyError(f"{where.line(text)}: {label}: {text!r} is not a tool pattern (NAME or NAME(ARGUMENTS))")
    return _Pattern(text, match["name"], match["args"])


def _line_of(lines: list[str], needle: str, start: int = 1) -> int:
    """The first line from `start` that mentions `needle` (tomllib keeps no positions)."""
    return next((number for number, line in enumerate(lines, start=1) if number >= start and needle in line), start)
