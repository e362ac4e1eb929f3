"""Quiet turns: a heartbeat session must not open a thread just to say that all is well.

A quiet session (its address names a `quiet_reply`) that has no thread yet would open
one with its first post, so the operations of each of its turns (status messages,
notices, earlier text) are held in order until the turn ends: dropped if its answer
is the quiet word, else run then, the first of them opening the thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.slack.queues import Operation
from bot.slack.sessions import Sessions

log = logging.getLogger(__name__)


class QuietHold:
    """Sets a quiet turn's operations aside until its answer shows whether it says anything."""

    def __init__(self, sessions: Sessions, *, abandon: Callable[[str], None]) -> None:
        self._sessions = sessions
        self._abandon = abandon  # forgets the session's status messages, which a dropped turn never posted

    def holdable(self, key: str, operation: Operation) -> Operation:
        """`operation` as queued in the session: run when its turn comes, or set aside in a held turn."""

        async def run() -> None:
            held = self._sessions.get(key).held
            if held is None:
                await operation()
            else:
                held.append(operation)

        return run

    async def hold_if_quiet(self, key: str) -> None:
        """Queued first in a turn, so it can wait for the address and still precede the turn's posts."""
        address = await self._sessions.address(key)
        if address is not None and address.quiet_reply and address.thread_ts is None:
            self._sessions.get(key).held = []

    async def release(self, key: str, answer: str) -> None:
        """Queued last in a turn: nothing at all if it ended on the quiet word, else everything held, in order."""
        state = self._sessions.get(key)
        held, state.held = state.held, None
        if held is None:
            return
        if state.address is not None and answer.strip() == state.address.quiet_reply:
            self._abandon(key)
            return
        for operation in held:
            try:
                await operation()
            except Exception:
                log.exception("a held Slack operation for %s failed", key)
