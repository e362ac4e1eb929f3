"""Approving from Slack: the Approve and Deny buttons on a call that waits for a person.

Only the call's approvers (the policy's `approvers`, else the person who asked) decide;
anyone else gets a private "not yours to approve" and the call keeps waiting. The
decision reaches the registry, which runs or refuses the call and repaints its line
with who decided, through the normal call_changed path.

In a cluster the click may reach a replica that does not hold the call, so it is
`relay`ed like a cancel: rung to every replica (this one too), and the one whose
registry holds the waiting call decides and answers the person.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.calls.registry import CallRegistry
from bot.coordination import Coordination
from bot.slack.admission import Admission
from bot.slack.cancel import NOT_ADMITTED, explain
from bot.slack.metrics import Metrics
from bot.slack.render import APPROVE_ACTION

log = logging.getLogger(__name__)

NOT_YOURS = "Not yours to approve: only the approvers this call names can decide it."
ALREADY_DECIDED = "This call is no longer waiting for a decision."


class ApprovalButtons:
    def __init__(
        self,
        *,
        client: AsyncWebClient,
        registry: CallRegistry,
        admission: Admission,
        metrics: Metrics,
        coordination: Coordination,
    ) -> None:
        self._client = client
        self._registry = registry
        self._admission = admission
        self._metrics = metrics
        self._coordination = coordination

    async def on_button(self, body: dict[str, Any], *, forwarded: bool = False) -> None:
        if not forwarded and await self._coordination.relay("approval", body):
            return  # the replica holding the waiting call decides
        person = body.get("user") or {}
        user = str(person.get("id") or "")
        for action in body.get("actions") or []:
            call_id = str(action.get("value") or "")
            call = self._registry.get(call_id)
            if call is None and not forwarded:
                call = await self._registry.find(call_id) if call_id else None
            if call is None:
                continue  # another replica holds it (a cluster), or it is unknown: nothing to say from here
            if not self._admission.admits(user, team=str(person.get("team_id") or "")):
                await explain(self._client, body, user, NOT_ADMITTED)
            elif not call.awaiting_approval:
                await explain(self._client, body, user, ALREADY_DECIDED)
            elif user not in call.approvers:
                log.info("ignoring a decision by %s on call %s: not one of its approvers", user, call_id)
                await explain(self._client, body, user, NOT_YOURS)
            elif self._registry.decide(call_id, approve=action.get("action_id") == APPROVE_ACTION, by=user):
                self._metrics.inc("approvals_decided_total")
