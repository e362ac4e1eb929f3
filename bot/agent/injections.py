"""Per-session injection queue: what people say while a turn runs.

The edge puts notes in; the turn loop is woken by `arrived` and drains them.
A note is a line of text, or content blocks when it carries more than text (a
file shared in the thread). The per-turn fuse stops a producer that never pauses
from keeping a turn alive. Each note keeps the id of its inbox row, so the turn
that stores it in the history can mark the row stored in the same transaction.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

Content = str | list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Note:
    content: Content
    inbox_id: int | None = None


class Injections:
    def __init__(self, max_per_turn: int) -> None:
        self._lines: list[Note] = []
        self._max_per_turn = max_per_turn
        self._taken_this_turn = 0
        self.arrived = asyncio.Event()

    def put(self, content: Content, inbox_id: int | None = None) -> None:
        if isinstance(content, str):
            content = content.strip()
        if content:
            self._lines.append(Note(content, inbox_id))
            self.arrived.set()

    def drain(self) -> list[Note]:
        """Take what is queued, up to what the fuse still allows this turn; the rest waits for the next turn."""
        room = max(0, self._max_per_turn - self._taken_this_turn)
        taken, self._lines = self._lines[:room], self._lines[room:]
        self._taken_this_turn += len(taken)
        self.arrived.clear()
        return taken

    @property
    def ready(self) -> bool:
        """Lines are waiting and the fuse still lets them in this turn."""
        return bool(self._lines) and not self.fuse_blown

    @property
    def waiting(self) -> bool:
        """Lines are queued, whether or not this turn's fuse still lets them in."""
        return bool(self._lines)

    @property
    def fuse_blown(self) -> bool:
        return self._taken_this_turn >= self._max_per_turn

    def new_turn(self) -> None:
        self._taken_this_turn = 0
        if self._lines:
            self.arrived.set()
