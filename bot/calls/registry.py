"""The process-wide tool-call registry: it runs calls, caps them, cancels them, and tells everyone.

One registry per process (a per-turn one would lose the concurrency cap and the
cancel table). Every change is written through to the store and published to
listeners; waiters are woken by per-call events, never by polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path

from bot.calls import process_groups
from bot.calls.slots import Slots
from bot.calls.writer import CallWriter
from bot.clock import utcnow
from bot.policy import Ruling, Verdict
from bot.quotas import QuotaExceeded
from bot.store import ProcessGroupRecord, Store
from bot.telemetry.agent import AgentTelemetry
from bot.text import clean_json, clean_text
from bot.toolcall import JSON, SHUTDOWN, CallStatus, Decision, ProgressKind, ToolCall
from bot.types import CallListener
from tools.base import Answer, Tool, ToolContext, ToolError, ToolKind

log = logging.getLogger(__name__)

PROGRESS_FLUSH_S = 0.5
KEEP_FINAL_IN_MEMORY = 5_000
Notice = Callable[[str, str], None]
"""`EngineOutput.notice`: a line for the people in a session."""
CANCEL_WAIT_S = 5.0
APPROVAL_TIMEOUT_S = 900.0
audit_log = logging.getLogger("bot.audit")


@dataclass(frozen=True, slots=True)
class Word:
    """What a person said to a call that waits for them: an approver's yes or no, or a question's answer."""

    by: str
    approve: bool = True
    answer: str | None = None


@dataclass(frozen=True, slots=True)
class CancelResult:
    tool_call_id: str
    cancelled: bool
    previous_status: CallStatus

    def to_json(self) -> dict[str, JSON]:
        return {"tool_call_id": self.tool_call_id, "cancelled": self.cancelled, "previous_status": self.previous_status}


class CallRegistry:
    """Every tool call of the process passes through here, so there is one place that caps how many run,
    one cancel table a person's stop can reach, and one stream of changes the edges and the store follow.

    Calls outlive the turn that started them (a background call reports when the session is idle),
    so they belong to the process, not to a turn."""

    def __init__(
        self,
        *,
        store: Store,
        work_dir: Path,
        max_concurrent: int,
        max_per_session: int,
        max_io: int,
        default_timeout_s: float,
        approval_timeout_s: float = APPROVAL_TIMEOUT_S,
        zone: tzinfo | None = None,
        max_per_user: int | None = None,
        notice: Notice | None = None,
        telemetry: AgentTelemetry | None = None,
    ) -> None:
        """`max_per_user` caps one person's running thread and process calls across their sessions;
        `notice` says a line in a session's thread (a quota a call hit)."""
        self._telemetry = telemetry or AgentTelemetry()
        self._store = store
        self._notice = notice
        self._zone = zone
        self._writer = CallWriter(store)
        self._work_dir = work_dir
        self._slots = Slots(
            max_concurrent=max_concurrent, max_per_session=max_per_session, max_io=max_io, max_per_user=max_per_user
        )
        self._told_waiting: set[str] = set()
        """Turns whose thread was told a call waits for its person's other calls (told once a turn)."""
        self._default_timeout_s = default_timeout_s
        self._approval_timeout_s = approval_timeout_s
        self._words: dict[str, asyncio.Future[Word]] = {}
        self._calls: OrderedDict[str, ToolCall] = OrderedDict()
        self._open_by_session: dict[str, set[str]] = {}
        self._done: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._listeners: list[CallListener] = []
        self._abandoning = False
        self._owner = process_groups.owner_token()
        self._grouped: set[str] = set()

    def subscribe(self, listener: CallListener) -> None:
        self._listeners.append(listener)

    async def recover(self) -> list[ToolCall]:
        """Mark every call a previous process left unfinished as `orphaned`; call once at start, in the only
        process on the database (bot/coordination.py: in a cluster the reaper orphans a dead replica's).

        Left-over process groups are ended too: the recorded pids are this host's."""
        orphans = await self._store.orphan_open_calls()
        if orphans:
            log.info("marked %d unfinished tool calls from a previous run as orphaned", len(orphans))
        # What their commands started may still run (a SIGKILL leaves no time to clean up): end it now.
        left = [record for record in await self._store.process_groups() if not process_groups.owner_alive(record)]
        await process_groups.kill_left_over(left)
        await self._store.forget_process_groups([record.call_id for record in left])
        return orphans

    # -- creating and running -------------------------------------------------------------

    async def submit(
        self,
        *,
        call_id: str,
        session_key: str,
        turn_id: str,
        tool_name: str,
        tool_input: dict[str, JSON],
        tool: Tool | None,
        error: str | None = None,
        parent_id: str | None = None,
        requester: str | None = None,
        ruling: Ruling | None = None,
    ) -> ToolCall:
        """Register a call and start it in the background; with `error` it is failed at once.

        `requester` is the person the call runs for: their calls share BOT_MAX_CONCURRENT_TOOLS_PER_USER.
        `ruling` is the tool policy's word on it: a denied call fails at once, and one that asks waits,
        as a call like any other, until an approver decides (`decide`) or `approval_timeout_s` passes.
        A question (`ask_user`) waits in the same way for its answer (`answer`), from the ruling's approvers."""
        call = ToolCall(call_id, session_key, turn_id, tool_name, tool_input, parent_id=parent_id, requester=requester)
        if ruling is None and call.is_question:  # no policy at hand: the person it asks for answers
            ruling = Ruling(Verdict.ALLOW, "built-in: allowed", (requester,) if requester else ())
        if ruling is not None and error is None and tool is not None:
            call.decided_by = ruling.rule
            if ruling.verdict is Verdict.DENY:
                call.decision = Decision.DENIED
                error = f"refused by the tool policy ({ruling.rule}); it did not run"
            elif ruling.verdict is Verdict.ASK or call.is_question:
                call.decision, call.approvers, call.decided_by = Decision.ASKED, list(ruling.approvers), None
        self._remember(call)
        if error is not None or tool is None:
            if call.decision is Decision.DENIED:
                _audit(call)
            call.transition(CallStatus.FAILED)
            call.error = error or f"unknown tool {tool_name!r}"
            await self._save_final(call)
            return call
        try:
            await self._writer.save(call)
        except Exception as exc:
            # Not recorded, so not run: the model gets an error result instead of a call that never ends.
            call.transition(CallStatus.FAILED)
            call.error = f"the call could not be recorded ({type(exc).__name__}); it did not run"
            self._finalised(call)
            return call
        self._start(call, tool)
        return call

    def _start(self, call: ToolCall, tool: Tool | Callable[[], Tool | None]) -> None:
        self._open_by_session.setdefault(call.session_key, set()).add(call.id)
        self._done[call.id] = asyncio.Event()
        if not call.awaiting_person:
            _audit(call)
        self._publish(call)
        self._tasks[call.id] = asyncio.create_task(self._run(call, tool), name=f"tool:{call.tool_name}:{call.id}")

    async def _run(self, call: ToolCall, tool_or_lookup: Tool | Callable[[], Tool | None]) -> None:
        word = await self._heard(call) if call.awaiting_person else None
        if call.is_final:  # denied, unanswered or timed out while it waited
            self._tasks.pop(call.id, None)
            return
        tool = tool_or_lookup if isinstance(tool_or_lookup, Tool) else tool_or_lookup()
        if tool is None:
            self._tasks.pop(call.id, None)
            await self._finish(
                call, CallStatus.FAILED, error=f"the tool {call.tool_name!r} is not offered now; it did not run"
            )
            return
        loop = asyncio.get_running_loop()
        ctx = ToolContext(
            call.id,
            call.session_key,
            self._work_dir,
            lambda kind, payload: self._progress(call, kind, payload),
            loop,
            zone=self._zone,
            track_process_group=lambda pgid: self._track_group(call, pgid),
            answer=Answer(word.answer, word.by) if word is not None and word.answer is not None else None,
        )
        timeout_s = tool.timeout_s or self._default_timeout_s
        try:
            slots = (
                self._slots.hold(
                    call.session_key,
                    tool.kind,
                    user=call.requester,
                    on_user_wait=lambda cap: self._waits(call, call.requester, cap),
                )
                if tool.uses_slot
                else contextlib.nullcontext()
            )
            async with slots:
                call.transition(CallStatus.RUNNING)
                call.add_progress(ProgressKind.STARTED, {"tool": call.tool_name})
                # Not awaited: the tool starts now, and its `running` row goes out with the next commit.
                self._writer.save_soon(call)
                self._publish(call)
                with self._telemetry.tool_call(call.tool_name, call.id, call.input) as run:
                    async with asyncio.timeout(timeout_s) as deadline:
                        result = await tool.invoke(call.input, ctx)
                    run.returned(result)
            await self._finish(call, CallStatus.COMPLETED, result=result)
        except asyncio.CancelledError:
            ctx.cancelled.set()
            if self._abandoning:
                call.error = "the process that ran this call exited before it finished"
            await self._finish(call, CallStatus.ORPHANED if self._abandoning else CallStatus.CANCELLED)
            raise
        except TimeoutError:
            if not deadline.expired():
                await self._finish(call, CallStatus.FAILED, error="TimeoutError raised by the tool")
                return
            ctx.cancelled.set()
            await self._finish(call, CallStatus.FAILED, error=f"timed out after {timeout_s:g}s", timed_out=True)
        except ToolError as exc:
            if isinstance(exc, QuotaExceeded):
                self._say(call.session_key, exc.line)
            await self._finish(call, CallStatus.FAILED, error=str(exc))
        except Exception as exc:
            log.exception("tool %s crashed (call %s)", call.tool_name, call.id)
            await self._finish(call, CallStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        finally:
            self._tasks.pop(call.id, None)

    def _waits(self, call: ToolCall, requester: str | None, cap: int) -> None:
        """A call held back by its person's cap: its progress says so, and the thread once a turn."""
        why = (
            f"{requester} has {cap} tool calls running, the most BOT_MAX_CONCURRENT_TOOLS_PER_USER allows; "
            "this one starts when one of them ends"
        )
        self._progress(call, ProgressKind.LOG, f"waiting: {why}")
        if call.turn_id not in self._told_waiting:
            self._told_waiting.add(call.turn_id)
            self._say(call.session_key, f"🚦 A tool call waits: {why}.")

    def _say(self, session_key: str, line: str) -> None:
        if self._notice is not None:
            self._notice(session_key, line)

    async def _track_group(self, call: ToolCall, pgid: int) -> None:
        record = ProcessGroupRecord(call.id, pgid, process_groups.identity(pgid), self._owner)
        self._grouped.add(call.id)
        try:
            await self._store.record_process_group(record)
        except Exception:
            # The command's lifeline still ends it with this process; only the clean-up at next start is lost.
            log.warning("could not record process group %d of call %s", pgid, call.id)

    async def _forget_group(self, call: ToolCall) -> None:
        if call.id not in self._grouped:
            return
        self._grouped.discard(call.id)
        try:
            await self._store.forget_process_groups([call.id])
        except Exception:
            log.warning("could not forget the process group of call %s", call.id)

    async def _finish(
        self,
        call: ToolCall,
        status: CallStatus,
        *,
        result: JSON = None,
        error: str | None = None,
        timed_out: bool = False,
    ) -> None:
        await self._forget_group(call)  # the tool ended its processes before it returned or raised
        if not call.transition(status):
            return
        call.result = _jsonable(result)
        call.error = clean_text(error) if error else call.error
        call.timed_out = timed_out
        if status is not CallStatus.CANCELLED:
            call.cancelled_by = None
        await self._save_final(call)

    async def _save_final(self, call: ToolCall) -> None:
        """Persist a final state; waiters and listeners are told even if the store fails.

        A failed save is logged by the writer; the row stays open and is orphaned at the
        next start, which is honest. A turn waiting forever on the call would not be.
        """
        try:
            await self._writer.save(call)
        except Exception:
            log.warning("tool call %s is final but its row could not be saved", call.id)
        finally:
            self._finalised(call)

    def _finalised(self, call: ToolCall) -> None:
        open_calls = self._open_by_session.get(call.session_key)
        if open_calls is not None:
            open_calls.discard(call.id)
            if not open_calls:
                del self._open_by_session[call.session_key]
                self._slots.forget(call.session_key)
                self._told_waiting.discard(call.turn_id)
        self._done.setdefault(call.id, asyncio.Event()).set()
        self._publish(call)
        self._evict_old_final_calls()

    # -- progress -------------------------------------------------------------------------

    def _progress(self, call: ToolCall, kind: str, payload: JSON) -> None:
        if call.is_final:
            return
        try:
            progress_kind = ProgressKind(kind)
        except ValueError:
            progress_kind = ProgressKind.LOG
        call.add_progress(progress_kind, _jsonable(payload))
        self._publish(call)
        # Progress can come many times a second; the store gets the latest state twice a second at most.
        self._writer.save_within(call, PROGRESS_FLUSH_S)

    # -- waiting for a person -------------------------------------------------------------

    def _patience_s(self, call: ToolCall) -> float:
        """How long a person has: a question's own `timeout_seconds`, else the approval timeout."""
        asked = call.input.get("timeout_seconds") if call.is_question else None
        return float(asked) if isinstance(asked, int | float) and asked > 0 else self._approval_timeout_s

    async def _heard(self, call: ToolCall) -> Word | None:
        """Wait for the person's word; None when the call ended instead (denied, timed out: it is final then).

        The deadline counts from the call's creation, so a restart does not give it a new one. Cancelled
        while it waits by a shutdown, it stays open and asked: the next start takes it up again."""
        heard = self._words.setdefault(call.id, asyncio.get_running_loop().create_future())
        patience_s = self._patience_s(call)
        left = patience_s - (utcnow() - call.created_at).total_seconds()
        try:
            async with asyncio.timeout(max(left, 0)):
                word = await asyncio.shield(heard)
        except TimeoutError:
            call.decision, call.decided_by = Decision.TIMED_OUT, None
            waited = f"{patience_s:g}s"
            error = (
                f"nobody answered the question within {waited}"
                if call.is_question
                else f"nobody approved this call within {waited}; it did not run"
            )
            await self._finish(call, CallStatus.FAILED, error=error, timed_out=call.is_question)
            return None
        except asyncio.CancelledError:
            if call.cancelled_by == SHUTDOWN or self._abandoning:
                self._leave_asked(call)
            else:
                await self._finish(call, CallStatus.CANCELLED)
            raise
        finally:
            self._words.pop(call.id, None)
        if call.is_question:
            call.decision, call.decided_by = Decision.ANSWERED, word.by
        else:
            call.decision, call.decided_by = (Decision.APPROVED if word.approve else Decision.DENIED), word.by
        _audit(call)
        if not word.approve:
            await self._finish(call, CallStatus.FAILED, error=f"denied by {word.by}; it did not run")
            return None
        self._publish(call)
        return word

    def _leave_asked(self, call: ToolCall) -> None:
        """A shutdown while a call waits for a person: nothing runs, so it stays asked for the next start."""
        call.cancelled_by = None
        open_calls = self._open_by_session.get(call.session_key, set())
        open_calls.discard(call.id)
        if not open_calls:
            self._open_by_session.pop(call.session_key, None)
        self._done.pop(call.id, None)

    def decide(self, call_id: str, *, approve: bool, by: str) -> bool:
        """An approver's answer to a call waiting here; False when no call of this process waits for one.

        It may come before the call's task has begun to wait (oneshot answers as the call is published)."""
        call = self._calls.get(call_id)
        return call is not None and call.awaiting_approval and self._hear(call_id, Word(by, approve=approve))

    def answer(self, call_id: str, text: str, *, by: str) -> bool:
        """A person's answer to a question waiting here; False when no question of this process waits for one.
        Who may answer is the edge's to check, against the call's `approvers`."""
        call = self._calls.get(call_id)
        return call is not None and call.awaiting_answer and self._hear(call_id, Word(by, answer=clean_text(text)))

    def _hear(self, call_id: str, word: Word) -> bool:
        heard = self._words.setdefault(call_id, asyncio.get_running_loop().create_future())
        if heard.done():
            return False
        heard.set_result(word)
        return True

    def take_up_asked(self, calls: Sequence[ToolCall], lookup: Callable[[str], Tool | None]) -> None:
        """Wait here for the approvals and answers a previous process (or a gone replica) left pending: their
        buttons still work, and their deadlines still count from when they were asked. The tool is looked up
        once the person has spoken, when an MCP server has had time to list it again."""
        for call in calls:
            self._remember(call)
            self._start(call, functools.partial(lookup, call.tool_name))

    # -- cancelling -----------------------------------------------------------------------

    async def cancel(
        self, call_id: str, *, session_key: str | None = None, by: str | None = None
    ) -> CancelResult | None:
        """Best-effort cancel; None when the call is unknown (or belongs to another session)."""
        call = await self.find(call_id, session_key=session_key)
        if call is None:
            return None
        previous = call.status
        task = self._tasks.get(call_id)
        if call.is_final or task is None:
            return CancelResult(call_id, False, previous)
        call.cancelled_by = by
        task.cancel()
        await asyncio.wait([task], timeout=CANCEL_WAIT_S)
        if not call.is_final and task.done() and not (by == SHUTDOWN and call.awaiting_person):
            # Cancelled before its first step: the task body never ran, so finish it here.
            self._tasks.pop(call_id, None)
            await self._finish(call, CallStatus.CANCELLED)
        return CancelResult(call_id, call.status is CallStatus.CANCELLED, previous)

    async def cancel_many(self, call_ids: Iterable[str], *, by: str | None = None) -> list[CancelResult]:
        results = await asyncio.gather(*(self.cancel(call_id, by=by) for call_id in call_ids))
        return [result for result in results if result is not None]

    async def cancel_session(self, session_key: str, *, by: str | None = None) -> list[CancelResult]:
        return await self.cancel_many(list(self._open_by_session.get(session_key, ())), by=by)

    async def shutdown(self, grace_s: float) -> None:
        """Give running calls `grace_s` to finish, then cancel what is left (arq-style). A call waiting for a
        person (an approval, an answer) is not waited for: it runs nothing, and it stays waiting for the next start."""
        tasks = [task for call_id, task in self._tasks.items() if not self._calls[call_id].awaiting_person]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        await self.cancel_many(list(self._tasks), by=SHUTDOWN)
        await self._writer.drain()

    async def abandon(self) -> None:
        """Stop every call because this process is exiting without finishing them (oneshot).

        They end `orphaned`, not `cancelled`: nobody asked for them to stop. A call that waits for a person
        stays waiting, as at a shutdown: a later run (oneshot --resume) takes it up again.
        """
        self._abandoning = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)
        await self._writer.drain()

    # -- looking up and waiting -----------------------------------------------------------

    async def find(self, call_id: str, *, session_key: str | None = None) -> ToolCall | None:
        """The call, from memory or the store; another session's call counts as not found."""
        call = self._calls.get(call_id) or await self._store.load_call(call_id)
        if call is None or (session_key is not None and call.session_key != session_key):
            return None
        return call

    def get(self, call_id: str) -> ToolCall | None:
        return self._calls.get(call_id)

    def open_calls(self, session_key: str) -> list[ToolCall]:
        # A call is final before its last save returns; it leaves the open set only after that.
        calls = (self._calls.get(call_id) for call_id in self._open_by_session.get(session_key, ()))
        return [call for call in calls if call is not None and not call.is_final]

    def done_event(self, call_id: str) -> asyncio.Event:
        """Set once the call is final; calls unknown to this process count as final."""
        event = self._done.get(call_id)
        if event is None:
            event = asyncio.Event()
            call = self._calls.get(call_id)
            if call is None or call.is_final:
                event.set()
        return event

    async def wait_final(self, call_id: str, timeout_s: float | None = None) -> bool:
        """Wait until the call is final; False on timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.done_event(call_id).wait()
        except TimeoutError:
            return False
        return True

    async def mark_delivered(self, calls: Iterable[ToolCall]) -> None:
        if ids := self.delivered(calls):
            await self._store.mark_delivered(ids)

    def delivered(self, calls: Iterable[ToolCall]) -> list[str]:
        """Mark these calls delivered in memory, for a write that records it in the store (the save of the
        messages carrying their results, `mark_delivered`); returns their ids."""
        ids = []
        for call in calls:
            call.delivered = True
            # `calls` may be copies loaded from the store; the live entity must not keep saying "owed".
            if (live := self._calls.get(call.id)) is not None:
                live.delivered = True
            ids.append(call.id)
        return ids

    def slots_full(self, session_key: str, kind: ToolKind) -> bool:
        """Whether a new call of this kind and session would wait for a slot (a `pending` call may just be
        about to start)."""
        return self._slots.full(session_key, kind)

    @property
    def running_count(self) -> int:
        return len(self._tasks)

    # -- internals ------------------------------------------------------------------------

    def _remember(self, call: ToolCall) -> None:
        self._calls[call.id] = call
        self._calls.move_to_end(call.id)

    def _evict_old_final_calls(self) -> None:
        while len(self._calls) > KEEP_FINAL_IN_MEMORY:
            oldest_id, oldest = next(iter(self._calls.items()))
            if not oldest.is_final:
                self._calls.move_to_end(oldest_id)
                return
            del self._calls[oldest_id]
            self._done.pop(oldest_id, None)

    def _publish(self, call: ToolCall) -> None:
        for listener in self._listeners:
            try:
                listener(call)
            except Exception:
                log.exception("call listener failed for %s", call.id)


def _audit(call: ToolCall) -> None:
    """Every decision on a call is also a log line; with BOT_LOG_FORMAT=json its fields are the line's own, for
    a log pipeline to keep beside the database's trail."""
    record = {"event": "tool_decision", **call.audit_view()}
    by = f" by {call.decided_by}" if call.decided_by else ""
    audit_log.info("%s %s call %s%s", call.decision.value, call.tool_name, call.id, by, extra={"fields": record})


def _jsonable(value: JSON) -> JSON:
    """Results and progress are stored as JSON; anything else is kept as its text.

    Strings are cleaned of lone surrogates (a file name with undecodable bytes, say): the
    result goes to the store and the model, and neither can encode them.
    """
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return clean_text(str(value))
    return clean_json(value)
