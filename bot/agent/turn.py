"""One turn: user content → model → tool batch → results → model, until the model is done.

The turn persists the conversation in (user, assistant) pairs, so the stored
history always ends with an assistant message and stays valid for the API even
if the process dies mid-turn. A turn cut short (cancel, error, iteration cap)
closes with a short assistant note saying so.

What a person said is not lost while it waits for its pair: it is in the inbox
(bot/store/inbox.py) from the moment it was acknowledged. The save that stores it
in the history marks its row stored, and the turn's last save marks the session's
rows answered and, in the same transaction, owes what the edge has yet to post of the
answer (`EngineOutput.owed_posts`), so an answered message is never unsaid. A turn
stopped by a shutdown is not an answer: it leaves its unanswered user message out of
the history and its rows owed, so the next start resumes it (`Engine.resume`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from bot.agent import protocol
from bot.agent.budget import TokenBudget
from bot.agent.compaction import Compactor
from bot.agent.context import SizeEstimate
from bot.agent.injections import Injections
from bot.agent.toolbox import Toolbox
from bot.agent.waiting import WaitEnd, wait_for_batch
from bot.calls.registry import CallRegistry
from bot.config import YieldStrategy
from bot.errors import ContextOverflow, ModelError
from bot.policy import Asker, Policy
from bot.store import Store
from bot.telemetry.agent import AgentTelemetry
from bot.toolcall import JSON, SHUTDOWN, CallStatus, ToolCall
from bot.types import Billing, EngineOutput, Message, ModelReply, ModelRequest, OwedPost, Provider, TurnOutcome
from tools.base import FILE_SINK

log = logging.getLogger(__name__)

MAX_CONTINUATIONS = 2
MALFORMED_CALL = "the tool call was malformed (missing id or arguments not a JSON object)"
INCOMPLETE_CALL = (
    "not run: the call's arguments were cut off before they were complete (the output limit was reached "
    "or the stream broke); call it again with complete arguments"
)
STOP_NOTICES = {
    "refusal": "The model declined to continue with this request.",
    "max_tokens": "The answer was cut off at the output limit.",
    "model_context_window_exceeded": "This conversation no longer fits the model's context, even compacted.",
}
CONTINUE_NOTE = "[your reply was cut off by the output limit; continue exactly where you stopped]"


@dataclass(frozen=True, slots=True)
class TurnSettings:
    max_iterations: int
    tool_result_max_chars: int
    yield_strategy: YieldStrategy
    yield_on_injection: bool


@dataclass(slots=True)
class TurnRequest:
    """What starts a turn, and how it should behave."""

    session_key: str
    content: list[dict[str, JSON]]
    injections: Injections
    inbox_ids: list[int] = field(default_factory=list)
    """The inbox rows whose text `content` carries."""
    resumed: bool = False
    """Started by `Engine.resume`: it answers inbox rows an earlier turn had stored."""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_by: str | None = None
    stop_at_first_wait: bool = False
    toolbox: Toolbox | None = None
    requester: str | None = None
    """Who asked (an edge's user id), for the usage books; None for wake-ups and background results, which
    are booked to the session's person."""


class AskerLookup(Protocol):
    async def __call__(self, session_key: str, requester: str | None) -> Asker:
        """Who the policy sees asking in a session's turn (an edge adds the channel and user groups)."""
        ...


async def _requester_only(session_key: str, requester: str | None) -> Asker:
    return Asker(requester)


class TurnRunner:
    """Runs one turn from its first request to its last save, and nothing else.

    The engine decides when a turn starts and what joins it; this decides what the turn says and
    stores, so the loop (requests, tool batches, injections, yields, repairs) reads in one place and
    the history it leaves is always one the API accepts."""

    def __init__(
        self,
        *,
        provider: Provider,
        registry: CallRegistry,
        store: Store,
        toolbox: Toolbox,
        output: EngineOutput,
        settings: TurnSettings,
        system_prompt: Callable[[str], str],
        compactor: Compactor,
        budget: TokenBudget | None = None,
        policy: Policy | None = None,
        askers: AskerLookup | None = None,
        telemetry: AgentTelemetry | None = None,
    ) -> None:
        """`budget` (daily token budgets) is asked before every model call; None: no budget."""
        self._telemetry = telemetry or AgentTelemetry()
        self._budget = budget
        self._provider = provider
        self._compactor = compactor
        self._registry = registry
        self._store = store
        self._toolbox = toolbox
        self._output = output
        self._settings = settings
        self._system_prompt = system_prompt
        self._policy = policy or Policy()
        self._askers = askers or _requester_only

    async def run(self, request: TurnRequest) -> TurnOutcome:
        with self._telemetry.turn(request.session_key):
            return await self._run(request)

    async def _run(self, request: TurnRequest) -> TurnOutcome:
        key = request.session_key
        outcome = TurnOutcome(session_key=key)
        conversation: _Conversation | None = None
        request.injections.new_turn()
        # Set in this turn's own context: the calls it starts inherit it, so their files reach this session's edge.
        FILE_SINK.set(functools.partial(self._output.file_shared, key))
        self._output.turn_started(key)
        try:
            turn_id = outcome.turn_id = f"{key}#{await self._store.next_turn(key)}"
            messages = await self._store.load_messages(key)
            conversation = _Conversation(key, turn_id, messages, persisted=len(messages))
            opening = await self._repair_blocks(messages) + await self._late_result_blocks(conversation, exclude=set())
            protocol.append_user(messages, opening + request.content)
            conversation.inbox_ids += request.inbox_ids
            conversation.owes = request.resumed or bool(request.inbox_ids)
            # A turn nobody typed (a wake-up, a late result) is for the person the session is for: it is
            # booked to them, counts against their budget, and its calls share their concurrency cap.
            billing = Billing(key, turn_id, request.requester or await self._person(key))
            conversation.asker = await self._askers(key, billing.requester)  # whom the tool policy sees asking
            await self._loop(request, billing, conversation, outcome)
        except ModelError as exc:
            outcome.error = str(exc)
            self._output.notice(key, f"⚠️ Model error: {exc}")
        except Exception as exc:
            # A bug or a store failure must cost this turn only: say so, keep the session usable.
            log.exception("turn in %s failed", key)
            outcome.error = f"internal error ({type(exc).__name__})"
            self._output.notice(key, "⚠️ Something went wrong on our side; the turn stopped. Please try again.")
        finally:
            if request.cancelled.is_set():
                outcome.cancelled_by = request.cancelled_by or "user"
            if conversation is not None:
                await self._close(conversation, outcome)
            log.info("turn in %s ended after %d model call(s): %s", key, outcome.iterations, outcome.usage.describe())
            self._output.turn_finished(outcome)
        return outcome

    async def _loop(
        self, request: TurnRequest, billing: Billing, conversation: _Conversation, outcome: TurnOutcome
    ) -> None:
        key = request.session_key
        messages = conversation.messages
        continuations = 0
        cut_off = False  # the previous reply hit the output limit and this one continues it
        for outcome.iterations in range(1, self._settings.max_iterations + 1):
            if notes := request.injections.drain():
                protocol.append_user(messages, protocol.injection_blocks([note.content for note in notes]))
                owed = [note.inbox_id for note in notes if note.inbox_id is not None]
                conversation.inbox_ids += owed
                conversation.owes = conversation.owes or bool(owed)
            if messages[-1]["role"] == "user" and not messages[-1]["content"]:
                messages.pop()  # a wake-up whose news was already taken: nothing to say
                return
            reply = await self._ask_fitting(request, billing, conversation, outcome)
            if reply is None:
                return
            # Fixed before the reply is stored: a history with a malformed tool_use is rejected by the API.
            malformed = set(protocol.normalise_tool_uses(reply.content))
            if messages[-1]["role"] == "assistant":  # the continuation of a paused reply
                messages[-1]["content"] = [*messages[-1]["content"], *reply.content]
            else:
                messages.append({"role": "assistant", "content": reply.content})
            continues = reply.stop_reason == "max_tokens" and continuations < MAX_CONTINUATIONS and not reply.tool_uses
            # A paused reply is stored once it is whole; the reply that ends the turn is stored by `_close`, in the
            # commit that closes the turn (nothing awaits between this test and the `return` below that ends it).
            last = not (reply.tool_uses or continues or reply.stop_reason == "pause_turn" or request.injections.ready)
            if reply.stop_reason != "pause_turn" and not last:
                await self._save(conversation)
            outcome.text = outcome.text + reply.text if cut_off else reply.text or outcome.text
            outcome.stop_reason = reply.stop_reason
            cut_off = reply.stop_reason == "pause_turn"  # the next reply goes on from this one
            if continues:
                continuations += 1
                cut_off = True
                protocol.append_user(messages, [protocol.text_block(CONTINUE_NOTE)])
            elif reply.tool_uses:
                if not await self._run_batch(request, billing, reply, malformed, conversation, outcome):
                    return
            elif reply.stop_reason == "pause_turn":
                continue  # the API continues a paused reply when it is sent back as it is
            elif not request.injections.ready:
                if notice := STOP_NOTICES.get(reply.stop_reason):
                    self._output.notice(key, notice)
                return
        self._output.notice(key, f"Stopped after {self._settings.max_iterations} steps without finishing.")
        outcome.error = "iteration limit reached"

    async def _ask_fitting(
        self, request: TurnRequest, billing: Billing, conversation: _Conversation, outcome: TurnOutcome
    ) -> ModelReply | None:
        """Fit the history to the context window and ask; when the API still finds it too long, compact
        whatever the estimate says and ask once more (a second refusal is the turn's error). None, with a
        line for the thread, when a daily token budget is spent: no model call, compaction's included."""
        if self._budget is not None and (refusal := await self._budget.refusal(billing.session_key, billing.requester)):
            self._output.notice(billing.session_key, refusal)
            outcome.error = "the daily token budget is spent"
            return None
        # The prompt and the tools are made once for the request, the fit and a retry after an overflow alike.
        model_request = ModelRequest(
            system=self._system_prompt(request.session_key),
            messages=conversation.messages,
            tools=self._offered(request.toolbox or self._toolbox, conversation),
            billing=billing,
        )
        chars = await self._fit(model_request, billing, conversation, force=False)
        try:
            reply = await self._ask_model(request, model_request, chars, conversation, outcome)
        except ContextOverflow:
            log.info("the model refused %s as too long; compacting and asking again", request.session_key)
        else:
            if reply is None or reply.stop_reason != "model_context_window_exceeded":
                return reply
        chars = await self._fit(model_request, billing, conversation, force=True)
        return await self._ask_model(request, model_request, chars, conversation, outcome)

    def _offered(self, toolbox: Toolbox, conversation: _Conversation) -> list[dict[str, JSON]]:
        """The tools this turn's asker may have run: what the policy denies outright is not offered."""
        hidden = self._policy.hidden(toolbox.names, conversation.asker)
        return [spec for spec in toolbox.specs() if spec["name"] not in hidden]

    async def _fit(
        self, model_request: ModelRequest, billing: Billing, conversation: _Conversation, *, force: bool
    ) -> int:
        """Compact the history if the request would not fit; returns the request's size as it will be sent."""
        fitted = await self._compactor.fit(
            conversation.messages,
            persisted=conversation.persisted,
            system=model_request.system,
            tools=model_request.tools,
            billing=billing,
            estimate=conversation.estimate,
            force=force,
        )
        if (compacted := fitted.compacted) is not None:
            await self._store.replace_messages(conversation.key, compacted.messages[: compacted.persisted])
            conversation.persisted = compacted.persisted
        return fitted.chars

    async def _ask_model(
        self,
        request: TurnRequest,
        model_request: ModelRequest,
        chars: int,
        conversation: _Conversation,
        outcome: TurnOutcome,
    ) -> ModelReply | None:
        """One streamed model call of `chars` (`request_chars`); None when the turn is cancelled while it streams."""
        key = request.session_key
        self._output.model_call_started(key)
        ask = asyncio.ensure_future(
            self._provider.complete(model_request, on_text=lambda delta: self._output.text_delta(key, delta))
        )
        stop = asyncio.ensure_future(request.cancelled.wait())
        try:
            await asyncio.wait([ask, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not ask.done():
                ask.cancel()
        if request.cancelled.is_set() and not ask.done():
            return None
        if ask.cancelled():
            return None
        reply = ask.result()
        outcome.usage += reply.usage
        conversation.estimate.learn(chars, reply.usage.prompt_tokens)
        self._output.text_done(key)
        if not reply.content:
            reply = ModelReply([protocol.text_block("(no reply)")], reply.stop_reason)
        return reply

    async def _run_batch(
        self,
        request: TurnRequest,
        billing: Billing,
        reply: ModelReply,
        malformed: set[str],
        conversation: _Conversation,
        outcome: TurnOutcome,
    ) -> bool:
        """Start the batch, wait under the yield strategy, add results; False when the turn must end."""
        key = request.session_key
        toolbox = request.toolbox or self._toolbox
        # Submitted together, so the batch's pending rows share one commit.
        calls = list(
            await asyncio.gather(
                *(
                    self._registry.submit(
                        call_id=block["id"],
                        session_key=key,
                        turn_id=conversation.turn_id,
                        tool_name=block["name"],
                        tool_input=block["input"],
                        tool=(tool := toolbox.get(block["name"])),
                        requester=conversation.asker.user,
                        ruling=self._policy.rule_for(tool, block["name"], block["input"], conversation.asker),
                        error=MALFORMED_CALL
                        if block["id"] in malformed
                        # A cut-off call's input is only what arrived: it looks valid and means something else.
                        else INCOMPLETE_CALL
                        if block["id"] in reply.incomplete_tool_ids
                        else toolbox.problem(block["name"], block["input"]),
                    )
                    for block in reply.tool_uses
                )
            )
        )
        self._output.calls_started(key, calls)
        end = await self._wait(request, calls, toolbox)
        if end is WaitEnd.CANCELLED:
            await self._registry.cancel_many([c.id for c in calls], by=request.cancelled_by)
        results = [protocol.tool_result_block(call, self._settings.tool_result_max_chars) for call in calls]
        # Delivered with the save that stores their results, in its commit (`_save`).
        conversation.late.update((call.id, call) for call in calls if call.is_final)
        late = await self._late_result_blocks(conversation, exclude={call.id for call in calls})
        protocol.append_user(conversation.messages, results + late)
        if request.stop_at_first_wait and any(not call.is_final for call in calls):
            outcome.pending_call_ids = [call.id for call in calls if not call.is_final]
            return False
        return end is not WaitEnd.CANCELLED

    async def _wait(self, request: TurnRequest, calls: list[ToolCall], toolbox: Toolbox) -> WaitEnd:
        if request.stop_at_first_wait:
            end = WaitEnd.ALL_DONE
        else:
            # A question waits for a person, who may take hours: the turn goes on, and the answer comes late.
            end = await wait_for_batch(
                [call for call in calls if not call.awaiting_answer],
                registry=self._registry,
                strategy=self._settings.yield_strategy,
                injections=request.injections,
                yield_on_injection=self._settings.yield_on_injection,
                cancelled=request.cancelled,
            )
        if end is not WaitEnd.CANCELLED:
            # Quick tools finish at once: a yield should not hand the model a placeholder for `now`.
            quick = [call for call in calls if (tool := toolbox.get(call.tool_name)) is not None and tool.quick]
            await asyncio.gather(*(self._registry.wait_final(call.id) for call in quick))
        return end

    async def _person(self, session_key: str) -> str | None:
        session = await self._store.get_session(session_key)
        return session.person if session is not None else None

    async def _late_result_blocks(self, conversation: _Conversation, *, exclude: set[str]) -> list[dict[str, JSON]]:
        """Notes for background calls that finished after their turn yielded; each is delivered once.

        A call counts as delivered once the note is stored (`_save`): a process that dies first hands it
        to the model again after the restart, rather than never.
        """
        taken = exclude | set(conversation.late)
        late = [call for call in await self._store.undelivered_calls(conversation.key) if call.id not in taken]
        if not late:
            return []
        conversation.late.update((call.id, call) for call in late)
        limit = self._settings.tool_result_max_chars
        return [block for call in late for block in protocol.late_result_blocks(call, limit)]

    async def _repair_blocks(self, messages: list[Message]) -> list[dict[str, JSON]]:
        """Results for tool_use blocks a crashed process never answered."""
        blocks = []
        for call_id in protocol.unanswered_tool_uses(messages):
            call = await self._registry.find(call_id)
            if call is None:
                call = ToolCall(call_id, "", "", "unknown", {}, status=CallStatus.ORPHANED)
            blocks.append(protocol.tool_result_block(call, self._settings.tool_result_max_chars))
            if call.is_final:
                await self._registry.mark_delivered([call])
        return blocks

    async def _close(self, conversation: _Conversation, outcome: TurnOutcome) -> None:
        """Persist what is left, ending with an assistant message so the history stays valid.

        After a shutdown a turn that owes inbox rows their answer drops the trailing user message instead:
        its text stays owed in the inbox, and its tool results are rebuilt from the registry when the next
        start resumes the turn. (An edge without an inbox, the console, keeps the old close.)
        """
        messages = conversation.messages
        still_owed = conversation.owes and outcome.cancelled_by == SHUTDOWN
        if still_owed and messages and messages[-1]["role"] == "user" and len(messages) > conversation.persisted:
            messages.pop()
            conversation.inbox_ids.clear()
            conversation.late.clear()
        elif messages and messages[-1]["role"] == "user":
            if outcome.cancelled_by:
                note = f"(turn cancelled by {outcome.cancelled_by})"
            elif outcome.pending_call_ids:
                note = "(turn paused while tool calls run in the background)"
            else:
                note = f"(turn ended early: {outcome.error or 'interrupted'})"
            messages.append({"role": "assistant", "content": [protocol.text_block(note)]})
        owed = self._output.owed_posts(outcome)
        try:
            outcome.owed_posts = await self._save(
                conversation, answered=conversation.owes and not still_owed, owed=owed
            )
        except Exception:
            log.exception("could not persist the end of a turn in %s", conversation.key)
            outcome.owed_posts = await self._owe_alone(conversation.key, owed)

    async def _owe_alone(self, key: str, owed: list[OwedPost]) -> list[int]:
        """The edge handed these over: a save that failed leaves the message unanswered, but not them unsaid."""
        if not owed:
            return []
        try:
            return await self._store.append_messages(key, [], owed=owed)
        except Exception:
            log.exception("could not owe the last %d post(s) of a turn in %s", len(owed), key)
            return []

    async def _save(
        self, conversation: _Conversation, *, answered: bool = False, owed: list[OwedPost] | None = None
    ) -> list[int]:
        """Store what is new, the results it carries delivered with it; `owed`: the edge's posts, owed in the same
        transaction (their ids are returned)."""
        ids = await conversation.save(self._store, answered=answered, owed=owed or [])
        if conversation.late:
            self._registry.delivered(conversation.late.values())
            conversation.late.clear()
        return ids


@dataclass(slots=True)
class _Conversation:
    """The session's messages during a turn, how many of them the store already has, and the inbox
    rows whose text is in the messages not stored yet."""

    key: str
    turn_id: str
    messages: list[Message]
    persisted: int
    inbox_ids: list[int] = field(default_factory=list)
    late: dict[str, ToolCall] = field(default_factory=dict)
    """Calls whose results (a batch's, or background results' notes) are in the messages not stored yet: delivered
    by the save that stores them."""
    owes: bool = False
    """The turn answers inbox rows: a shutdown leaves them owed for the next start."""
    estimate: SizeEstimate = field(default_factory=SizeEstimate)
    asker: Asker = field(default_factory=lambda: Asker(None))
    """Whom the tool policy sees asking in this turn."""

    async def save(self, store: Store, *, answered: bool = False, owed: list[OwedPost]) -> list[int]:
        if len(self.messages) <= self.persisted and not answered and not owed:
            return []
        ids = await store.append_messages(
            self.key,
            self.messages[self.persisted :],
            inbox_ids=self.inbox_ids,
            turn_id=self.turn_id,
            answered=answered,
            owed=owed,
            delivered=list(self.late),
        )
        self.persisted = len(self.messages)
        self.inbox_ids = []
        return ids
