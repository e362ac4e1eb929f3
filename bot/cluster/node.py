"""One replica's part in a cluster: its lease, its worker, its doorbell and its share of the reaping.

The engine sees only a `TurnHost`: `offer(key)` defers the thread's job (procrastinate's lock
and queueing lock keep one turn per thread anywhere) and rings the doorbell, so a replica
already running that thread's turn takes the new input as an injection at once. Everything
else that must reach another replica (a cancel, a reaction, a reminder someone added) is a
ring too: a row in `cluster_rings` and a NOTIFY in one transaction. The NOTIFY makes it fast;
the row makes it sure, since the doorbell's backstop replays recent rows a replica has not
handled (notifications sent while its LISTEN connection was down are gone).

Every heartbeat each replica tries to reap: a replica whose lease ran out is claimed by exactly
one live replica, which marks its open calls orphaned (the edge repaints them 👻) and offers
their threads; procrastinate jobs left `doing` by its worker are failed and offered again, so
the thread's next turn runs here or elsewhere and resumes from the stored history. What a dead
or stopped replica still owed Slack (its outbox: posts, reminders, final edits) is adopted by one
live replica and delivered from there. Nothing the
dead replica was running is run twice: its calls end orphaned, and the store's fence refuses
any write it might still attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from bot.cluster.doorbell import Doorbell, Ring
from bot.cluster.jobs import ThreadJobs
from bot.cluster.replicas import Replicas
from bot.cluster.ticks import Ticks
from bot.concurrency import TaskSet

if TYPE_CHECKING:
    from bot.agent.engine import Engine
    from bot.schedule import Scheduler
    from bot.store import OwedMessage
    from bot.store.postgres import PostgresStore
    from bot.toolcall import ToolCall

log = logging.getLogger(__name__)

REPLAY_S = 60.0
"""How far back the backstop looks for rings: well past any reconnect, short enough to stay cheap."""
KEEP_RINGS_S = 600.0
PRUNE_S = 60.0
"""How often one replica prunes the rings and the replicas tables (the reap runs every heartbeat)."""
KEEP_REPLICAS_S = 7 * 24 * 3600.0
"""Gone replicas that owe nothing are forgotten after a week (their rows name who ran old calls)."""
REMEMBER_RINGS = 10_000

Handler = Callable[[Ring], Awaitable[None]]
OrphanPainter = Callable[[list["ToolCall"]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    heartbeat_s: float = 1.0
    lease_s: float = 6.0
    """A replica silent for this long is dead: its calls are orphaned and its threads go elsewhere."""
    backstop_s: float = 2.0
    concurrency: int = 100
    """Thread turns one replica runs at once."""


class ClusterNode:
    """A replica: `open` before the store writes anything (the fence checks its lease), `attach` the
    engine, `start`, `stop_jobs` while the engine shuts down, and `close` at the end."""

    def __init__(self, *, dsn: str, settings: ClusterSettings = ClusterSettings()) -> None:
        self.settings = settings
        self.lost = asyncio.Event()
        """Set when this replica lost its lease: it must stop, its work is someone else's now."""
        self.replicas = Replicas(dsn=dsn, lost=self._on_lost, interval_s=settings.heartbeat_s, lease_s=settings.lease_s)
        self.jobs = ThreadJobs(
            dsn=dsn, run=self._run_thread, worker_name=self.replicas.id, heartbeat_s=settings.heartbeat_s
        )
        self.ticks = Ticks(dsn=dsn, replica_id=self.replicas.id)
        """The heartbeat's and housekeeping's ticks: each runs on one replica only."""
        self.doorbell = Doorbell(
            dsn=dsn, handler=self._on_ring, backstop=self._backstop, backstop_s=settings.backstop_s
        )
        self._handlers: dict[str, Handler] = {"input": self._take_inputs, "reminder": self._track_reminder}
        self._handled: OrderedDict[int, None] = OrderedDict()
        self._store: PostgresStore | None = None
        self._engine: Engine | None = None
        self._scheduler: Scheduler | None = None
        self._paint_orphans: OrphanPainter | None = None
        self._take_up_asked: Callable[[list[ToolCall]], Awaitable[None]] | None = None
        self._live: Callable[[int], None] | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._injected: Callable[[Ring, list[int]], Awaitable[None]] | None = None
        self._take_over: Callable[[list[OwedMessage]], None] | None = None
        self._sending = TaskSet()
        self._worker_recorded = False
        self._replay_after = 0

    @property
    def id(self) -> str:
        return self.replicas.id

    async def open(self) -> None:
        """Take a lease and open the job queue; the worker starts later, with `start`."""
        await self.replicas.register()
        await self.jobs.open()

    def attach(
        self,
        *,
        store: PostgresStore,
        engine: Engine,
        scheduler: Scheduler,
        take_up_asked: Callable[[list[ToolCall]], Awaitable[None]],
    ) -> None:
        self._store, self._engine, self._scheduler = store, engine, scheduler
        self._take_up_asked = take_up_asked
        scheduler.on_change(lambda reminder_id: self._spawn(self.ring("reminder", str(reminder_id)), "ring"))

    def attach_edge(
        self,
        *,
        paint_orphans: OrphanPainter,
        live: Callable[[int], None],
        injected: Callable[[Ring, list[int]], Awaitable[None]],
        take_over: Callable[[list[OwedMessage]], None],
    ) -> None:
        """What the edge does for the cluster: repaint orphaned calls, split budgets, acknowledge an
        injection, deliver what a gone replica still owed."""
        self._paint_orphans, self._live, self._injected = paint_orphans, live, injected
        self._take_over = take_over

    def on(self, kind: str, handler: Handler) -> None:
        """Handle rings of `kind` (each ring reaches every replica, this one too)."""
        self._handlers[kind] = handler

    async def start(self) -> None:
        """Start taking turns and listening; from here on this replica is a full member.

        Rings sent before it listened are not its business (the cancel of a turn that ended long ago
        must not stop a newer one): its backstop only ever replays rings newer than that."""
        self._replay_after = await self._require_store().last_ring_id()
        await self.doorbell.start()
        await self.jobs.start(concurrency=self.settings.concurrency)
        self._reaper = asyncio.create_task(self._reap_forever(), name=f"reaper {self.id}")
        self.ticks.every("cluster-housekeeping", PRUNE_S, self._prune)

    async def stop_jobs(self) -> None:
        """Take no new turns, and wait for the running ones (the engine ends them meanwhile)."""
        stopping = asyncio.ensure_future(self.jobs.stop())  # first: the worker fetches nothing from here on
        with contextlib.suppress(Exception):
            await self.replicas.mark_stopping()
        await stopping

    async def close(self) -> None:
        """Give the lease back (nobody needs to reap a replica that said goodbye) and disconnect."""
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
        await self._sending.close()  # a ring only shortens a wait: one cut short costs latency, not work
        await self.doorbell.stop()
        await self.ticks.close()
        if not self.lost.is_set():
            with contextlib.suppress(Exception):
                await self.replicas.mark_stopped()
        await self.replicas.close()
        await self.jobs.close()

    # -- the engine's TurnHost ------------------------------------------------------------

    def offer_soon(self, session_key: str) -> None:
        """`offer` in the background (the engine's TurnHost): the input is in the store already."""
        self._spawn(self.offer(session_key), "offer")

    async def offer(self, session_key: str) -> None:
        """The thread has input: its job is committed (or already queued) when this returns."""
        async with self._require_store().transaction() as conn:
            await self.offer_in(conn, session_key)

    async def offer_in(
        self, conn: psycopg.AsyncConnection[Any], session_key: str, ref: dict[str, str] | None = None
    ) -> None:
        """`offer` inside the caller's transaction: the job and the ring commit with the input they are for."""
        await self.jobs.offer(session_key, conn)
        await self._ring_in(conn, "input", session_key, ref or {})

    async def ring(self, kind: str, key: str, **extra: Any) -> None:
        """Tell every replica (this one too): the row first, then the NOTIFY, in one transaction."""
        async with self._require_store().transaction() as conn:
            await self._ring_in(conn, kind, key, extra)

    async def _ring_in(self, conn: psycopg.AsyncConnection[Any], kind: str, key: str, extra: dict[str, Any]) -> None:
        ring_id = await self._require_store().add_ring(conn, kind, key, extra)
        await self.doorbell.ring(kind, key, conn, id=ring_id, **extra)

    # -- what arrives ---------------------------------------------------------------------

    async def _on_ring(self, ring: Ring) -> None:
        ring_id = ring.extra.pop("id", None)
        if isinstance(ring_id, int):
            if ring_id in self._handled:
                return
            self._handled[ring_id] = None
            while len(self._handled) > REMEMBER_RINGS:
                self._handled.popitem(last=False)
        handler = self._handlers.get(ring.kind)
        if handler is None:
            log.warning("ignoring a ring of unknown kind %r", ring.kind)
            return
        try:
            await handler(ring)
        except Exception:
            log.exception("handling a %s ring for %s failed", ring.kind, ring.key)

    async def _take_inputs(self, ring: Ring) -> None:
        if self._engine is None:
            return
        taken = await self._engine.take_inputs(ring.key)
        if taken and self._injected is not None:
            await self._injected(ring, taken)

    async def _track_reminder(self, ring: Ring) -> None:
        if self._scheduler is not None:
            await self._scheduler.track(int(ring.key))

    async def _run_thread(self, session_key: str) -> None:
        if not self._worker_recorded and (worker_id := self.jobs.worker_id) is not None:
            await self.replicas.record_worker(worker_id)  # before its first turn: whose jobs are whose
            self._worker_recorded = True
        if self._engine is not None:
            await self._engine.run_thread(session_key)

    async def _backstop(self) -> None:
        """What a lost NOTIFY would have said: recent rings not handled here, input nobody took up."""
        store = self._require_store()
        for ring in await store.recent_rings(REPLAY_S, after_id=self._replay_after):
            if ring.id not in self._handled:
                await self._on_ring(Ring(ring.kind, ring.key, {**ring.body, "id": ring.id}))
        for key in await store.unattended_sessions(self.settings.backstop_s):
            await self.jobs.offer(key)  # owed input or a result, and no job of its thread queued or running

    # -- the dead -------------------------------------------------------------------------

    async def _reap_forever(self) -> None:
        while not self.lost.is_set():  # a replica without a lease has no say over the others
            try:
                await self.reap()
            except Exception:
                log.exception("reaping dead replicas failed; trying again")
            await asyncio.sleep(self.settings.heartbeat_s)

    async def reap(self) -> None:
        """Claim replicas whose lease ran out, orphan their calls, offer their threads elsewhere, and
        deliver what gone replicas still owed Slack (every heartbeat, on every replica)."""
        store = self._require_store()
        dead = await self.replicas.reap(self.settings.lease_s)
        if dead:
            log.warning("replicas %s stopped heartbeating; taking over their threads", ", ".join(dead))
        # Every dead replica's, not only those claimed just now: a reap that failed halfway is finished here.
        orphans = await store.orphan_dead_calls()
        if orphans and self._paint_orphans is not None:
            await self._paint_orphans(orphans)
        for key in sorted({call.session_key for call in orphans}):
            await self.jobs.offer(key)
        asked = await store.adopt_asked_calls_of_gone()
        if asked and self._take_up_asked is not None:
            log.info("waiting here for %d approvals that gone replicas had asked for", len(asked))
            await self._take_up_asked(asked)
        posts = await store.adopt_owed()
        if posts and self._take_over is not None:
            log.info("delivering %d Slack posts and edits that gone replicas still owed", len(posts))
            self._take_over(posts)
        recovered = await self.jobs.recover_stalled()
        if recovered:
            log.warning("resuming %d threads whose turns stopped with their replica", len(recovered))
        if self._live is not None:
            self._live(await self.replicas.live_count())

    async def _prune(self, _tick: int) -> None:
        """Housekeeping, once a minute on one replica: old rings, and gone replicas that owe nothing."""
        store = self._require_store()
        await store.prune_rings(KEEP_RINGS_S)
        await store.prune_replicas(KEEP_REPLICAS_S)

    async def _on_lost(self) -> None:
        log.error("replica %s lost its lease (the database is unreachable, or others declared it dead)", self.id)
        self.lost.set()

    def _require_store(self) -> PostgresStore:
        if self._store is None:
            raise RuntimeError("the cluster node is not attached to a store yet")
        return self._store

    def _spawn(self, work: Coroutine[Any, Any, None], what: str) -> None:
        if self._sending.spawn(_or_backstop(work), f"cluster {what}") is None:
            work.close()  # closing: the backstop of whoever goes on finds it


async def _or_backstop(work: Coroutine[Any, Any, None]) -> None:
    """A ring or an offer that fails is no error: the backstop polls for what it would have said."""
    try:
        await work
    except Exception as exc:
        log.warning("could not reach the cluster (the backstop tries again): %s", exc)
