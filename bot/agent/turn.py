"""One turn: user content → model → tool batch → results → model, until the model is done.

The turn persists the conversation in (user, assistant) pairs, so the stored
history always ends with an assistant message and stays valid for the API even
if the process dies mid-turn. A turn cut short (cancel, error, iteration cap)
closes with a short assistant note saying so.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.agent import protocol
from bot.agent.injections import Injections
from bot.agent.toolbox import Toolbox
from bot.agent.waiting import WaitEnd, wait_for_batch
from bot.calls.models import JSON, CallStatus, ToolCall
from bot.calls.registry import CallRegistry
from bot.config import YieldStrategy
from bot.errors import ModelError
from bot.store import Store
from bot.types import EngineOutput, Message, ModelReply, ModelRequest, Provider, TurnOutcome
from tools.base import FILE_SINK

log = logging.getLogger(__name__)

MAX_CONTINUATIONS = 2
MALFORMED_CALL = "the tool call was malformed (missing id or arguments not a JSON object)"
STOP_NOTICES = {
    "refusal": "The model declined to continue with this request.",
    "max_tokens": "The answer was cut off at the output limit.",
    "model_context_window_exceeded": "This conversation no longer fits the model's context; please start a new thread.",
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
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_by: str | None = None
    stop_at_first_wait: bool = False
    toolbox: Toolbox | None = None


class TurnRunner:
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
    ) -> None:
        self._provider = provider
        self._registry = registry
        self._store = store
        self._toolbox = toolbox
        self._output = output
        self._settings = settings
        self._system_prompt = system_prompt

    async def run(self, request: TurnRequest) -> TurnOutcome:
        key = request.session_key
        outcome = TurnOutcome(session_key=key)
        conversation: _Conversation | None = None
        request.injections.new_turn()
        # Set in this turn's own context: the calls it starts inherit it, so their files reach this session's edge.
        FILE_SINK.set(functools.partial(self._output.file_shared, key))
        self._output.turn_started(key)
        try:
            await self._store.ensure_session(key)
            turn_id = f"{key}#{await self._store.next_turn(key)}"
            messages = await self._store.load_messages(key)
            conversation = _Conversation(key, messages, persisted=len(messages))
            opening = await self._repair_blocks(messages) + await self._late_result_blocks(key, exclude=set())
            protocol.append_user(messages, opening + request.content)
            await self._loop(request, turn_id, conversation, outcome)
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
            self._output.turn_finished(outcome)
        return outcome

    async def _loop(
        self, request: TurnRequest, turn_id: str, conversation: _Conversation, outcome: TurnOutcome
    ) -> None:
        key = request.session_key
        messages = conversation.messages
        continuations = 0
        cut_off = False  # the previous reply hit the output limit and this one continues it
        for outcome.iterations in range(1, self._settings.max_iterations + 1):
            if notes := request.injections.drain():
                protocol.append_user(messages, protocol.injection_blocks(notes))
            if messages[-1]["role"] == "user" and not messages[-1]["content"]:
                messages.pop()  # a wake-up whose news was already taken: nothing to say
                return
            reply = await self._ask_model(request, messages)
            if reply is None:
                return
            # Fixed before the reply is stored: a history with a malformed tool_use is rejected by the API.
            malformed = set(protocol.normalise_tool_uses(reply.content))
            if messages[-1]["role"] == "assistant":  # the continuation of a paused reply
                messages[-1]["content"] = [*messages[-1]["content"], *reply.content]
            else:
                messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "pause_turn":  # a paused reply is stored once it is whole
                await conversation.save(self._store)
            outcome.text = outcome.text + reply.text if cut_off else reply.text or outcome.text
            outcome.stop_reason = reply.stop_reason
            cut_off = reply.stop_reason == "pause_turn"  # the next reply goes on from this one
            if reply.stop_reason == "max_tokens" and continuations < MAX_CONTINUATIONS:
                continuations += 1
                cut_off = True
                protocol.append_user(messages, [protocol.text_block(CONTINUE_NOTE)])
            elif reply.tool_uses:
                if not await self._run_batch(request, turn_id, reply, malformed, messages, outcome):
                    return
            elif reply.stop_reason == "pause_turn":
                continue  # the API continues a paused reply when it is sent back as it is
            elif not request.injections.ready:
                if notice := STOP_NOTICES.get(reply.stop_reason):
                    self._output.notice(key, notice)
                return
        self._output.notice(key, f"Stopped after {self._settings.max_iterations} steps without finishing.")
        outcome.error = "iteration limit reached"

    async def _ask_model(self, request: TurnRequest, messages: list[Message]) -> ModelReply | None:
        """One streamed model call; None when the turn is cancelled while it streams."""
        key = request.session_key
        toolbox = request.toolbox or self._toolbox
        model_request = ModelRequest(system=self._system_prompt(key), messages=messages, tools=toolbox.specs())
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
        self._output.text_done(key)
        if reply.stop_reason == "max_tokens":
            # A tool_use cut off by the limit has partial arguments; it is dropped, not run.
            reply = ModelReply([b for b in reply.content if b.get("type") != "tool_use"], reply.stop_reason)
        if not reply.content:
            reply = ModelReply([protocol.text_block("(no reply)")], reply.stop_reason)
        return reply

    async def _run_batch(
        self,
        request: TurnRequest,
        turn_id: str,
        reply: ModelReply,
        malformed: set[str],
        messages: list[Message],
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
                        turn_id=turn_id,
                        tool_name=block["name"],
                        tool_input=block["input"],
                        tool=toolbox.get(block["name"]),
                        error=MALFORMED_CALL
                        if block["id"] in malformed
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
        await self._registry.mark_delivered(call for call in calls if call.is_final)
        late = await self._late_result_blocks(key, exclude={call.id for call in calls})
        protocol.append_user(messages, results + late)
        if request.stop_at_first_wait and any(not call.is_final for call in calls):
            outcome.pending_call_ids = [call.id for call in calls if not call.is_final]
            return False
        return end is not WaitEnd.CANCELLED

    async def _wait(self, request: TurnRequest, calls: list[ToolCall], toolbox: Toolbox) -> WaitEnd:
        if request.stop_at_first_wait:
            end = WaitEnd.ALL_DONE
        else:
            end = await wait_for_batch(
                calls,
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

    async def _late_result_blocks(self, key: str, *, exclude: set[str]) -> list[dict[str, JSON]]:
        """Notes for background calls that finished after their turn yielded; each is delivered once."""
        late = [call for call in await self._store.undelivered_calls(key) if call.id not in exclude]
        if not late:
            return []
        await self._registry.mark_delivered(late)
        limit = self._settings.tool_result_max_chars
        return [protocol.text_block(protocol.late_result_note(call, limit)) for call in late]

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
        """Persist what is left, ending with an assistant message so the history stays valid."""
        messages = conversation.messages
        if messages and messages[-1]["role"] == "user":
            if outcome.cancelled_by:
                note = f"(turn cancelled by {outcome.cancelled_by})"
            elif outcome.pending_call_ids:
                note = "(turn paused while tool calls run in the background)"
            else:
                note = f"(turn ended early: {outcome.error or 'interrupted'})"
            messages.append({"role": "assistant", "content": [protocol.text_block(note)]})
        try:
            await conversation.save(self._store)
        except Exception:
            log.exception("could not persist the end of a turn in %s", conversation.key)


@dataclass(slots=True)
class _Conversation:
    """The session's messages during a turn, and how many of them the store already has."""

    key: str
    messages: list[Message]
    persisted: int

    async def save(self, store: Store) -> None:
        if len(self.messages) > self.persisted:
            await store.append_messages(self.key, self.messages[self.persisted :])
            self.persisted = len(self.messages)
