"""Daily token budgets: a turn asks before each model call whether its person and its channel have tokens left.

The books are the store's (`model_usage`), so every replica and every restart sees the same
spend. A budget counts every token a call cost since the last UTC midnight; the call that
crosses it finishes (its size is not known before), and the next one is not made.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from bot.clock import utcnow
from bot.quotas import day_start, reset_text
from bot.store import Store


class TokenBudget:
    """`BOT_DAILY_TOKENS_PER_USER` and `BOT_DAILY_TOKENS_PER_CHANNEL` over the store's books; None is no budget."""

    def __init__(
        self, store: Store, *, per_user: int | None, per_channel: int | None, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self._store = store
        self._per_user = per_user
        self._per_channel = per_channel
        self._clock = clock

    async def refusal(self, session_key: str, requester: str | None) -> str | None:
        """The thread's line when a budget this session counts against is spent for today; None otherwise."""
        now = self._clock()
        since = day_start(now)
        if self._per_user is not None and requester is not None:
            used = await self._store.tokens_since(since, requester=requester)
            if used >= self._per_user:
                return _line(f"{requester} has used", used, "BOT_DAILY_TOKENS_PER_USER", self._per_user, now)
        if self._per_channel is not None:
            session = await self._store.get_session(session_key)
            channel = session.address.get("channel") if session is not None else None
            if channel is not None:
                used = await self._store.tokens_since(since, channel=channel)
                if used >= self._per_channel:
                    who = f"this channel ({channel}) has used"
                    return _line(who, used, "BOT_DAILY_TOKENS_PER_CHANNEL", self._per_channel, now)
        return None


def _line(who: str, used: int, variable: str, limit: int, now: datetime) -> str:
    return (
        f"🚦 Not answered: {who} {used:,} tokens today, the daily budget {variable} ({limit:,}) "
        f"allows; it {reset_text(now)}."
    )
