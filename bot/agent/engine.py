"""Sessions and their turns: one turn at a time per session, everything else is an injection.

This is the engine's front door for every edge and for the scheduler: a message
starts a turn or joins the running one, a cancel stops it, a wake-up comes back
as a new turn or a note, and a background call that finishes while the session
is idle starts a turn of its own so the agent can react.

What an edge acknowledged comes with the id of its inbox row, and travels with
the text (into the turn's content or the injection queue) until a save stores
it. At start, `resume` picks up every session a dead process left owing an answer.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from enum import StrEnum

from bot.agent import protocol
from bot.agent.injections import Injections
from bot.agent.toolbox import Toolbox
from bot.agent.turn import TurnRequest, TurnRunner
from bot.calls.registry import CallRegistry, CancelResult
from bot.concurrency import TaskSet
from bot.coordination import Coordination
from bot.store import InboxItem, Store
from bot.toolcall import JSON, SHUTDOWN, ToolCall
from bot.types import EngineOutput, SessionFilter, TurnOutcome

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 5.0
RESTART_NOTICE = "↻ I was restarted in the middle of this; picking up where I left off."
MAX_RESUMES = 3
GIVE_UP_NOTICE = (
    f"⚠️ I was restarted {MAX_RESUMES} times while working on this and could not finish it. Please ask again."
)


class Delivery(StrEnum):
    STARTED = "started"
    INJECTED = "injected"
    QUEUED = "queued"
    """Offered to the cluster: the session's job starts the turn, here or on another replica."""
    REFUSED = "refused"


MAX_TURNS_PER_JOB = 20
"""A bound on one job's loop: a turn that keeps leaving work owed must not pin its replica forever."""


@dataclass(slots=True)
class _Session:
    injections: Injections
    task: asyncio.Task[TurnOutcome] | None = None
    request: TurnRequest | None = None
    taken: set[int] = field(default_factory=set)
    """Inbox rows already handed to this session's turns here (a cluster's doorbell may ring twice)."""


class Engine:
    """The one place that decides what a text for a session becomes: a new turn, a note for the running
    turn, or work offered to the cluster.

    Edges and the scheduler never start turns themselves, so however many paths reach a session (a
    message, a wake-up, a background call that finished) it never runs two turns at once."""

    def __init__(
        self,
        *,
        runner: TurnRunner,
        registry: CallRegistry,
        store: Store,
        output: EngineOutput,
        max_injections_per_turn: int,
        coordination: Coordination,
    ) -> None:
        """`coordination` decides where a session's next turn runs when none runs here (see `hand_off`)."""
        self._runner = runner
        self._coordination = coordination
        self._output = output
        self._registry = registry
        self._store = store
        self._max_injections = max_injections_per_turn
        self._sessions: dict[str, _Session] = {}
        self._accepting = True
        self._checks = TaskSet()
        registry.subscribe(self._on_call_changed)

    # -- what edges and the scheduler call ------------------------------------------------

    def is_busy(self, session_key: str) -> bool:
        session = self._sessions.get(session_key)
        return session is not None and session.task is not None and not session.task.done()

    def submit(
        self,
        session_key: str,
        content: str | list[dict[str, JSON]],
        *,
        stop_at_first_wait: bool = False,
        toolbox: Toolbox | None = None,
        inbox_id: int | None = None,
        requester: str | None = None,
    ) -> Delivery:
        """Start a turn with `content`, or inject it into the turn already running.

        `inbox_id` names the inbox row that holds `content` (what an edge acknowledged); a refused
        one stays owed there, and the next start resumes it. `requester` (who wrote it) is what the
        turn's model calls are booked to.
        """
        if not self._accepting:
            return Delivery.REFUSED
        if self.is_busy(session_key):
            self._inject(session_key, content, inbox_id)
            return Delivery.INJECTED
        if inbox_id is not None and self._coordination.hand_off(session_key):
            return Delivery.QUEUED
        blocks = [protocol.text_block(content)] if isinstance(content, str) else content
        inbox_ids = [inbox_id] if inbox_id is not None else []
        self._start(
            session_key,
            blocks,
            stop_at_first_wait=stop_at_first_wait,
            toolbox=toolbox,
            inbox_ids=inbox_ids,
            requester=requester,
        )
        return Delivery.STARTED

    async def run_thread(self, session_key: str) -> None:
        """A cluster's per-thread job: what the store owes the session becomes turns here, one at a time,
        until nothing is owed (or the process stops taking work). Its job's lock keeps every other
        replica from running a turn of this session meanwhile."""
        for _ in range(MAX_TURNS_PER_JOB):
            if not self._accepting or self.is_busy(session_key):
                break
            # Notes a turn left in memory (after its last drain, or held back by its fuse) are rows still
            # owed in the store: the next turn reads them from there, so they must not linger here too.
            self._sessions.pop(session_key, None)
            if not await self._start_owed(session_key, results_too=True):
                break
            await self.wait_turn(session_key)
        if not self.is_busy(session_key):
            self._sessions.pop(session_key, None)

    async def take_inputs(self, session_key: str) -> list[int]:
        """A cluster's doorbell rang for the session: if its turn runs here, owed input joins it as
        injections; the inbox ids taken (none when no turn runs here)."""
        if not self.is_busy(session_key):
            return []
        taken = []
        for item in await self._store.session_inbox(session_key):
            if item.pending and self.is_busy(session_key) and self._inject(session_key, item.content, item.id):
                taken.append(item.id)
        return taken

    async def resume(self, owns: SessionFilter | None = None) -> list[str]:
        """At start: every session a stopped process left owing an answer gets its turn again (see
        `_start_owed`); their keys. `owns` keeps an edge to its own sessions."""
        resumed: list[str] = []
        for key, items in (await self._store.open_inbox()).items():
            if (owns is not None and not owns(key)) or self.is_busy(key):
                continue
            if await self._start_owed(key, items, restarted=True):
                resumed.append(key)
        if resumed:
            log.info("resumed %d sessions a previous process left unanswered", len(resumed))
        return resumed

    async def run_turn(
        self, session_key: str, content: str | list[dict[str, JSON]], *, stop_at_first_wait: bool = False
    ) -> TurnOutcome | None:
        """Submit and wait for that turn's outcome; None if the text was injected into a running turn."""
        if self.submit(session_key, content, stop_at_first_wait=stop_at_first_wait) is not Delivery.STARTED:
            return None
        task = self._sessions[session_key].task
        assert task is not None
        return await task

    async def cancel_turn(self, session_key: str, *, by: str) -> list[CancelResult]:
        """Stop the running turn and every call of the session."""
        session = self._sessions.get(session_key)
        if session is not None and session.request is not None and self.is_busy(session_key):
            session.request.cancelled_by = by
            session.request.cancelled.set()
        return await self._registry.cancel_session(session_key, by=by)

    async def cancel_calls(self, session_key: str, *, by: str) -> list[CancelResult]:
        """Stop the session's calls but let the turn go on; the model is told they were cancelled."""
        return await self._registry.cancel_session(session_key, by=by)

    async def wait_turn(self, session_key: str) -> None:
        """Wait until the session's running turn (if any) has ended."""
        session = self._sessions.get(session_key)
        while session is not None and session.task is not None and not session.task.done():
            await asyncio.wait([session.task])

    async def settle(self, session_key: str) -> None:
        """Wait until the session has no turn, no open call and no undelivered result (oneshot, piped console)."""
        while True:
            session = self._sessions.get(session_key)
            if session is not None and session.task is not None and not session.task.done():
                await asyncio.wait([session.task])
                continue
            open_calls = self._registry.open_calls(session_key)
            if open_calls:
                await asyncio.gather(*(self._registry.wait_final(call.id) for call in open_calls))
                continue
            news = await self._store.undelivered_calls(session_key)
            if news and self._accepting and not self.is_busy(session_key):
                self._start(session_key, [])
                continue
            if not self.is_busy(session_key):
                return

    async def shutdown(self, grace_s: float) -> list[str]:
        """Stop taking work, let running turns finish for `grace_s`, cancel them, and at last stop them.

        Returns the sessions whose turns were cut short (their input stays owed, for whoever goes on)."""
        self._accepting = False
        await self._checks.close()
        tasks = [s.task for s in self._sessions.values() if s.task is not None and not s.task.done()]
        if not tasks:
            return []
        _, still_running = await asyncio.wait(tasks, timeout=grace_s)
        cut_short = [key for key, session in self._sessions.items() if session.task in still_running]
        for key in cut_short:
            await self.cancel_turn(key, by=SHUTDOWN)
        _, stuck = await asyncio.wait(tasks, timeout=grace_s)
        for task in stuck:
            task.cancel()
        if stuck:
            # Bounded but not zero: a cancelled turn still closes its history before the store goes.
            await asyncio.wait(stuck, timeout=CANCEL_WAIT_S)
        return cut_short

    # -- internals ------------------------------------------------------------------------

    async def _start_owed(
        self, key: str, items: list[InboxItem] | None = None, *, restarted: bool = False, results_too: bool = False
    ) -> bool:
        """Start a turn from what the store owes the session (`items`: its open inbox rows, when the caller
        read them already); False when it owes nothing. With `results_too` (a thread's job) a result that
        outlived its turn is owed too: no turn of this process saw it finish.

        Rows an earlier turn stored but never answered mean that turn died (`restarted`, or in a
        cluster: its replica did, since no other job of the session can be running now). The turn
        goes on from the stored history: tool calls it had started are answered from the registry
        (orphaned, or their result if they finished), and what was never stored is handed to the
        model again. A session whose answer was stored, and only its bookkeeping was cut off, is just
        marked answered.
        """
        if items is None:
            items = await self._store.session_inbox(key)
        pending = [item for item in items if item.pending]
        interrupted = len(pending) < len(items) and bool(
            protocol.unanswered_tool_uses(await self._store.load_messages(key))
        )
        if items and not pending and not interrupted:
            await self._store.answer_inbox(key)
            items = []
        if not items:
            if not results_too or not await self._store.undelivered_calls(key):
                return False
            self._start(key, [])  # a result that outlived its turn: its own turn
            return True
        if restarted or interrupted:
            if max(item.resumes for item in items) >= MAX_RESUMES:
                # Perhaps this very turn is what kills the process: a crash loop must end somewhere.
                log.error("session %s was resumed %d times without an answer; giving up", key, MAX_RESUMES)
                await self._store.give_up_inbox(key)
                self._output.notice(key, GIVE_UP_NOTICE)
                return False
            await self._store.count_resume(key)
            self._output.notice(key, RESTART_NOTICE)
        self._session(key).taken.update(item.id for item in pending)
        blocks = [block for item in pending for block in item.content]
        requester = pending[0].requester if pending else None
        self._start(
            key,
            blocks,
            inbox_ids=[item.id for item in pending],
            resumed=restarted or interrupted,
            requester=requester,
        )
        return True

    def _inject(self, session_key: str, content: str | list[dict[str, JSON]], inbox_id: int | None) -> bool:
        """Queue a note for the running turn; False when its inbox row is in this session's turns already."""
        session = self._session(session_key)
        if inbox_id is not None:
            if inbox_id in session.taken:
                return False
            session.taken.add(inbox_id)
        session.injections.put(content, inbox_id)
        return True

    def _session(self, session_key: str) -> _Session:
        session = self._sessions.get(session_key)
        if session is None:
            session = self._sessions[session_key] = _Session(Injections(self._max_injections))
        return session

    def _start(
        self,
        session_key: str,
        blocks: list[dict[str, JSON]],
        *,
        stop_at_first_wait: bool = False,
        toolbox: Toolbox | None = None,
        inbox_ids: list[int] | None = None,
        resumed: bool = False,
        requester: str | None = None,
    ) -> None:
        session = self._session(session_key)
        request = TurnRequest(
            session_key,
            blocks,
            session.injections,
            inbox_ids=inbox_ids or [],
            resumed=resumed,
            stop_at_first_wait=stop_at_first_wait,
            toolbox=toolbox,
            requester=requester,
        )
        session.request = request
        session.task = asyncio.create_task(self._runner.run(request), name=f"turn:{session_key}")
        session.task.add_done_callback(lambda task: self._turn_done(session_key, task))

    def _turn_done(self, session_key: str, task: asyncio.Task[TurnOutcome]) -> None:
        if task.cancelled() or task.exception() is not None:
            return  # cancelled at shutdown; the runner reports every other failure itself
        if not task.result().pending_call_ids:
            self._check_soon(session_key)

    def _on_call_changed(self, call: ToolCall) -> None:
        if call.is_final and not call.delivered and not self.is_busy(call.session_key):
            self._check_soon(call.session_key)

    def _check_soon(self, session_key: str) -> None:
        self._checks.spawn(self._deliver_if_idle(session_key), f"delivery check:{session_key}")

    async def _deliver_if_idle(self, session_key: str) -> None:
        """A result that outlived its turn, or a note left after the fuse, starts a turn of its own."""
        if not self._accepting or self.is_busy(session_key):
            return
        session = self._session(session_key)
        # `waiting`, not `ready`: notes held back by the last turn's fuse are news for a new turn.
        has_news = session.injections.waiting or bool(await self._store.undelivered_calls(session_key))
        # Checked again after the await: a shutdown may have begun, and its list of turns is already taken.
        if has_news and self._accepting and not self.is_busy(session_key):
            if self._coordination.hand_off(session_key):
                self._sessions.pop(session_key, None)  # what it held is owed in the store; the job reads it there
            else:
                self._start(session_key, [])
        elif not has_news and not self.is_busy(session_key):
            # Idle with nothing pending: forget it, so a long-running daemon keeps no per-thread state.
            self._sessions.pop(session_key, None)
