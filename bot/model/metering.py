"""Every model call's tokens, booked in the store and counted for `/metrics`, its span and latency reported.

`MeteredProvider` wraps the real provider, so no caller can forget to book a call:
turns, heartbeat decisions and compaction summaries all go through it.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from bot.clock import utcnow
from bot.store import Store
from bot.store.group import GroupCommit
from bot.store.usage import UsageEntry
from bot.telemetry.agent import AgentTelemetry
from bot.types import ModelReply, ModelRequest, Provider, TextSink, Usage

log = logging.getLogger(__name__)


class UsageBook(Protocol):
    async def record_usage(
        self, *, session_key: str, turn_id: str | None, model: str, usage: Usage, requester: str | None = None
    ) -> None: ...


class GroupedBook:
    """The store as a `UsageBook` whose calls booked together share one transaction (`GroupCommit`):
    each booking is still awaited until it is on disk."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._group: GroupCommit[UsageEntry] = GroupCommit(self._write, "usage rows")
        self._count = itertools.count()

    async def record_usage(
        self, *, session_key: str, turn_id: str | None, model: str, usage: Usage, requester: str | None = None
    ) -> None:
        entry = UsageEntry(session_key, turn_id, model, usage, requester, utcnow())
        await self._group.add(next(self._count), entry)

    async def _write(self, entries: Sequence[UsageEntry]) -> None:
        await self._store.record_usages(entries)


class UsageMeter:
    """Process totals per model, read by the metrics endpoint when scraped."""

    def __init__(self) -> None:
        self.totals: defaultdict[str, Usage] = defaultdict(Usage)

    def add(self, model: str, usage: Usage) -> None:
        self.totals[model] += usage


class MeteredProvider:
    def __init__(
        self,
        inner: Provider,
        *,
        book: UsageBook,
        meter: UsageMeter,
        model: str = "",
        telemetry: AgentTelemetry | None = None,
    ) -> None:
        """`model` names the requests' spans before an answer says which model it came from."""
        self._inner = inner
        self._book = book
        self.meter = meter
        self._model = model
        self._telemetry = telemetry or AgentTelemetry()

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        with self._telemetry.model_request(self._model, request) as asked:
            reply = await self._inner.complete(request, on_text)
            asked.answered(reply)
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
