"""A person's word from Slack to a call that waits for one: Approve / Deny, a question's option, or a reply.

Only the call's `approvers` speak for it (for an approval: the policy's approvers, else the
person who asked; for a question: the person who asked and the policy's approvers); anyone
else gets a private "not yours" and the call keeps waiting, losing nothing. The word reaches
the registry, which runs, refuses or answers the call and repaints its line with who spoke,
through the normal call_changed path.

A question without options is answered by a reply in its thread: while one is open, the
next reply there from someone who may answer it is its answer (the oldest open question's),
not a message for the agent. Anyone else's reply goes on as usual, and so do `stop`, `cancel`
and `forget`. A question with options takes only its buttons.

In a cluster the click (or the reply) may reach a replica that does not hold the call, so it is
`relay`ed like a cancel: rung to every replica (this one too), and the one whose registry
holds the waiting call decides and answers the person.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.calls.registry import CallRegistry
from bot.coordination import Coordination
from bot.slack.admission import Admission
from bot.slack.cancel import NOT_ADMITTED, explain
from bot.slack.render import ANSWER_ACTIONS, APPROVE_ACTION
from bot.store import Store
from bot.telemetry.metrics import Metrics
from bot.toolcall import ToolCall

log = logging.getLogger(__name__)

NOT_YOURS = "Not yours to approve: only the approvers this call names can decide it."
ALREADY_DECIDED = "This call is no longer waiting for a decision."
NOT_YOURS_TO_ANSWER = "Not yours to answer: only the person who asked (or an approver) can answer this question."
ALREADY_ANSWERED = "This question is no longer waiting for an answer."
ANSWERED_REACTION = "white_check_mark"
SAVE_WAIT_S = 5.0


class ApprovalButtons:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        registry: CallRegistry,
        admission: Admission,
        metrics: Metrics,
        store: Store,
        coordination: Coordination,
    ) -> None:
        self._client = client
        self._registry = registry
        self._admission = admission
        self._metrics = metrics
        self._store = store
        self._coordination = coordination

    async def on_button(self, body: dict[str, Any], *, forwarded: bool = False) -> None:
        """An Approve / Deny / option click, or (`body["reply"]`) a reply another replica took for an answer."""
        if not forwarded and await self._coordination.relay("approval", body):
            return  # the replica holding the waiting call decides
        person = body.get("user") or {}
        user = str(person.get("id") or "")
        if (reply := body.get("reply")) is not None:
            self._answer_reply(str(reply.get("call") or ""), str(reply.get("text") or ""), user)
            return
        for action in body.get("actions") or []:
            call_id = str(action.get("value") or "")
            call = self._registry.get(call_id)
            if call is None and not forwarded:
                call = await self._registry.find(call_id) if call_id else None
            if call is None:
                continue  # another replica holds it (a cluster), or it is unknown: nothing to say from here
            action_id = str(action.get("action_id") or "")
            if not self._admission.admits(user, team=str(person.get("team_id") or "")):
                await explain(self._client, body, user, NOT_ADMITTED)
            elif ANSWER_ACTIONS.match(action_id):
                await self._answer_click(body, call, user, int(action_id.rsplit(":", 1)[1]))
            elif not call.awaiting_approval:
                await explain(self._client, body, user, ALREADY_DECIDED)
            elif user not in call.approvers:
                log.info("ignoring a decision by %s on call %s: not one of its approvers", user, call_id)
                await explain(self._client, body, user, NOT_YOURS)
            elif self._registry.decide(call_id, approve=action_id == APPROVE_ACTION, by=user):
                self._metrics.inc("approvals_decided_total")

    async def _answer_click(self, body: dict[str, Any], call: ToolCall, user: str, index: int) -> None:
        options = call.options
        if not call.awaiting_answer or not 0 <= index < len(options):
            await explain(self._client, body, user, ALREADY_ANSWERED)
        elif user not in call.approvers:
            log.info("ignoring an answer by %s to question %s: not one who may answer it", user, call.id)
            await explain(self._client, body, user, NOT_YOURS_TO_ANSWER)
        elif self._registry.answer(call.id, options[index], by=user):
            self._metrics.inc("questions_answered_total")

    async def question_for(self, session_key: str, user: str) -> ToolCall | None:
        """The open free-text question of the session that a reply by `user` answers: the oldest one they may
        answer, or None (the reply is then a message for the agent, as usual)."""
        calls = (
            sorted(self._registry.open_calls(session_key), key=lambda call: call.created_at)
            if not self._coordination.shared
            else await self._store.session_calls(session_key, only_open=True)  # oldest first
        )
        return next(
            (call for call in calls if call.awaiting_answer and not call.options and user in call.approvers),
            None,
        )

    async def on_reply(self, question: ToolCall, user: str, text: str) -> None:
        """A reply taken (and claimed) as `question`'s answer; its author was admitted by the caller. Here it
        returns once the answered call is saved, so the ✅ the caller adds next is never ahead of the store."""
        reply = {"user": {"id": user}, "reply": {"call": question.id, "text": text}}
        if await self._coordination.relay("approval", reply):
            return  # the replica holding the question answers it
        if self._answer_reply(question.id, text, user):
            await self._registry.wait_final(question.id, SAVE_WAIT_S)

    def _answer_reply(self, call_id: str, text: str, user: str) -> bool:
        call = self._registry.get(call_id)
        if call is None or user not in call.approvers or not self._registry.answer(call_id, text, by=user):
            return False
        self._metrics.inc("questions_answered_total")
        return True
