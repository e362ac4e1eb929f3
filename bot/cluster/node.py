"""One replica's part in a cluster: its lease, its worker, its doorbell and its share of the reaping.

The engine sees only the coordination seam: `hand_off(key)` defers the thread's job (procrastinate's lock
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
import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from bot.cluster.doorbell import Doorbell, Ring
from bot.cluster.jobs import ThreadJobs
from bot.cluster.replicas import Replicas, new_replica_id
from bot.cluster.ticks import Ticks
from bot.concurrency import TaskSet
from bot.config import Settings
from bot.coordination import Crew
from bot.store.postgres import PostgresStore
from bot.telemetry.tracing import resumed

if TYPE_CHECKING:
    from bot.agent.engine import Engine
    from bot.calls.registry import CallRegistry
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

RELAYED = frozenset({"approval", "reaction", "button", "cancel"})
"""Rings that carry a cancel or a decision `relay`ed from the edge of any replica (the body of its event)."""


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    heartbeat_s: float = 1.0
    lease_s: float = 6.0
    """A replica silent for this long is dead: its calls are orphaned and its threads go elsewhere."""
    backstop_s: float = 2.0
    concurrency: int = 100
    """Thread turns one replica runs at once."""


class ClusterNode:
    """A replica, and the cluster's side of the coordination seam (bot/coordination.py).

    `open_cluster` opens the store, then this node's lease (the store's fence checks it); `join`
    makes it a full member once the engine and the edge are built; `wind_down` and `close` end it."""

    shared = True

    def __init__(
        self, *, dsn: str, store: PostgresStore, replica_id: str, settings: ClusterSettings = ClusterSettings()
    ) -> None:
        self.settings = settings
        self._store = store
        self.lost = asyncio.Event()
        """Set when this replica lost its lease: it must stop, its work is someone else's now."""
        self.replicas = Replicas(
            dsn=dsn,
            lost=self._on_lost,
            interval_s=settings.heartbeat_s,
            lease_s=settings.lease_s,
            replica_id=replica_id,
        )
        self.jobs = ThreadJobs(
            dsn=dsn, run=self._run_thread, worker_name=self.replicas.id, heartbeat_s=settings.heartbeat_s
        )
        self.ticks = Ticks(dsn=dsn, replica_id=self.replicas.id)
        """The heartbeat's and housekeeping's ticks: each runs on one replica only."""
        self.doorbell = Doorbell(
            dsn=dsn, handler=self._on_ring, backstop=self._backstop, backstop_s=settings.backstop_s
        )
        self._handled: OrderedDict[int, None] = OrderedDict()
        self._reaper: asyncio.Task[None] | None = None
        self._sending = TaskSet()
        self._worker_recorded = False
        self._replay_after = 0

    _crew: Crew
    """What this replica runs, from `join` on: the doorbell, the worker and the reaper start only then."""

    @property
    def id(self) -> str:
        return self.replicas.id

    @property
    def replica(self) -> str:
        return self.replicas.id

    async def open(self) -> None:
        """Take a lease and open the job queue; the worker starts later, with `join`."""
        await self.replicas.register()
        await self.doorbell.open()
        await self.jobs.open()

    async def recover(self, registry: CallRegistry, take_up_asked: Callable[[list[ToolCall]], None]) -> list[ToolCall]:
        """Nothing at start: every open call may be a live replica's; the reaper orphans a dead one's."""
        return []

    async def join(self, crew: Crew) -> None:
        """Start taking turns and listening; from here on this replica is a full member.

        Rings sent before it listened are not its business (the cancel of a turn that ended long ago
        must not stop a newer one): its backstop only ever replays rings newer than that."""
        self._crew = crew
        self._replay_after = await self._store.last_ring_id()
        await self.doorbell.start()
        await self.jobs.start(concurrency=self.settings.concurrency)
        self._reaper = asyncio.create_task(self._reap_forever(), name=f"reaper {self.id}")
        self.ticks.every("cluster-housekeeping", PRUNE_S, self._prune)

    async def wind_down(self, engine: Engine, registry: CallRegistry, grace_s: float) -> None:
        """A replica's exit: take no more turns, let running ones finish for a grace period, then offer
        the threads cut short to the other replicas (their input is still owed in the store).

        A replica that lost its lease has nothing left to hand over: another one is taking its threads
        (its writes are refused already), so it stops its turns and calls at once, finishing nothing."""
        worker = asyncio.create_task(self.stop_jobs())
        if self.lost.is_set():
            await engine.shutdown(grace_s=0)
            await registry.abandon()
            await worker
            return
        cut_short = await engine.shutdown(grace_s=grace_s)
        await registry.shutdown(grace_s=grace_s)
        await worker
        for key in cut_short:
            try:
                await self.offer(key)
            except Exception as exc:  # the others' backstop finds the owed input anyway
                log.warning("could not hand %s to another replica: %s", key, exc)

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

    # -- what the engine, the scheduler and the edge ask of the seam ------------------------

    def hand_off(self, session_key: str) -> bool:
        """`offer` in the background: the input is in the store already, the thread's job runs the turn."""
        self._spawn(self.offer(session_key), "offer")
        return True

    async def relay(self, kind: str, body: dict[str, Any]) -> bool:
        """Ring every replica (this one too); the one holding the work acts on it."""
        await self.ring(kind, "", body=body)
        return True

    def reminder_changed(self, reminder_id: int) -> None:
        self._spawn(self.ring("reminder", str(reminder_id)), "ring")

    async def offer(self, session_key: str) -> None:
        """The thread has input: its job is committed (or already queued) when this returns."""
        async with self._store.transaction() as conn:
            await self.offer_in(conn, session_key)

    async def offer_in(
        self, conn: psycopg.AsyncConnection[Any], session_key: str, ref: dict[str, str] | None = None
    ) -> None:
        """`offer` inside the caller's transaction: the job and the ring commit with the input they are for."""
        await self.jobs.offer(session_key, conn)
        await self._ring_in(conn, "input", session_key, ref or {})

    async def ring(self, kind: str, key: str, **extra: Any) -> None:
        """Tell every replica (this one too): the row first, then the NOTIFY, in one transaction."""
        async with self._store.transaction() as conn:
            await self._ring_in(conn, kind, key, extra)

    async def _ring_in(self, conn: psycopg.AsyncConnection[Any], kind: str, key: str, extra: dict[str, Any]) -> None:
        ring_id = await self._store.add_ring(conn, kind, key, extra)
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
        try:
            if ring.kind == "input":
                await self._take_inputs(ring)
            elif ring.kind == "reminder":
                await self._crew.scheduler.track(int(ring.key))
            elif ring.kind in RELAYED:
                await self._crew.edge.relayed(ring.kind, ring.extra["body"])
            else:
                log.warning("ignoring a ring of unknown kind %r", ring.kind)
        except Exception:
            log.exception("handling a %s ring for %s failed", ring.kind, ring.key)

    async def _take_inputs(self, ring: Ring) -> None:
        taken = await self._crew.engine.take_inputs(ring.key)
        if taken and ring.extra.get("channel") and ring.extra.get("ts"):
            await self._crew.edge.injected({"channel": str(ring.extra["channel"]), "ts": str(ring.extra["ts"])})

    async def _run_thread(self, session_key: str, traceparent: str | None = None) -> None:
        if not self._worker_recorded and (worker_id := self.jobs.worker_id) is not None:
            await self.replicas.record_worker(worker_id)  # before its first turn: whose jobs are whose
            self._worker_recorded = True
        with resumed(traceparent):  # the turn is a span of the event that queued the job
            await self._crew.engine.run_thread(session_key)

    async def _backstop(self) -> None:
        """What a lost NOTIFY would have said: recent rings not handled here, input nobody took up."""
        store = self._store
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
        store, crew = self._store, self._crew
        dead = await self.replicas.reap(self.settings.lease_s)
        if dead:
            log.warning("replicas %s stopped heartbeating; taking over their threads", ", ".join(dead))
        # Every dead replica's, not only those claimed just now: a reap that failed halfway is finished here.
        orphans = await store.orphan_dead_calls()
        if orphans:
            await crew.edge.repaint(orphans)
            self._sending.spawn(self._repaint_again(orphans), "cluster repaint of orphans")
        for key in sorted({call.session_key for call in orphans}):
            await self.jobs.offer(key)
        asked = await store.adopt_asked_calls_of_gone()
        if asked:
            log.info("waiting here for %d approvals that gone replicas had asked for", len(asked))
            crew.take_up_asked(asked)
        posts = await store.adopt_owed()
        if posts:
            log.info("delivering %d Slack posts and edits that gone replicas still owed", len(posts))
            crew.edge.take_over(posts)
        recovered = await self.jobs.recover_stalled()
        if recovered:
            log.warning("resuming %d threads whose turns stopped with their replica", len(recovered))
        crew.edge.share_budget(await self.replicas.live_count())

    async def _repaint_again(self, orphans: list[ToolCall]) -> None:
        """A replica declared dead may have been alive, and still editing its status messages, until its next
        heartbeat told it otherwise; one of those edits landing after the repaint would show a call running
        for ever. A lease later that is over (it stops sending once it knows), so the orphans are shown again."""
        await asyncio.sleep(self.settings.lease_s)
        await self._crew.edge.repaint(orphans)

    async def _prune(self, _tick: int) -> None:
        """Housekeeping, once a minute on one replica: old rings, and gone replicas that owe nothing."""
        await self._store.prune_rings(KEEP_RINGS_S)
        await self._store.prune_replicas(KEEP_REPLICAS_S)

    async def _on_lost(self) -> None:
        log.error("replica %s lost its lease (the database is unreachable, or others declared it dead)", self.id)
        self.lost.set()

    def _spawn(self, work: Coroutine[Any, Any, None], what: str) -> None:
        if self._sending.spawn(_or_backstop(work), f"cluster {what}") is None:
            work.close()  # closing: the backstop of whoever goes on finds it


async def _or_backstop(work: Coroutine[Any, Any, None]) -> None:
    """A ring or an offer that fails is no error: the backstop polls for what it would have said."""
    try:
        await work
    except Exception as exc:
        log.warning("could not reach the cluster (the backstop tries again): %s", exc)


async def open_cluster(settings: Settings, stack: contextlib.AsyncExitStack) -> tuple[PostgresStore, ClusterNode]:
    """The cluster's database, then this replica's lease on it: the store applies the migrations the lease
    table needs, and fences every write by the replica's id, which is why the id comes first."""
    dsn = settings.database_url
    assert dsn is not None
    replica_id = new_replica_id(socket.gethostname(), os.getpid())
    store = await PostgresStore.open(dsn, replica=replica_id)
    stack.push_async_callback(store.close)
    node = ClusterNode(dsn=dsn, store=store, replica_id=replica_id)
    await node.open()
    stack.push_async_callback(node.close)
    return store, node
