"""Knowing when the model is at work, so the terminal can say "thinking…" exactly then.

The engine tells its edges about text and calls but not about model requests; the
provider is the one place every request passes through, so the console wraps it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.types import ModelReply, ModelRequest, Provider, TextSink


class WatchedProvider:
    """A `Provider` that counts the requests in flight and calls `on_change` when work starts or stops."""

    def __init__(self, inner: Provider, on_change: Callable[[], None]) -> None:
        self._inner = inner
        self._on_change = on_change
        self._in_flight = 0
        self._since: float | None = None

    @property
    def thinking_s(self) -> float | None:
        """Seconds since the model started working (None while no request is out)."""
        return None if self._since is None else time.monotonic() - self._since

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        self._in_flight += 1
        if self._in_flight == 1:
            self._since = time.monotonic()
            self._on_change()
        try:
            return await self._inner.complete(request, on_text)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._since = None
                self._on_change()
