"""`forget` as a thread reply: the session's stored data deleted, after a confirmation button.

Only whoever started the session, or an admin of `BOT_ADMIN_USERS`, may ask, and only they may click:
anyone else is refused in words (in the thread for the reply, ephemerally for the click). The click
stops what the session is running, then deletes every stored row holding its text (the store says
which, bot/store/forgetting.py) and its commands' files, as retention does, and edits the
confirmation to say so.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, SectionBlock
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.engine import Engine
from bot.errors import SlackResponseError
from bot.store.forgetting import Forgetting

log = logging.getLogger(__name__)

FORGET_ACTION = "forget_session"
FORGET_WORDS = frozenset({"forget"})
ASK = "Delete everything I stored for this thread (messages, tool calls, reminders)? This cannot be undone."
DONE = "Forgotten: everything I stored for this thread was deleted (token totals are kept, without any text)."
REFUSED = "Only the person who started this thread, or an admin, can make me forget it."


def confirmation_blocks(session_key: str) -> list[dict[str, Any]]:
    """The question and its one button; built with slack_sdk's models, which validate lengths and ids."""
    button = ButtonElement(text="Forget this thread", action_id=FORGET_ACTION, value=session_key, style="danger")
    return [SectionBlock(text=ASK).to_dict(), ActionsBlock(elements=[button]).to_dict()]


Say = Callable[[str, str, str, list[dict[str, Any]] | None], Awaitable[str | None]]
"""Posts (channel, thread_ts, text, blocks) through the process's post queue (`SlackEdge.say`)."""


class ForgetDialog:
    """The Slack side of forgetting: who may ask, the question and its button, the answer. Forgetting
    itself is the engine's (`Forgetting`), the same for a click here and for retention."""

    def __init__(
        self,
        *,
        client: AsyncWebClient,
        say: Say,
        forgetting: Forgetting,
        engine: Engine,
        admins: tuple[str, ...],
    ) -> None:
        self._client = client
        self._say = say
        self._forgetting = forgetting
        self._engine = engine
        self._admins = admins

    async def may_forget(self, session_key: str, user: str) -> bool:
        session = await self._forgetting.store.get_session(session_key)
        return session is not None and (user in self._admins or session.address.get("requester") == user)

    async def ask(self, session_key: str, user: str, channel: str, thread_ts: str) -> None:
        """Answer a `forget` reply: the confirmation button for who may, a refusal for anyone else."""
        allowed = await self.may_forget(session_key, user)
        text, blocks = (ASK, confirmation_blocks(session_key)) if allowed else (REFUSED, None)
        await self._say(channel, thread_ts, text, blocks)

    async def on_button(self, body: dict[str, Any]) -> None:
        """The confirmation clicked: forget, if the clicker may; else tell them, and only them."""
        user = str((body.get("user") or {}).get("id") or "")
        channel = str((body.get("channel") or {}).get("id") or "")
        message = body.get("message") or {}
        actions = body.get("actions") or [{}]
        session_key = str(actions[0].get("value") or "")
        try:
            if not await self.may_forget(session_key, user):
                await self._client.chat_postEphemeral(
                    channel=channel, user=user, thread_ts=message.get("thread_ts"), text=REFUSED
                )
                return
            await self._engine.cancel_turn(session_key, by=user)
            await self._forgetting.forget(session_key)
            log.info("forgot session %s at the request of %s", session_key, user)
            await self._client.chat_update(channel=channel, ts=str(message.get("ts")), text=DONE, blocks=[])
        except SlackResponseError as exc:
            log.warning("could not answer the forget button: %s", exc.error)
