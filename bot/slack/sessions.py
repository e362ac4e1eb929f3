"""What the Slack edge remembers per session: where it lives, who asks there, and what is in flight.

A session's `Address` is read from the store once and then kept, so posting needs no
store round trip; the events side hands over addresses and speakers it has just
stored, so the cached copy does not go stale.

Heartbeat sessions have no thread until they say something: their address has
`thread_ts: None`, so the first post goes top-level in the channel and opens the
thread, which is recorded in the store (address and alias) so replies reach the session.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackResponseError
from bot.slack.filters import session_key
from bot.slack.queues import Operation
from bot.slack.render import Block
from bot.slack.reply import ReplyStream
from bot.store import Store
from bot.types import OwedPost, Speaker

log = logging.getLogger(__name__)

REMEMBER_REQUESTS = 5_000
REMEMBER_PROFILES = 5_000
"""People whose users.info answer stays cached; a forgotten one is simply asked again."""
REMEMBER_SESSIONS = 10_000
"""Idle sessions whose address stays cached; an evicted one is simply read from the store again."""


@dataclass(slots=True)
class Address:
    """Where a session lives in Slack, as stored in the session's `address`."""

    team: str
    channel: str
    thread_ts: str | None
    requester: str | None  # who started the session: with the turn's requester, who may cancel
    quiet_reply: str | None
    speaker: str | None = None  # who wrote the latest message handed to the engine: who is asking now
    thinking: bool = False

    @classmethod
    def parse(cls, data: dict[str, Any], default_team: str = "") -> Address | None:
        """None for sessions of another edge (or with nowhere to post)."""
        if data.get("edge", "slack") != "slack" or not data.get("channel"):
            return None
        return cls(
            team=str(data.get("team") or default_team),
            channel=str(data["channel"]),
            thread_ts=data.get("thread_ts"),
            requester=data.get("requester"),
            quiet_reply=data.get("quiet_reply"),
            speaker=data.get("speaker"),
        )


class Unsent(Protocol):
    """Something the edge has decided to post in a session and has not owed in the store yet (an answer, a
    notice): what a turn's last save owes for it (`SlackEdge.owed_posts`)."""

    def owe_rest(self) -> list[tuple[str, list[Block] | None]]:
        """The messages not posted nor owed yet, handed to the caller to owe: this never posts them itself."""
        ...

    def finished_posting(self) -> bool:
        """Whether nothing more can come of it (posted, or handed over)."""
        ...


@dataclass(slots=True)
class SessionState:
    """What the edge keeps of one session between the engine's reports."""

    address: Address | None = None
    reply: ReplyStream | None = None
    last_reply: ReplyStream | None = None  # the current turn's latest answer: the final one once the turn ends
    turn_requester: str | None = None
    held: list[Operation] | None = None  # a quiet turn's operations, until it is known whether it says anything
    unsent: list[Unsent] = field(default_factory=list)  # in the order they were decided
    handed: list[OwedPost] = field(default_factory=list)  # what the turn's last save owes, until it names the ids


class Sessions:
    """The edge's per-session state, least recently used forgotten first."""

    def __init__(
        self, client: AsyncWebClient, store: Store, *, team_id: str = "", requesters_from_store: bool = False
    ) -> None:
        """`requesters_from_store` (a cluster, where the turn may have started on another replica): who may
        cancel is read from the store, see `requesters`."""
        self._client = client
        self._team_id = team_id
        self._store = store
        self._requesters_from_store = requesters_from_store
        self._states: OrderedDict[str, SessionState] = OrderedDict()
        self._requests: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._profiles: OrderedDict[str, dict[str, Any]] = OrderedDict()
        """users.info answers by user id, least recently used first: a person's time zone and the name the model
        knows them by."""

    def get(self, key: str) -> SessionState:
        """The session's state, created on first use; every use makes it the most recently used."""
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = SessionState()
            self._trim()
        else:
            self._states.move_to_end(key)
        return state

    def known(self) -> list[str]:
        """Every session this edge remembers."""
        return list(self._states)

    def streaming(self) -> list[str]:
        """The sessions with an answer still streaming."""
        return [key for key, state in self._states.items() if state.reply is not None]

    def _trim(self) -> None:
        """Forget the least recently used sessions beyond the cap, unless an answer is streaming (or held) there."""
        for key in list(self._states)[: max(0, len(self._states) - REMEMBER_SESSIONS)]:
            state = self._states[key]
            if state.reply is None and state.held is None:
                del self._states[key]

    # -- where the session lives --------------------------------------------------------------

    def remember_address(self, key: str, address: dict[str, Any]) -> None:
        """The address the events side just stored, so the first post needs no store round trip."""
        state = self.get(key)
        state.address = state.address or Address.parse(address, self._team_id)

    async def address(self, key: str) -> Address | None:
        state = self.get(key)
        if state.address is None:
            record = await self._store.get_session(key)
            state.address = Address.parse(record.address, self._team_id) if record else None
        return state.address

    async def open_thread(self, key: str, address: Address, ts: str) -> None:
        """The session's first post (top-level, at `ts`) is now its thread: replies there must reach it."""
        address.thread_ts = ts
        await self._store.update_address(key, {"thread_ts": ts})
        await self._store.add_alias(session_key(address.team, address.channel, ts), key)

    # -- who asks there -----------------------------------------------------------------------

    def remember_speaker(self, key: str, user: str) -> None:
        """The speaker the events side just stored, so a cached address does not go stale."""
        address = self.get(key).address
        if address is not None:
            address.speaker = user

    def note_request(self, key: str, channel: str, ts: str, user: str) -> None:
        """The user message that started the session's current turn (a cancel reaction on it stops the turn)."""
        self.get(key).turn_requester = user
        self._requests[(channel, ts)] = key
        self._requests.move_to_end((channel, ts))
        while len(self._requests) > REMEMBER_REQUESTS:
            self._requests.popitem(last=False)

    def request_session(self, channel: str, ts: str) -> str | None:
        return self._requests.get((channel, ts))

    async def requesters(self, key: str) -> set[str]:
        """Who may cancel in this session as its requester: whoever started it and whoever started this turn.

        Read from the store when the turn may have started on another replica (`requesters_from_store`): the
        session's requester, and the author of the oldest message still owed an answer."""
        # One of the four mode branches outside the seam: what this process remembers of a turn it did not
        # start would be stale (an injection noted here is not a turn's start), so a replica asks the store.
        if self._requesters_from_store:
            record = await self._store.get_session(key)
            started = next(iter(await self._store.session_inbox(key)), None)  # the row the running turn answers
            requester = record.address.get("requester") if record else None
            return {user for user in (requester, started.requester if started else None) if user}
        state = self.get(key)
        address = await self.address(key)
        return {user for user in (state.turn_requester, address.requester if address else None) if user}

    async def asker(self, key: str) -> str | None:
        """Who is asking in the session now: its latest speaker, else whoever started it."""
        address = await self.address(key)
        return (address.speaker or address.requester) if address else None

    async def user_timezone(self, key: str) -> str | None:
        """The asking person's time zone from users.info (cached per user); None when unknown.

        The asking person is the latest speaker (in a shared thread, not necessarily whoever started it).
        """
        user = await self.asker(key)
        if not user:
            return None
        tz = (await self._profile(user)).get("tz")
        return str(tz) if tz else None

    async def speaker(self, user: str) -> Speaker:
        """The person as the model names them: their id, and their display name when Slack says it."""
        profile = await self._profile(user)
        names = profile.get("profile")
        names = names if isinstance(names, dict) else {}
        name = names.get("display_name") or names.get("real_name") or profile.get("real_name") or profile.get("name")
        return Speaker(user, str(name or ""))

    async def _profile(self, user: str) -> dict[str, Any]:
        """users.info for `user`, cached for the `REMEMBER_PROFILES` people asked about last; a failed lookup is
        not cached (the next one may work)."""
        profile = self._profiles.get(user)
        if profile is None:
            try:
                response = await self._client.users_info(user=user)
            except SlackResponseError as exc:
                log.warning("users.info %s failed: %s", user, exc.error)
                return {}
            found = response.get("user")
            profile = found if isinstance(found, dict) else {}
        self._profiles[user] = profile
        self._profiles.move_to_end(user)
        while len(self._profiles) > REMEMBER_PROFILES:
            self._profiles.popitem(last=False)
        return profile
