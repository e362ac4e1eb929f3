"""What differs between one process and several replicas on one database, behind one seam.

The app picks an implementation once, where it is wired (`bot/app.py`): `Alone` for the SQLite
file (and for a console or oneshot beside a cluster's database), `ClusterNode`
(bot/cluster/node.py) for a replica on PostgreSQL. Everything else asks the seam, never the mode,
but in four places of the Slack edge that say why (how it acks, claims, stops and checks who may
cancel):

- who runs a thread's turn: `hand_off` (alone: this process, at once);
- how a cancel, a decision or a new reminder reaches the process that holds the work: `relay`,
  `offer_in`, `reminder_changed` (alone: it is this process already);
- ticks that must run once: `ticks` (alone: None, the scheduler's own timer);
- who owes what after a death: `recover` at start and `join` once the process is built (alone: a
  previous process's leftovers, taken up at start; a cluster: whatever a dead replica left, taken up by
  a live one as it reaps), and `wind_down` at exit (a replica hands the threads it cut short on).

The store is opened by whoever opens the seam (`open_alone`, `open_cluster`): the lock or the lease
comes with it, in the order each needs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from bot.config import Settings
from bot.store import Store, open_store
from bot.store.lock import exclusive_database

if TYPE_CHECKING:
    import psycopg

    from bot.agent.engine import Engine
    from bot.calls.registry import CallRegistry
    from bot.schedule import Scheduler
    from bot.schedule.scheduler import Periodic
    from bot.store import OwedMessage
    from bot.toolcall import ToolCall
    from bot.types import SessionFilter


class EdgeDuties(Protocol):
    """What an edge does for the seam once work moves between processes (the Slack edge)."""

    async def repaint(self, orphans: list[ToolCall]) -> None:
        """Show calls a dead process left as orphaned where they were shown."""

    def take_over(self, owed: list[OwedMessage]) -> None:
        """Deliver what a gone process still owed, as if this one had owed it."""

    def share_budget(self, processes: int) -> None:
        """Spend a share of the workspace's budgets: `processes` are live."""

    async def injected(self, ref: dict[str, Any]) -> None:
        """Acknowledge a message (`ref`: its channel and ts) taken into a turn running here."""

    async def relayed(self, kind: str, body: dict[str, Any]) -> None:
        """Act on a cancel or a decision `relay`ed from any process, if its work is held here."""


@dataclass(frozen=True, slots=True)
class Crew:
    """What a process has built, handed to `join` once: what the seam calls back."""

    engine: Engine
    scheduler: Scheduler
    take_up_asked: Callable[[list[ToolCall]], None]
    """Wait here for the approvals of these calls (a gone process asked for them)."""
    edge: EdgeDuties
    owns: SessionFilter | None = None
    """The sessions of the edge that runs this process (None: all)."""


class Coordination(Protocol):
    """One process among others on one database, or the only one; see the module docstring."""

    @property
    def replica(self) -> str | None:
        """Who the store records as writing (and fences by a lease); None for the only writer."""

    @property
    def shared(self) -> bool:
        """Whether other processes hold work of this database's sessions: what one of them learned
        in memory (who started a turn) is then asked of the store."""

    @property
    def ticks(self) -> Periodic | None:
        """Runs interval jobs once per tick across processes; None: the scheduler's own timer runs them."""

    @property
    def lost(self) -> asyncio.Event:
        """Set when this process may no longer work (a replica's lost lease); never set alone."""

    def hand_off(self, session_key: str) -> bool:
        """Offer the session's next turn (its input is in the store) to whichever process takes it;
        False when this process is to start it now."""

    async def offer_in(self, conn: psycopg.AsyncConnection[Any], session_key: str, ref: dict[str, str]) -> None:
        """`hand_off` inside the caller's transaction, for a message (`ref`) claimed in it."""

    async def relay(self, kind: str, body: dict[str, Any]) -> bool:
        """Hand a cancel or a decision (`kind`, `body`) to every process, the one holding its work
        acts on it (`EdgeDuties.relayed`); False when there is no other process, so the caller acts."""

    def reminder_changed(self, reminder_id: int) -> None:
        """A row this process added or cancelled: the others follow it."""

    async def recover(self, registry: CallRegistry, take_up_asked: Callable[[list[ToolCall]], None]) -> list[ToolCall]:
        """At start, before any turn: calls a previous process left open become orphaned (returned),
        approvals it asked for are waited for here."""

    async def join(self, crew: Crew) -> None:
        """Start taking work: what the others (or a previous process) left owed is taken up from here on."""

    async def wind_down(self, engine: Engine, registry: CallRegistry, grace_s: float) -> None:
        """At exit: stop turns and calls (a grace period first), leaving what is unfinished owed."""


class Alone:
    """The only process on its database: it runs every turn, every tick and every cancel itself.

    `exclusive` (the SQLite file's lock is held) makes every open call at start a previous process's;
    without it (a console beside a cluster's PostgreSQL) the calls left open are live replicas', and
    this process leaves them alone."""

    def __init__(self, store: Store, *, exclusive: bool = True) -> None:
        self._store = store
        self._exclusive = exclusive
        self.replica: str | None = None
        self.shared = False
        self.ticks: Periodic | None = None
        self.lost = asyncio.Event()

    def hand_off(self, session_key: str) -> bool:
        return False

    async def offer_in(self, conn: psycopg.AsyncConnection[Any], session_key: str, ref: dict[str, str]) -> None:
        """Nothing to offer: a message's turn starts here (the router hands it to the engine)."""

    async def relay(self, kind: str, body: dict[str, Any]) -> bool:
        return False

    def reminder_changed(self, reminder_id: int) -> None:
        """No other process follows this one's reminders."""

    async def recover(self, registry: CallRegistry, take_up_asked: Callable[[list[ToolCall]], None]) -> list[ToolCall]:
        if not self._exclusive:
            return []
        orphans = await registry.recover()
        take_up_asked(await self._store.adopt_asked_calls())
        return orphans

    async def join(self, crew: Crew) -> None:
        # Before new events: what was acked before the restart goes first.
        await crew.engine.resume(crew.owns)

    async def wind_down(self, engine: Engine, registry: CallRegistry, grace_s: float) -> None:
        await engine.shutdown(grace_s=grace_s)
        await registry.shutdown(grace_s=grace_s)


async def open_alone(settings: Settings, stack: contextlib.AsyncExitStack) -> tuple[Store, Alone]:
    """The SQLite file, its lock taken first (before recovery can orphan anyone's calls); or, with
    `BOT_DATABASE_URL`, a cluster's database that this process only visits (a console, oneshot)."""
    if settings.database_url is None:
        stack.enter_context(exclusive_database(settings.db_path))
    store = await open_store(settings)
    stack.push_async_callback(store.close)
    return store, Alone(store, exclusive=settings.database_url is None)
