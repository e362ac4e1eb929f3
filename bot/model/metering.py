"""Every model call's tokens, booked in the store and counted for `/metrics`.

`MeteredProvider` wraps the real provider, so no caller can forget to book a call:
turns, heartbeat decisions and compaction summaries all go through it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Protocol

from bot.types import ModelReply, ModelRequest, Provider, TextSink, Usage

log = logging.getLogger(__name__)


class UsageBook(Protocol):
    async def record_usage(
        self, *, session_key: str, turn_id: str | None, model: str, usage: Usage, requester: str | None = None
    ) -> None: ...


class UsageMeter:
    """Process totals per model, read by the metrics endpoint when scraped."""

    def __init__(self) -> None:
        self.totals: defaultdict[str, Usage] = defaultdict(Usage)

    def add(self, model: str, usage: Usage) -> None:
        self.totals[model] += usage


class MeteredProvider:
    def __init__(self, inner: Provider, *, book: UsageBook, meter: UsageMeter) -> None:
        self._inner = inner
        self._book = book
        self.meter = meter

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        reply = await self._inner.complete(request, on_text)
        self.meter.add(reply.model, reply.usage)
        if request.billing is not None:
            billing = request.billing
            try:
                await self._book.record_usage(
                    session_key=billing.session_key,
                    turn_id=billing.turn_id,
                    model=reply.model,
                    usage=reply.usage,
                    requester=billing.requester,
                )
            except Exception:
                # The answer matters more than its bookkeeping: the turn goes on.
                log.exception("could not record the usage of a model call in %s", billing.session_key)
        return reply
