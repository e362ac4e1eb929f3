"""The agent surface's turns of a process: which turn message each session and call belongs to, and when to stop.

`SlackEdge` asks here first: a thread's turn in agent mode (`BOT_SLACK_SURFACE=agent`, or `auto` until Slack
refuses streams) is a `TurnMessage`; anything else (a heartbeat's turn, the classic surface) gets None and is
shown the classic way. A turn keeps its message to the end, even when Slack refuses its stream mid-way (it
is then posted whole), and a message lives on after its turn while its calls run.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.edits import EditScheduler
from bot.slack.filters import SESSION_PREFIX
from bot.slack.posts import Priority
from bot.slack.queues import Operation
from bot.slack.render import Block
from bot.slack.sessions import Sessions
from bot.slack.threads import ThreadPosts
from bot.slack.turn_stream import NOT_AN_AGENT, Phase, Place, StreamBudget, TurnMessage
from bot.toolcall import ToolCall

log = logging.getLogger(__name__)


class AgentTurns:
    def __init__(
        self,
        *,
        surface: str,
        client: AsyncWebClient,
        edits: EditScheduler,
        sessions: Sessions,
        threads: ThreadPosts,
        put: Callable[[str, Operation], None],
        budget: StreamBudget | None = None,
    ) -> None:
        """`put` queues an operation behind the session's other Slack operations."""
        self.surface = surface
        self._client = client
        self._edits = edits
        self._sessions = sessions
        self._threads = threads
        self._put = put
        self._budget = budget or StreamBudget()
        self._current: dict[str, TurnMessage] = {}  # the running turn's message, by session
        self._of_call: dict[str, TurnMessage] = {}
        self._live: list[TurnMessage] = []  # messages not closed yet (their calls may outlive the turn)

    def of(self, key: str) -> TurnMessage | None:
        """The session's running turn as one message, started on first use; None: the classic surface shows it."""
        turn = self._current.get(key)
        if turn is None and (self.surface == "classic" or not key.startswith(SESSION_PREFIX)):
            return None
        if turn is None:
            self._live = [live for live in self._live if live.phase is not Phase.DONE]
            turn = TurnMessage(
                key,
                client=self._client,
                edits=self._edits,
                budget=self._budget,
                post=functools.partial(self._post, key),
                post_backlog_s=self._threads.backlog_s,
                refused=self._refused,
            )
            self._current[key] = turn
            self._live.append(turn)
            self._put(key, functools.partial(self._open, key, turn))
        return turn

    def text_done(self, key: str) -> None:
        if (turn := self._current.get(key)) is not None:
            turn.end_text()

    def calls_started(self, key: str, calls: list[ToolCall]) -> list[ToolCall]:
        """Put the calls on the turn's message; returns those left to a status message (none in classic mode:
        all of them). A call that waits for a person's approval or answer keeps its status message: it holds
        the buttons."""
        turn = self.of(key)
        if turn is None:
            return calls
        cards = [call for call in calls if not call.awaiting_person]
        turn.add_calls(cards)
        self._of_call.update((call.id, turn) for call in cards)
        return [call for call in calls if call.awaiting_person]

    def changed(self, call: ToolCall) -> bool:
        """False when no turn message of this process shows the call."""
        turn = self._of_call.get(call.id)
        if turn is None or not turn.changed(call):
            return False
        if call.is_final:
            del self._of_call[call.id]
        return True

    def turn_finished(self, key: str) -> None:
        if (turn := self._current.pop(key, None)) is not None:
            turn.finish()

    def share_budget(self, replicas: int) -> None:
        self._budget.share(replicas)

    def at(self, channel: str, ts: str) -> TurnMessage | None:
        return next((turn for turn in self._live if (turn.channel, turn.ts) == (channel, ts)), None)

    async def close(self) -> None:
        for turn in self._live:
            await turn.close()

    async def _open(self, key: str, turn: TurnMessage) -> None:
        address = await self._sessions.address(key)
        if address is None or address.thread_ts is None:
            log.warning("no Slack thread for session %s; its turn is not shown", key)
            turn.abandon()
            return
        await turn.open(Place(address.channel, address.thread_ts, address.team, address.speaker or address.requester))

    async def _post(self, key: str, text: str, blocks: list[Block], owed: bool) -> tuple[str, str] | None:
        """Owed, it is the turn's final state, an answer; else progress, which other threads' answers pass."""
        priority = Priority.ANSWER if owed else Priority.PROGRESS
        return await self._threads.post(key, text, blocks, owed=owed, priority=priority)

    def _refused(self, error: str) -> None:
        if error in NOT_AN_AGENT and self.surface == "auto":
            self.surface = "classic"
            log.warning("Slack refused chat.startStream (%s): turns show as status messages (classic) from now", error)
        else:
            log.warning("chat.startStream refused (%s); this turn is posted as a message and edited", error)
