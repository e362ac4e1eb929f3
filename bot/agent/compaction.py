"""Keeping a thread's history inside the context window, so a thread never dies of its length.

Before each model request the turn asks `Compactor.fit`. Under the budget
(`BOT_COMPACT_AT` of `BOT_CONTEXT_WINDOW`) nothing changes, so the cached prefix
stays byte-stable. Past it, the history shrinks in this order, stopping as soon
as it fits:

1. very large single inputs are truncated with a note (always, on new content);
2. old tool results become one-line stubs (name, status, first line);
3. older turns are replaced by a summary the model writes, stored as the first
   (user, assistant) pair of the new history and reused until the next compaction.

A compaction is persisted at once (`Store.replace_messages`), the replaced rows
kept for audit: after a restart the thread goes on from the summary, and the
prefix changes once per compaction, not on every request.

Done here rather than with the API's server-side context management: the stored
history stays the single source of truth (what a restart resumes from is what the
model saw), compaction points are ours to keep the cache stable, and the same code
works against any endpoint `ANTHROPIC_BASE_URL` names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot.agent.context import (
    SUMMARY_PREFIX,
    ContextSettings,
    SizeEstimate,
    request_chars,
    stub_old_results,
    summary_cut,
    truncate_inputs,
)
from bot.agent.protocol import text_block
from bot.errors import ModelError
from bot.types import JSON, Billing, Message, ModelRequest, Provider

log = logging.getLogger(__name__)

SUMMARY_SYSTEM = (
    "You condense a conversation between a person and an assistant that uses tools, so the assistant can "
    "carry on without the full history. Keep: what was asked, facts and results found, decisions made, open "
    "tasks and promises, ids of tool calls, reminders or waits still relevant, and the person's preferences. "
    "Drop pleasantries and superseded details. Write plain, dense notes."
)
SUMMARY_REQUEST = "Summarise the conversation above for your own later use, as instructed."
SUMMARY_ACK = "Understood; I will continue from this summary."
SUMMARY_MAX_TOKENS = 2048
KEEP_SHARE = 0.3
"""Share of the budget the kept tail may take after a summary; the rest is room to grow before the next one."""
NO_SUMMARY = "(earlier messages were removed to fit the context window; a summary could not be made)"


@dataclass(frozen=True, slots=True)
class Compacted:
    """The new history, and how many of its messages are stored (the rest the turn saves as usual)."""

    messages: list[Message]
    persisted: int


@dataclass(frozen=True, slots=True)
class Fitted:
    """What `Compactor.fit` left: the request's size as it will be sent (`request_chars`, measured once, so the
    turn learns the API's count against it without serializing the request again), and the compaction, if any."""

    chars: int
    compacted: Compacted | None = None


class Compactor:
    def __init__(self, *, provider: Provider, settings: ContextSettings) -> None:
        self._provider = provider
        self._settings = settings

    async def fit(
        self,
        messages: list[Message],
        *,
        persisted: int,
        system: str,
        tools: list[dict[str, JSON]],
        billing: Billing,
        estimate: SizeEstimate,
        force: bool = False,
    ) -> Fitted:
        """Shrink `messages` (in place) until the request fits the budget; its size, and what changed in the
        stored part, if any.

        `force` (the API refused the request as too long) stubs and summarises whatever the estimate says.
        """
        truncate_inputs(messages, persisted, self._settings.max_input_chars)
        chars = request_chars(system, tools, messages)
        if not force and estimate.tokens(chars) <= self._settings.budget_tokens:
            return Fitted(chars)
        keep = 1 if force else self._settings.keep_recent
        if stubbed := stub_old_results(messages, keep):
            chars = request_chars(system, tools, messages)
        if (force or estimate.tokens(chars) > self._settings.budget_tokens) and (
            summarised := await self._summarise(messages, persisted, system, tools, billing, estimate)
        ):
            log.info("compacted %s: %d messages now", billing.session_key, len(summarised.messages))
            return Fitted(request_chars(system, tools, summarised.messages), summarised)
        if stubbed:
            log.info("cleared old tool results in %s", billing.session_key)
            return Fitted(chars, Compacted(messages, persisted))
        return Fitted(chars)

    async def _summarise(
        self,
        messages: list[Message],
        persisted: int,
        system: str,
        tools: list[dict[str, JSON]],
        billing: Billing,
        estimate: SizeEstimate,
    ) -> Compacted | None:
        cut = summary_cut(messages, estimate.chars(int(self._settings.budget_tokens * KEEP_SHARE)))
        if cut is None:
            return None
        summary = await self._summary_of(messages[:cut], system, tools, billing)
        head: list[Message] = [
            {"role": "user", "content": [text_block(f"{SUMMARY_PREFIX}\n{summary}")]},
            {"role": "assistant", "content": [text_block(SUMMARY_ACK)]},
        ]
        messages[:cut] = head
        return Compacted(messages, len(head) + max(0, persisted - cut))

    async def _summary_of(self, old: list[Message], system: str, tools: list[dict[str, JSON]], billing: Billing) -> str:
        # The old part ends with the assistant's answer, so one more user message keeps the roles alternating.
        # Tools are sent because the old part holds tool_use blocks; `none` keeps the model from calling one.
        request = ModelRequest(
            system=f"{SUMMARY_SYSTEM}\n\nThe assistant's own instructions were:\n{system}",
            messages=[*old, {"role": "user", "content": [text_block(SUMMARY_REQUEST)]}],
            tools=tools,
            tool_choice={"type": "none"} if tools else None,
            max_tokens=SUMMARY_MAX_TOKENS,
            billing=billing,
        )
        try:
            reply = await self._provider.complete(request)
        except ModelError as exc:
            log.warning("could not summarise %s: %s", billing.session_key, exc)
            return NO_SUMMARY
        return reply.text.strip() or NO_SUMMARY
