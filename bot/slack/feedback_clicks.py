"""What a click on an answer's feedback buttons does: it is stored, and counted.

Each button's value names the turn that answered (bot/slack/feedback.py), so a click on any
replica, after any restart, is stored with that turn, the model that wrote the answer and who
clicked (bot/store/feedback.py), and counted in `/metrics` by rating. Someone the bot does not
answer gets the same private line as for any other button, and nothing is stored.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.admission import Admission
from bot.slack.cancel import NOT_ADMITTED, explain
from bot.slack.feedback import parse_value
from bot.store import Store
from bot.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


class FeedbackButtons:
    """Stores and counts the clicks on answers' feedback buttons."""

    def __init__(self, *, client: AsyncWebClient, store: Store, admission: Admission, metrics: Metrics) -> None:
        self._client = client
        self._store = store
        self._admission = admission
        self._metrics = metrics

    async def on_click(self, body: dict[str, Any]) -> None:
        person = body.get("user") or {}
        user = str(person.get("id") or "")
        if not self._admission.admits(user, team=str(person.get("team_id") or "")):
            await explain(self._client, body, user, NOT_ADMITTED)
            return
        for action in body.get("actions") or []:
            parsed = parse_value(str(action.get("value") or ""))
            if parsed is None:
                log.info("ignoring a feedback click by %s with a value this bot did not make", user)
                continue
            rating, turn_id = parsed
            session_key = turn_id.rpartition("#")[0]
            model = await self._store.record_feedback(
                turn_id=turn_id, session_key=session_key, user=user, rating=rating
            )
            if model is not None:
                self._metrics.inc_labelled("feedback_total", rating.value)
