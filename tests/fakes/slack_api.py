"""Protocol-level fake of Slack (Web API + Socket Mode), served over 127.0.0.1.

Why a wire-level fake instead of mocking slack_sdk/slack_bolt: the unmodified ``AsyncWebClient`` (with its retry
handlers), bolt's ``AsyncApp`` and ``AsyncSocketModeHandler`` talk to it, so request encoding (form vs JSON bodies,
Bearer tokens), 429/``Retry-After`` handling, Socket Mode envelopes, acks and reconnects are all exercised exactly as
in production. The fake also answers with the real API's error codes (``message_not_found``, ``already_reacted``,
``not_allowed_token_type``...) so misuse fails tests instead of production.

Usage::

    async with FakeSlack() as slack:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        ...
        await slack.send_event(slack.mention("C1", "hello"))
        await slack.wait_for(lambda: slack.posts_in_thread("C1", ts))

Several replicas, each with its own Socket Mode client, as Slack treats an app's connections::

    async with FakeSlack(routing="random", seed=1, redeliver_fraction=0.2) as slack:
        ...  # start the replicas, then wait for len(slack.open_connections) == 3
        await slack.send_event(slack.mention("C1", "hello"))  # one random session; retried until acked
        slack.deliveries_per_connection(), slack.acked_by(envelope_id), slack.redeliveries, slack.abandoned

Everything runs on the test's event loop; observation is event-driven (``wait_for`` wakes on every API call,
ack and connection change) so tests need no sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import math
import random
import secrets
import string
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aiohttp import WSCloseCode, WSMsgType, web
from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block

from fakes.slack_agent import FakeAgentSurface
from fakes.slack_files import FakeFiles
from fakes.slack_streams import FakeStreams

JsonDict = dict[str, Any]
T = TypeVar("T")
Routing = Literal["newest", "random"]

BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
BOT_NAME = "threadbot"
TEAM_ID = "T1"
APP_ID = "A1"
TEAM_DOMAIN = "threadbot-test"
VERIFICATION_TOKEN = "fake-verification-token"
MAX_SOCKET_CONNECTIONS = 10  # per app; Slack refuses the 11th with too_many_websockets
MAX_EVENT_RETRIES = 3  # Slack's retries of an unacked event (retry_attempt 1..3), then it gives up

# Params that slack_sdk form-encodes as JSON strings (e.g. when blocks are passed via ``data=``/``params=``).
_JSON_PARAMS = frozenset({"blocks", "attachments", "metadata", "user_auth_blocks", "prompts"})
# Params of chat.postMessage that are stored on the message as-is (besides text/blocks/thread_ts).
_MESSAGE_FIELDS = frozenset({"channel", "text", "blocks", "thread_ts", "ts"})


class SlackError(Exception):
    """Raised inside a method handler to answer ``{"ok": false, "error": code}`` like the real API."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


# --------------------------------------------------------------------------------------------------------------
# Records


@dataclass
class ApiCall:
    """One Web API request as received: merged query + body params (JSON strings decoded), and what we answered."""

    method: str
    params: JsonDict
    time: float  # time.perf_counter() when the request arrived
    response: JsonDict = field(default_factory=dict)
    status: int = 200
    token: str | None = None
    http_method: str = "POST"

    @property
    def ok(self) -> bool:
        """True if the call succeeded (HTTP 200 and ``"ok": true``)."""
        return self.status == 200 and bool(self.response.get("ok"))


@dataclass(frozen=True)
class Revision:
    """One version of a message's content; ``StoredMessage.history[0]`` is the original post."""

    text: str
    blocks: list[JsonDict] | None
    time: float


@dataclass
class StoredMessage:
    """A message in the fake workspace, posted by the bot (via the API) or by a test user (via the builders)."""

    channel: str
    ts: str
    text: str
    user: str
    thread_ts: str | None = None
    blocks: list[JsonDict] | None = None
    bot_id: str | None = None
    reactions: dict[str, list[str]] = field(default_factory=dict)
    deleted: bool = False
    extra: JsonDict = field(default_factory=dict)
    history: list[Revision] = field(default_factory=list)
    user_team: str = TEAM_ID
    """The author's own team: another organisation's in a Slack Connect channel (``users[uid]["team_id"]``)."""

    @property
    def is_bot(self) -> bool:
        """True if the bot posted this message."""
        return self.user == BOT_USER_ID

    @property
    def edits(self) -> list[Revision]:
        """Versions written by chat.update / response_url replacements, oldest first (excludes the original)."""
        return self.history[1:]

    @property
    def thread_root(self) -> str:
        """The ts of the thread this message belongs to (its own ts for top-level messages)."""
        return self.thread_ts or self.ts

    def to_api(self, *, metadata: bool = True) -> JsonDict:
        """The message object as Slack's API returns it (chat.postMessage ``message``, conversations.replies).

        ``metadata=False`` leaves out the message metadata, as conversations.history/replies do unless asked
        with ``include_all_metadata``."""
        out: JsonDict = {"type": "message", "ts": self.ts, "user": self.user, "text": self.text, "team": TEAM_ID}
        if not self.is_bot:
            out |= {"user_team": self.user_team, "source_team": self.user_team}
        if self.blocks is not None:
            out["blocks"] = self.blocks
        if self.bot_id:
            out |= {"bot_id": self.bot_id, "app_id": APP_ID}
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if len(self.history) > 1:
            out["edited"] = {"user": self.user, "ts": self.ts}
        if self.reactions:
            out["reactions"] = [{"name": n, "users": list(u), "count": len(u)} for n, u in self.reactions.items()]
        for key in ("attachments", "metadata") if metadata else ("attachments",):
            if key in self.extra:
                out[key] = self.extra[key]
        return out


@dataclass(frozen=True)
class EphemeralMessage:
    """A chat.postEphemeral message: visible only to ``user``, never part of the thread history."""

    channel: str
    user: str
    text: str
    blocks: list[JsonDict] | None
    thread_ts: str | None
    message_ts: str
    time: float


@dataclass(frozen=True)
class SentEnvelope:
    """A Socket Mode envelope the fake pushed to the client."""

    envelope_id: str
    type: str
    body: JsonDict
    time: float
    connection_id: int

    @property
    def retry_attempt(self) -> int:
        """0 for a first delivery, 1..3 for Slack's retries (``retry_attempt`` beside the payload)."""
        return int(self.body.get("retry_attempt") or 0)

    @property
    def event_id(self) -> str | None:
        """The Events API ``event_id`` the envelope carries (the same on every retry); None for other types."""
        payload = self.body.get("payload")
        return str(payload["event_id"]) if isinstance(payload, dict) and "event_id" in payload else None


@dataclass(frozen=True)
class Ack:
    """A client's acknowledgement of an envelope (``{"envelope_id": ..., "payload"?: ...}``)."""

    envelope_id: str
    time: float
    payload: JsonDict | None
    connection_id: int
    """The Socket Mode session the ack came in on."""


@dataclass(frozen=True)
class Redelivery:
    """An events_api envelope Slack sent again: ``cause`` is ``"timeout"`` (no ack within ``redeliver_after_s``)
    or ``"duplicate"`` (drawn by ``redeliver_fraction``, sent even though the first one may be acked). The
    client sees ``retry_reason: "timeout"`` either way, as it cannot tell them apart in Slack either."""

    event_id: str
    envelope_id: str
    attempt: int
    cause: str
    time: float


@dataclass(frozen=True)
class RefusedConnection:
    """A Socket Mode session Slack turned away (``disconnect`` with ``reason``) instead of saying hello."""

    ticket: str
    reason: str
    time: float


@dataclass(frozen=True)
class ResponseUrlPost:
    """A POST to an interactive payload's ``response_url`` (bolt's ``respond()``)."""

    channel: str
    message_ts: str
    body: JsonDict
    time: float


@dataclass
class SocketConnection:
    """One Socket Mode WebSocket session (the SDK opens a new one on every reconnect)."""

    id: int
    ticket: str
    ws: web.WebSocketResponse
    opened_at: float
    closed_at: float | None = None
    answers_pings: bool = True  # False: a half-dead link that stays open but never pongs (the SDK must notice)

    @property
    def open(self) -> bool:
        """True while the session can carry envelopes."""
        return self.closed_at is None and not self.ws.closed


@dataclass
class _Failure:
    status: int
    error: str
    retry_after: int | None
    remaining: int | None  # None = until cleared


@dataclass
class _RandomFailures:
    prefix: str
    rate: float
    rng: random.Random


@dataclass
class _Stall:
    matches: Callable[[JsonDict], bool]
    remaining: int | None  # None = until cleared


@dataclass
class _TokenBucket:
    """Classic token bucket: ``capacity`` calls at once, refilled at ``rate`` tokens per (real) second."""

    rate: float
    capacity: float
    tokens: float
    updated: float
    retry_after: int | None

    def take(self, now: float) -> float | None:
        """Consume a token; None if allowed, else the seconds until one is available."""
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


@dataclass
class _RateLimit:
    per_minute: float
    burst: int
    retry_after: int | None
    per_channel: bool
    time_scale: float
    buckets: dict[str, _TokenBucket] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------------------
# Free helpers (also usable for HTTP-mode tests without a FakeSlack)


def _ts_key(ts: str) -> tuple[int, int]:
    sec, _, frac = ts.partition(".")
    return int(sec), int(frac.ljust(6, "0")[:6] or 0)


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true")


def new_event_id() -> str:
    """An ``Ev...`` id shaped like Slack's."""
    return "Ev" + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(9))


def tokens_revoked_event(*, bot: Sequence[str] = (), oauth: Sequence[str] = ()) -> JsonDict:
    """`tokens_revoked` as Slack documents it: the user ids whose user (`oauth`) or `bot` tokens were revoked."""
    return {"type": "tokens_revoked", "tokens": {"oauth": list(oauth), "bot": list(bot)}, "event_ts": _now_ts()}


def app_uninstalled_event() -> JsonDict:
    """`app_uninstalled`: the app was removed from the workspace, every token with it."""
    return {"type": "app_uninstalled", "event_ts": _now_ts()}


def _now_ts() -> str:
    return f"{time.time():.6f}"


def event_callback_body(
    event: Mapping[str, Any], *, event_id: str | None = None, team_id: str = TEAM_ID, event_time: int | None = None
) -> JsonDict:
    """The Events API ``event_callback`` body: the HTTP POST body in HTTP mode, the envelope payload in Socket Mode."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "context_team_id": team_id,
        "context_enterprise_id": None,
        "api_app_id": APP_ID,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id or new_event_id(),
        "event_time": event_time if event_time is not None else int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": "4-" + secrets.token_hex(16),
    }


def _sign(raw: bytes, signing_secret: str, timestamp: int | None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + raw
    digest = hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def signed_event_request(
    body: Mapping[str, Any],
    signing_secret: str,
    timestamp: int | None = None,
    *,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> tuple[bytes, dict[str, str]]:
    """A JSON Events API request signed with Slack's v0 scheme, for POSTing to the daemon's ``/slack/events``.

    ``timestamp`` defaults to now; pass an old one to test replay rejection. ``retry_num`` adds Slack's
    ``X-Slack-Retry-Num``/``X-Slack-Retry-Reason`` headers (sent on redeliveries)."""
    raw = json.dumps(body, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", **_sign(raw, signing_secret, timestamp)}
    if retry_num is not None:
        headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": retry_reason}
    return raw, headers


def signed_interactive_request(
    payload: Mapping[str, Any], signing_secret: str, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """An interactive (block_actions, view_submission...) request: form-encoded ``payload=<json>``, signed."""
    raw = urlencode({"payload": json.dumps(payload, separators=(",", ":"))}).encode()
    return raw, {"Content-Type": "application/x-www-form-urlencoded", **_sign(raw, signing_secret, timestamp)}


async def _read_params(request: web.Request) -> JsonDict:
    """Query + body params, whatever the encoding slack_sdk chose (JSON for chat.*, form or query otherwise)."""
    params: JsonDict = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        else:
            form = await request.post()
            for key, value in form.items():
                params[key] = value if isinstance(value, str) else getattr(value, "filename", "")
    for key in _JSON_PARAMS & params.keys():
        value = params[key]
        if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
            with contextlib.suppress(ValueError):
                params[key] = json.loads(value)
    return params


MAX_BLOCKS = 50


def _check_blocks(blocks: object) -> None:
    """What Slack answers `invalid_blocks` to: more than 50 blocks, a type it does not know, or a block its
    own models (slack_sdk's, which follow Block Kit's documented limits) refuse."""
    if blocks is None:
        return
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        raise SlackError("invalid_blocks")
    parsed = Block.parse_all(blocks)
    if any(block is None for block in parsed):
        raise SlackError("invalid_blocks")
    try:
        for block in parsed:
            block.validate_json()
    except SlackObjectFormationError:
        raise SlackError("invalid_blocks") from None


def _require(params: Mapping[str, Any], name: str, error: str = "invalid_arguments") -> str:
    value = params.get(name)
    if value is None or value == "":
        raise SlackError(error)
    return str(value)


# --------------------------------------------------------------------------------------------------------------
# The fake


class FakeSlack:
    """A Slack workspace (team T1, bot UBOT/BBOT, app A1) with a real HTTP Web API and a Socket Mode WebSocket.

    State worth inspecting: ``calls`` (every Web API request), ``acks``/``envelopes`` (Socket Mode), ``ephemerals``,
    ``response_url_posts``, ``assistant_statuses``, ``rate_limited``, ``random_failures``, and for several Socket
    Mode clients ``redeliveries``, ``abandoned``, ``refused_connections``, ``deliveries_per_connection()``.
    Configure ``users``/``channels`` dicts to override what ``users.info``/``conversations.info`` return."""

    def __init__(
        self,
        *,
        tokens: Collection[str] | None = None,
        poll_interval: float = 0.05,
        ws_close_timeout: float = 2.0,
        routing: Routing = "newest",
        seed: int = 0,
        redeliver_after_s: float | None = 3.0,
        redeliver_fraction: float = 0.0,
        max_connections: int = MAX_SOCKET_CONNECTIONS,
    ) -> None:
        """``tokens``: if given, only these tokens authenticate (others get ``invalid_auth``); by default any
        ``xoxb-``/``xoxp-``/``xapp-`` token is accepted. ``poll_interval`` bounds how stale ``wait_for`` can be
        for predicates over state the fake does not see change (e.g. the bot's own database).

        Socket Mode as a cluster sees it (each is also an attribute, changeable while running):
        ``routing="random"`` sends each envelope to one open session drawn from ``rng`` (``random.Random(seed)``),
        as Slack spreads envelopes over an app's connections; ``"newest"`` (the default) keeps to the session
        opened last, which is all one client ever has. An events_api envelope not acked within
        ``redeliver_after_s`` is sent again (``None``: never), at most ``MAX_EVENT_RETRIES`` times, each time to
        a session chosen the same way; ``redeliver_fraction`` of first deliveries are also sent a second time at
        once, acked or not. Interactive envelopes are never retried. A session opened while
        ``max_connections`` are open gets ``disconnect``/``too_many_websockets`` instead of ``hello``."""
        self.tokens = set(tokens) if tokens is not None else None
        self.poll_interval = poll_interval
        self.ws_close_timeout = ws_close_timeout
        self.routing: Routing = routing
        self.rng = random.Random(seed)
        self.redeliver_after_s = redeliver_after_s
        self.redeliver_fraction = redeliver_fraction
        self.max_connections = max_connections

        self.calls: list[ApiCall] = []  # answered calls, in answer order
        self.pending: list[ApiCall] = []  # calls received but not answered yet (latency / hold)
        self.users: dict[str, JsonDict] = {}
        self.channels: dict[str, JsonDict] = {}
        self.ephemerals: list[EphemeralMessage] = []
        self.assistant_statuses: list[tuple[str, str, str]] = []  # (channel, thread_ts, status), in call order
        self.rate_limited: Counter[str] = Counter()
        self.random_failures: Counter[int] = Counter()  # by HTTP status (500, 429), see ``fail_randomly``
        self.envelopes: list[SentEnvelope] = []
        self.acks: dict[str, Ack] = {}
        self.socket_messages: list[JsonDict] = []  # non-ack frames from the client
        self.connections: list[SocketConnection] = []
        self.refused_connections: list[RefusedConnection] = []
        self.redeliveries: list[Redelivery] = []
        self.abandoned: list[str] = []  # event_ids Slack stopped retrying, unacked (or with nowhere to send them)
        self._chasers: set[asyncio.Task[None]] = set()
        self.response_url_posts: list[ResponseUrlPost] = []

        self._messages: dict[tuple[str, str], StoredMessage] = {}
        self._ts_counter = 1_700_000_000_000_000  # microseconds; first ts is 1700000000.000100
        self._failures: dict[str, list[_Failure]] = {}
        self._random_failures: _RandomFailures | None = None
        self._limits: dict[str, _RateLimit] = {}
        self._latency: dict[str, float] = {}
        self._holds: dict[str, asyncio.Event] = {}
        self._holds_after: dict[str, asyncio.Event] = {}
        self._stalls: dict[str, list[_Stall]] = {}
        self._stop = asyncio.Event()
        self.stalled: list[ApiCall] = []  # calls accepted and never answered (see ``stall``)
        self._response_urls: dict[str, tuple[str, str]] = {}
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._handlers: dict[str, Callable[[JsonDict, str | None], JsonDict]] = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._apps_connections_open,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.delete": self._chat_delete,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.getPermalink": self._chat_get_permalink,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "conversations.info": self._conversations_info,
            "users.info": self._users_info,
            "assistant.threads.setStatus": self._assistant_set_status,
        }
        self.files = FakeFiles(self)  # files.*, file downloads and uploads: see fakes/slack_files.py
        self._handlers |= self.files.handlers()
        self.agent = FakeAgentSurface(self)  # views.publish, suggested prompts, titles: see fakes/slack_agent.py
        self._handlers |= self.agent.handlers()
        self.streams = FakeStreams(self)  # chat.startStream / appendStream / stopStream: see fakes/slack_streams.py
        self._handlers |= self.streams.handlers()

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind 127.0.0.1 on a free port and serve ``/api/<method>``, ``/link`` (WebSocket) and response URLs."""
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_get("/link", self._handle_ws)
        app.router.add_post("/response_url/{id}", self._handle_response_url)
        self.files.add_routes(app)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Close every WebSocket (so clients see a CLOSE, not a hang), release held calls, stop the server."""
        for event in (*self._holds.values(), *self._holds_after.values()):
            event.set()
        self._stop.set()
        for task in self._chasers:
            task.cancel()
        await asyncio.gather(*self._chasers, return_exceptions=True)
        await self.drop_connections(code=WSCloseCode.GOING_AWAY)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def api_url(self) -> str:
        """Web API base for ``AsyncWebClient(base_url=...)`` / ``SLACK_API_URL``; ends with ``/api/``."""
        return f"{self.base_url}/api/"

    # ---- observation --------------------------------------------------------------------------------------

    def _notify(self) -> None:
        """Wake every ``wait_for``. An Event swapped per change (not a Condition) so sync code can notify too."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_for(
        self,
        predicate: Callable[[], T | None],
        timeout: float = 10.0,  # noqa: ASYNC109 - a deadline is the point of this helper
        description: str | None = None,
    ) -> T:
        """Wait until ``predicate()`` is truthy and return its value; re-checked on every fake state change.

        Raises TimeoutError naming the predicate and the last API calls, so a failing e2e test says what happened."""
        value = await self._poll(predicate, timeout)
        if value is None:
            what = description or getattr(predicate, "__qualname__", repr(predicate))
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}; {self.describe_recent()}")
        return value

    async def _poll(self, predicate: Callable[[], T | None], timeout: float) -> T | None:  # noqa: ASYNC109
        """``predicate()``'s first truthy value within ``timeout``, else None."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, self.poll_interval)):
                    await changed.wait()

    def describe_recent(self, n: int = 10) -> str:
        """A one-line summary of the last ``n`` API calls and socket state, for assertion messages."""
        calls = ", ".join(
            f"{c.method}({c.status}{'' if c.ok else ' ' + str(c.response.get('error'))})" for c in self.calls[-n:]
        )
        return (
            f"last calls: [{calls}]; open connections: {len(self.open_connections)}; "
            f"unacked envelopes: {[e.envelope_id for e in self.unacked()]}"
        )

    def calls_to(self, method: str) -> list[ApiCall]:
        """All recorded calls of one API method, in arrival order (including failed/rate-limited ones)."""
        return [c for c in self.calls if c.method == method]

    def message(self, channel: str, ts: str) -> StoredMessage:
        """The stored message (current content, even if deleted); KeyError if it never existed."""
        return self._messages[(channel, ts)]

    def messages(self, channel: str, thread_ts: str | None = None) -> list[StoredMessage]:
        """Non-deleted messages of a channel (or of one thread: root + replies), oldest first, edits applied."""
        found = [
            m
            for m in self._messages.values()
            if m.channel == channel and not m.deleted and (thread_ts is None or m.thread_root == thread_ts)
        ]
        return sorted(found, key=lambda m: _ts_key(m.ts))

    def posts_in_thread(self, channel: str, thread_ts: str) -> list[StoredMessage]:
        """The bot's (non-deleted) messages in a thread, oldest first."""
        return [m for m in self.messages(channel, thread_ts) if m.is_bot]

    def reactions_on(self, channel: str, ts: str) -> dict[str, list[str]]:
        """Current reactions on a message: emoji name -> users who reacted."""
        return self._messages[(channel, ts)].reactions

    def assistant_status(self, channel: str, thread_ts: str) -> str | None:
        """The last status set via assistant.threads.setStatus for a thread ("" means cleared)."""
        for ch, ts, status in reversed(self.assistant_statuses):
            if (ch, ts) == (channel, thread_ts):
                return status
        return None

    # ---- failure injection --------------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        status: int = 429,
        retry_after: int | None = 1,
        times: int | None = 1,
        error: str | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail (``times=None``: until ``clear_failures``).

        429 answers ``{"ok": false, "error": "ratelimited"}`` with ``Retry-After`` (what slack_sdk's
        RateLimitErrorRetryHandler sleeps on; note it only reads the header's first digit). ``status=200`` with
        ``error="channel_not_found"`` injects an API-level error; 5xx answers ``fatal_error``. Failed calls have no
        side effects. Injections queue up in order."""
        if error is None:
            error = "ratelimited" if status == 429 else "fatal_error" if status >= 500 else "invalid_arguments"
        self._failures.setdefault(method, []).append(_Failure(status, error, retry_after, times))

    def clear_failures(self, method: str | None = None) -> None:
        """Drop pending failure injections (of one method, or all)."""
        if method is None:
            self._failures.clear()
        else:
            self._failures.pop(method, None)

    def fail_randomly(self, methods_prefix: str = "chat.", rate: float = 0.2, seed: int = 0) -> None:
        """A storm: each call of a method starting with ``methods_prefix`` fails with probability ``rate``, half of
        the failures as 500 ``fatal_error``, half as 429 ``ratelimited`` with ``Retry-After: 1``. Failed calls have
        no side effects and are counted in ``random_failures`` by status. The draws come from ``random.Random(seed)``
        in arrival order, so one seed gives one sequence of outcomes. ``rate=0`` ends the storm."""
        self._random_failures = _RandomFailures(methods_prefix, rate, random.Random(seed)) if rate > 0 else None

    def rate_limit(
        self,
        method: str,
        per_minute: float = 50,
        burst: int | None = None,
        *,
        retry_after: int | None = None,
        per_channel: bool = False,
        time_scale: float = 1.0,
    ) -> None:
        """Token-bucket limit on ``method``: ``burst`` calls at once (default: one minute's worth), refilled at
        ``per_minute``. Excess calls get 429 + ``Retry-After`` (whole seconds to the next token, ≥1, or the
        ``retry_after`` override) and are counted in ``rate_limited[method]``. ``per_channel`` keys buckets by
        the ``channel`` param (chat.postMessage's real limit). ``time_scale=60`` makes a minute pass in a second."""
        capacity = burst if burst is not None else max(1, int(per_minute))
        self._limits[method] = _RateLimit(per_minute, capacity, retry_after, per_channel, time_scale)

    def limit_posts_like_slack(self, burst: int = 10, *, time_scale: float = 1.0) -> None:
        """``chat.postMessage`` as Slack limits it: about one post a second in each channel, short bursts allowed
        (about ten, as observed); beyond that 429 with ``Retry-After`` in whole seconds (≥1, unscaled).
        ``time_scale=10`` makes it ten a second (for quick tests)."""
        self.rate_limit("chat.postMessage", per_minute=60, burst=burst, per_channel=True, time_scale=time_scale)

    def set_latency(self, method: str, seconds: float) -> None:
        """Delay every answer of ``method`` (0 to reset), e.g. to test the bot's timeouts or overlapping calls."""
        self._latency[method] = seconds

    def hold(self, method: str, *, after: bool = False) -> asyncio.Event:
        """Block calls of ``method`` (before any side effect) until the returned event is set.

        ``after=True`` holds the answer instead: the call takes effect (a message is stored) but the client
        hears nothing until the event is set — a client killed meanwhile never learns that it landed."""
        event = asyncio.Event()
        (self._holds_after if after else self._holds)[method] = event
        return event

    def stall(
        self, method: str, matching: Callable[[JsonDict], bool] = lambda params: True, times: int | None = 1
    ) -> None:
        """Accept the next ``times`` calls of ``method`` whose params match, and never answer them (``times=None``:
        until ``clear_stalls``): the connection stays open and silent, as with a server that hangs. The client
        sees nothing until its own timeout; such calls are listed in ``stalled`` and have no side effects."""
        self._stalls.setdefault(method, []).append(_Stall(matching, times))

    def clear_stalls(self) -> None:
        self._stalls.clear()

    def _stalls_call(self, method: str, params: JsonDict) -> bool:
        for stall in self._stalls.get(method, []):
            if stall.matches(params):
                if stall.remaining is not None:
                    stall.remaining -= 1
                    if stall.remaining <= 0:
                        self._stalls[method].remove(stall)
                return True
        return False

    def _injected_failure(self, method: str) -> tuple[int, JsonDict, dict[str, str]] | None:
        queue = self._failures.get(method)
        if not queue:
            return None
        failure = queue[0]
        if failure.remaining is not None:
            failure.remaining -= 1
            if failure.remaining <= 0:
                queue.pop(0)
        headers = {"Retry-After": str(failure.retry_after)} if failure.status == 429 and failure.retry_after else {}
        return failure.status, {"ok": False, "error": failure.error}, headers

    def _random_failure(self, method: str) -> tuple[int, JsonDict, dict[str, str]] | None:
        storm = self._random_failures
        if storm is None or not method.startswith(storm.prefix):
            return None
        draw = storm.rng.random()
        if draw >= storm.rate:
            return None
        status = 500 if draw < storm.rate / 2 else 429
        self.random_failures[status] += 1
        if status == 500:
            return 500, {"ok": False, "error": "fatal_error"}, {}
        return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"}

    def _rate_limited(self, method: str, params: JsonDict) -> tuple[int, JsonDict, dict[str, str]] | None:
        limit = self._limits.get(method)
        if limit is None:
            return None
        key = str(params.get("channel", "")) if limit.per_channel else ""
        now = time.monotonic()
        bucket = limit.buckets.get(key)
        if bucket is None:
            rate = limit.per_minute / 60.0 * limit.time_scale
            bucket = limit.buckets[key] = _TokenBucket(rate, limit.burst, limit.burst, now, limit.retry_after)
        wait = bucket.take(now)
        if wait is None:
            return None
        retry_after = bucket.retry_after if bucket.retry_after is not None else max(1, math.ceil(wait))
        return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)}

    # ---- Web API ------------------------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.Response:
        """Record the call as in flight (``pending``), apply latency/hold, answer, then move it to ``calls``."""
        arrived = time.perf_counter()
        params = await _read_params(request)
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else params.get("token")
        params.pop("token", None)
        call = ApiCall(request.match_info["method"], params, arrived, token=token, http_method=request.method)
        if self._stalls_call(call.method, params):
            self.stalled.append(call)
            self._notify()
            await self._stop.wait()  # cancelled when the client gives up and closes the connection
            raise web.HTTPServiceUnavailable()
        self.pending.append(call)
        self._notify()
        try:
            if self._latency.get(call.method):
                await asyncio.sleep(self._latency[call.method])
            if call.method in self._holds:
                await self._holds[call.method].wait()
            call.status, call.response, headers = self._respond(call.method, params, token)
            if call.method in self._holds_after:
                await self._holds_after[call.method].wait()
        finally:
            self.pending.remove(call)
        self.calls.append(call)
        if call.status == 429:
            self.rate_limited[call.method] += 1
        self._notify()
        return web.json_response(call.response, status=call.status, headers=headers)

    def _respond(self, method: str, params: JsonDict, token: str | None) -> tuple[int, JsonDict, dict[str, str]]:
        early = self._injected_failure(method) or self._random_failure(method) or self._rate_limited(method, params)
        if early is not None:
            return early
        try:
            self._authenticate(method, token)
            handler = self._handlers.get(method)
            if handler is None:
                raise SlackError("unknown_method", req_method=method)
            result = handler(params, token)
        except SlackError as e:
            return 200, {"ok": False, "error": e.error, **e.extra}, {}
        return 200, {"ok": True, **result}, {}

    def _authenticate(self, method: str, token: str | None) -> None:
        if not token:
            raise SlackError("not_authed")
        if self.tokens is not None and token not in self.tokens:
            raise SlackError("invalid_auth")
        if not token.startswith(("xoxb-", "xoxp-", "xapp-")):
            raise SlackError("invalid_auth")
        is_app_token = token.startswith("xapp-")
        if (method == "apps.connections.open") != is_app_token and method != "auth.test":
            raise SlackError("not_allowed_token_type")

    def _next_ts(self) -> str:
        self._ts_counter += 100
        return f"{self._ts_counter // 1_000_000}.{self._ts_counter % 1_000_000:06d}"

    def _claim_ts(self, ts: str | None) -> str:
        """A fresh ts, or the caller's one (keeping later generated ts strictly increasing past it)."""
        if ts is None:
            return self._next_ts()
        sec, micro = _ts_key(ts)
        self._ts_counter = max(self._ts_counter, sec * 1_000_000 + micro)
        return ts

    def _store(self, message: StoredMessage) -> StoredMessage:
        message.history.append(Revision(message.text, message.blocks, time.perf_counter()))
        self._messages[(message.channel, message.ts)] = message
        self._notify()
        return message

    def _find(self, params: JsonDict, ts_param: str = "ts") -> StoredMessage:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, ts_param, "message_not_found" if ts_param == "ts" else "no_item_specified")
        message = self._messages.get((channel, ts))
        if message is None or message.deleted:
            raise SlackError("message_not_found")
        return message

    def _auth_test(self, params: JsonDict, token: str | None) -> JsonDict:
        return {
            "url": f"https://{TEAM_DOMAIN}.slack.com/",
            "team": "Threadbot Test",
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _apps_connections_open(self, params: JsonDict, token: str | None) -> JsonDict:
        ticket = uuid.uuid4().hex
        return {"url": f"ws://127.0.0.1:{self._port}/link?ticket={ticket}&app_id={APP_ID}"}

    def _check_postable(self, channel: str, params: JsonDict) -> None:
        if self.channels.get(channel, {}).get("is_member") is False:
            raise SlackError("not_in_channel")
        if not (params.get("text") or params.get("blocks") or params.get("attachments")):
            raise SlackError("no_text")
        _check_blocks(params.get("blocks"))

    def _chat_post_message(self, params: JsonDict, token: str | None) -> JsonDict:
        channel = _require(params, "channel", "channel_not_found")
        self._check_postable(channel, params)
        message = self._store(
            StoredMessage(
                channel=channel,
                ts=self._next_ts(),
                text=str(params.get("text") or ""),
                user=BOT_USER_ID,
                thread_ts=params.get("thread_ts") or None,
                blocks=params.get("blocks"),
                bot_id=BOT_ID,
                extra={k: v for k, v in params.items() if k not in _MESSAGE_FIELDS},
            )
        )
        return {"channel": channel, "ts": message.ts, "message": message.to_api()}

    def _revise(self, message: StoredMessage, text: str | None, blocks: list[JsonDict] | None) -> None:
        if text is not None:
            message.text = text
        if blocks is not None:
            message.blocks = blocks
        message.history.append(Revision(message.text, message.blocks, time.perf_counter()))

    def _chat_update(self, params: JsonDict, token: str | None) -> JsonDict:
        message = self._find(params)
        if not message.is_bot:
            raise SlackError("cant_update_message")
        if "text" not in params and "blocks" not in params and "attachments" not in params:
            raise SlackError("no_text")
        _check_blocks(params.get("blocks"))
        text = params.get("text")
        self._revise(message, None if text is None else str(text), params.get("blocks"))
        return {"channel": message.channel, "ts": message.ts, "text": message.text, "message": message.to_api()}

    def _chat_delete(self, params: JsonDict, token: str | None) -> JsonDict:
        message = self._find(params)
        if not message.is_bot:
            raise SlackError("cant_delete_message")
        message.deleted = True
        return {"channel": message.channel, "ts": message.ts}

    def _chat_post_ephemeral(self, params: JsonDict, token: str | None) -> JsonDict:
        channel = _require(params, "channel", "channel_not_found")
        user = _require(params, "user", "user_not_in_channel")
        self._check_postable(channel, params)
        ts = self._next_ts()
        self.ephemerals.append(
            EphemeralMessage(
                channel=channel,
                user=user,
                text=str(params.get("text") or ""),
                blocks=params.get("blocks"),
                thread_ts=params.get("thread_ts") or None,
                message_ts=ts,
                time=time.perf_counter(),
            )
        )
        return {"message_ts": ts}

    def _chat_get_permalink(self, params: JsonDict, token: str | None) -> JsonDict:
        message = self._find(params, "message_ts")
        link = f"https://{TEAM_DOMAIN}.slack.com/archives/{message.channel}/p{message.ts.replace('.', '')}"
        return {"channel": message.channel, "permalink": link}

    def _reaction_target(self, params: JsonDict) -> tuple[StoredMessage, str]:
        message = self._find(params, "timestamp")
        name = _require(params, "name", "invalid_name").strip(":")
        return message, name

    def _reactions_add(self, params: JsonDict, token: str | None) -> JsonDict:
        message, name = self._reaction_target(params)
        users = message.reactions.setdefault(name, [])
        if BOT_USER_ID in users:
            raise SlackError("already_reacted")
        users.append(BOT_USER_ID)
        return {}

    def _reactions_remove(self, params: JsonDict, token: str | None) -> JsonDict:
        message, name = self._reaction_target(params)
        users = message.reactions.get(name, [])
        if BOT_USER_ID not in users:
            raise SlackError("no_reaction")
        users.remove(BOT_USER_ID)
        if not users:
            del message.reactions[name]
        return {}

    @staticmethod
    def _window(messages: list[StoredMessage], params: JsonDict) -> list[StoredMessage]:
        """Apply oldest/latest/inclusive like conversations.history/replies."""
        inclusive = _truthy(params.get("inclusive", False))
        out = messages
        if params.get("oldest"):
            lo = _ts_key(str(params["oldest"]))
            out = [m for m in out if _ts_key(m.ts) > lo or (inclusive and _ts_key(m.ts) == lo)]
        if params.get("latest"):
            hi = _ts_key(str(params["latest"]))
            out = [m for m in out if _ts_key(m.ts) < hi or (inclusive and _ts_key(m.ts) == hi)]
        return out

    @staticmethod
    def _page(items: list[JsonDict], params: JsonDict) -> JsonDict:
        """Cursor pagination (the cursor is an opaque offset), so SDK iteration over pages works."""
        start = int(params.get("cursor") or 0)
        limit = int(params.get("limit") or 1000) or 1000
        page = items[start : start + limit]
        more = start + limit < len(items)
        return {
            "messages": page,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _thread_json(self, root: StoredMessage, replies: list[StoredMessage], *, metadata: bool) -> JsonDict:
        out = root.to_api(metadata=metadata)
        if replies:
            out |= {
                "thread_ts": root.ts,
                "reply_count": len(replies),
                "reply_users": sorted({r.user for r in replies}),
                "reply_users_count": len({r.user for r in replies}),
                "latest_reply": replies[-1].ts,
            }
        return out

    def _conversations_replies(self, params: JsonDict, token: str | None) -> JsonDict:
        channel = _require(params, "channel", "channel_not_found")
        ts = _require(params, "ts", "thread_not_found")
        thread = self.messages(channel, ts)
        root = next((m for m in thread if m.ts == ts), None)
        if root is None:
            raise SlackError("thread_not_found")
        replies = [m for m in thread if m is not root]
        metadata = _truthy(params.get("include_all_metadata", False))
        # The parent always comes first, whatever the oldest/latest window (as on real Slack).
        shown = [m.to_api(metadata=metadata) | {"parent_user_id": root.user} for m in self._window(replies, params)]
        items = [self._thread_json(root, replies, metadata=metadata), *shown]
        return self._page(items, params)

    def _conversations_history(self, params: JsonDict, token: str | None) -> JsonDict:
        channel = _require(params, "channel", "channel_not_found")
        top = [m for m in self.messages(channel) if m.thread_root == m.ts]
        metadata = _truthy(params.get("include_all_metadata", False))
        items = [
            self._thread_json(m, [r for r in self.messages(channel, m.ts) if r is not m], metadata=metadata)
            for m in reversed(self._window(top, params))
        ]
        return self._page(items, params)

    def _conversations_info(self, params: JsonDict, token: str | None) -> JsonDict:
        channel = _require(params, "channel", "channel_not_found")
        info: JsonDict = {
            "id": channel,
            "name": channel.lower(),
            "is_channel": channel.startswith("C"),
            "is_group": channel.startswith("G"),
            "is_im": channel.startswith("D"),
            "is_private": channel.startswith(("G", "D")),
            "is_archived": False,
            "is_member": True,
            "context_team_id": TEAM_ID,
        }
        if channel.startswith("D"):
            info["user"] = "U1"
        info.update(self.channels.get(channel, {}))
        if info.get("not_found"):
            raise SlackError("channel_not_found")
        return {"channel": info}

    def _users_info(self, params: JsonDict, token: str | None) -> JsonDict:
        uid = _require(params, "user", "user_not_found")
        override = self.users.get(uid, {})
        if override.get("not_found"):
            raise SlackError("user_not_found")
        tz = str(override.get("tz", "UTC"))
        try:
            offset = datetime.now(ZoneInfo(tz)).utcoffset()
        except ZoneInfoNotFoundError:
            offset = None
        name = str(override.get("name", "threadbot" if uid == BOT_USER_ID else f"user_{uid.lower()}"))
        user: JsonDict = {
            "id": uid,
            "team_id": self.team_of(uid),
            "name": name,
            "real_name": name.title(),
            "deleted": False,
            "tz": tz,
            "tz_label": tz,
            "tz_offset": int(offset.total_seconds()) if offset is not None else 0,
            "is_bot": uid == BOT_USER_ID,
            "is_admin": False,
            "updated": int(datetime.now(UTC).timestamp()),
            "profile": {
                "display_name": name,
                "real_name": name.title(),
                "bot_id": BOT_ID if uid == BOT_USER_ID else None,
            },
        }
        profile = override.get("profile", {})
        user.update({k: v for k, v in override.items() if k != "profile"})
        user["profile"] |= profile
        return {"user": user}

    def _assistant_set_status(self, params: JsonDict, token: str | None) -> JsonDict:
        channel = _require(params, "channel_id", "channel_not_found")
        thread_ts = _require(params, "thread_ts")
        if "status" not in params:
            raise SlackError("invalid_arguments")
        self.assistant_statuses.append((channel, thread_ts, str(params["status"])))
        return {}

    # ---- response_url ---------------------------------------------------------------------------------------

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        """bolt's ``respond()``: records the body and applies replace_original / delete_original like Slack."""
        target = self._response_urls.get(request.match_info["id"])
        if target is None:
            return web.Response(status=404, text="expired_url", content_type="text/plain")
        body: JsonDict = (
            await request.json() if request.content_type == "application/json" else dict(await request.post())
        )
        channel, ts = target
        self.response_url_posts.append(ResponseUrlPost(channel, ts, body, time.perf_counter()))
        message = self._messages.get(target)
        if message is not None and not message.deleted:
            if _truthy(body.get("delete_original", False)):
                message.deleted = True
            elif _truthy(body.get("replace_original", False)):
                self._revise(message, body.get("text"), body.get("blocks"))
        self._notify()
        return web.Response(text="ok", content_type="text/plain")

    # ---- test-side builders ----------------------------------------------------------------------------------

    def user_message(
        self,
        channel: str,
        text: str,
        user: str = "U1",
        thread_ts: str | None = None,
        ts: str | None = None,
        channel_type: str | None = None,
    ) -> JsonDict:
        """Post ``text`` as ``user`` (stored in the history, so conversations.replies sees it) and return the
        ``message`` event Slack would deliver. ``channel_type`` defaults from the id: D→im, G→group, else channel."""
        message = self._store_user_message(channel, text, user, thread_ts, ts)
        event = self._message_event("message", message)
        event["channel_type"] = channel_type or (
            "im" if channel.startswith("D") else "group" if channel[:1] == "G" else "channel"
        )
        return event

    def mention(
        self, channel: str, text: str, user: str = "U1", thread_ts: str | None = None, ts: str | None = None
    ) -> JsonDict:
        """Like ``user_message`` but returns an ``app_mention`` event; ``<@UBOT>`` is prepended if not in the text."""
        if f"<@{BOT_USER_ID}>" not in text:
            text = f"<@{BOT_USER_ID}> {text}"
        return self._message_event("app_mention", self._store_user_message(channel, text, user, thread_ts, ts))

    def message_deleted(self, channel: str, ts: str) -> JsonDict:
        """A person deletes their message: it is marked deleted, and the ``message_deleted`` event Slack sends is
        returned (``hidden``, ``deleted_ts``, and the message as it was in ``previous_message``)."""
        message = self._messages[(channel, ts)]
        previous = {"type": "message", "user": message.user, "text": message.text, "ts": message.ts}
        if message.thread_ts:
            previous["thread_ts"] = message.thread_ts
        message.deleted = True
        now = self._claim_ts(None)
        return {
            "type": "message",
            "subtype": "message_deleted",
            "hidden": True,
            "channel": channel,
            "ts": now,
            "event_ts": now,
            "deleted_ts": ts,
            "previous_message": previous,
        }

    def reaction_added(self, user: str, reaction: str, channel: str, ts: str) -> JsonDict:
        """A ``reaction_added`` event; the reaction is also recorded on the stored message if it exists."""
        message = self._messages.get((channel, ts))
        if message is not None:
            users = message.reactions.setdefault(reaction, [])
            if user not in users:
                users.append(user)
            self._notify()
        return {
            "type": "reaction_added",
            "user": user,
            "reaction": reaction,
            "item": {"type": "message", "channel": channel, "ts": ts},
            "item_user": message.user if message is not None else "U1",
            "user_team": self.team_of(user),
            "event_ts": self._next_ts(),
        }

    def block_action(
        self,
        channel: str,
        message_ts: str,
        action_id: str,
        value: str | None = None,
        *,
        user: str = "U1",
        block_id: str = "actions",
    ) -> JsonDict:
        """A ``block_actions`` payload for a button click on a stored message (for ``send_interactive``).
        Its ``response_url`` points at the fake, which applies replace/delete_original to the message."""
        message = self._messages[(channel, message_ts)]
        url_id = uuid.uuid4().hex
        self._response_urls[url_id] = (channel, message_ts)
        container: JsonDict = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        action: JsonDict = {
            "action_id": action_id,
            "block_id": block_id,
            "type": "button",
            "action_ts": self._next_ts(),
        }
        if value is not None:
            action |= {"value": value, "text": {"type": "plain_text", "text": value}}
        return {
            **self.block_action_base(user),
            "container": container,
            "channel": {"id": channel, "name": channel.lower()},
            "message": message.to_api(),
            "state": {"values": {}},
            "response_url": f"{self.base_url}/response_url/{url_id}",
            "actions": [action],
        }

    def block_action_base(self, user: str) -> JsonDict:
        """What every ``block_actions`` payload carries, wherever the button was: who clicked, the app, the team."""
        return {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": f"user_{user.lower()}",
                "name": f"user_{user.lower()}",
                "team_id": self.team_of(user),
            },
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "trigger_id": f"{secrets.randbelow(10**10)}.{secrets.token_hex(8)}",
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "enterprise": None,
            "is_enterprise_install": False,
        }

    def _store_user_message(
        self, channel: str, text: str, user: str, thread_ts: str | None, ts: str | None
    ) -> StoredMessage:
        message = StoredMessage(
            channel=channel,
            ts=self._claim_ts(ts),
            text=text,
            user=user,
            thread_ts=thread_ts,
            user_team=self.team_of(user),
        )
        return self._store(message)

    def team_of(self, user: str) -> str:
        """A person's own team: the workspace's, unless ``users`` gives them another (``team_id``)."""
        return str(self.users.get(user, {}).get("team_id", TEAM_ID))

    def _message_event(self, event_type: str, message: StoredMessage) -> JsonDict:
        event: JsonDict = {
            "type": event_type,
            "channel": message.channel,
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "event_ts": message.ts,
            "team": TEAM_ID,
            "user_team": message.user_team,
            "source_team": message.user_team,
            "client_msg_id": str(uuid.uuid4()),
        }
        if message.thread_ts:
            root = self._messages.get((message.channel, message.thread_ts))
            event |= {"thread_ts": message.thread_ts, "parent_user_id": root.user if root else "U1"}
        return event

    # ---- Socket Mode ----------------------------------------------------------------------------------------

    @property
    def open_connections(self) -> list[SocketConnection]:
        """Currently open Socket Mode sessions, oldest first."""
        return [c for c in self.connections if c.open]

    async def _handle_ws(self, request: web.Request) -> web.WebSocketResponse:
        """A Socket Mode session: hello on connect, then record acks until either side closes.
        Pings from the SDK (``sdk-ping-pong:<t>``) are answered with the same payload, unless the test turned
        ``answers_pings`` off on the connection. Beyond ``max_connections`` open ones, the session is refused."""
        ws = web.WebSocketResponse(autoping=False, timeout=self.ws_close_timeout)
        await ws.prepare(request)
        ticket = request.query.get("ticket", "")
        if len(self.open_connections) >= self.max_connections:
            await self._refuse(ws, ticket, "too_many_websockets")
            return ws
        conn = SocketConnection(len(self.connections) + 1, ticket, ws, time.perf_counter())
        self.connections.append(conn)
        hello = {
            "type": "hello",
            "num_connections": len(self.open_connections),
            "debug_info": {"host": f"applink-fake-{conn.id}", "build_number": 1, "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID},
        }
        try:
            await ws.send_str(json.dumps(hello))
            self._notify()
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_client_frame(conn, msg.data)
                elif msg.type == WSMsgType.PING and conn.answers_pings:
                    await ws.pong(msg.data)
        finally:
            conn.closed_at = time.perf_counter()
            self._notify()
        return ws

    async def _refuse(self, ws: web.WebSocketResponse, ticket: str, reason: str) -> None:
        """What Slack sends the 11th session of an app: ``disconnect`` where ``hello`` would be, then a close.
        slack_sdk answers a ``disconnect`` by fetching a new URL and connecting again at once, so a refused
        client keeps knocking (each attempt recorded) until a session closes and it gets in."""
        self.refused_connections.append(RefusedConnection(ticket, reason, time.perf_counter()))
        self._notify()
        frame = {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}}
        with contextlib.suppress(ConnectionError, TimeoutError):
            await ws.send_str(json.dumps(frame))
            await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=reason.encode())

    def _on_client_frame(self, conn: SocketConnection, data: str) -> None:
        try:
            frame = json.loads(data)
        except ValueError:
            frame = {"raw": data}
        if isinstance(frame, dict) and "envelope_id" in frame:
            envelope_id = str(frame["envelope_id"])
            self.acks.setdefault(envelope_id, Ack(envelope_id, time.perf_counter(), frame.get("payload"), conn.id))
        else:
            self.socket_messages.append(frame if isinstance(frame, dict) else {"raw": frame})
        self._notify()

    async def wait_connected(
        self,
        timeout: float = 10.0,  # noqa: ASYNC109 - a deadline is the point of this helper
        *,
        total: int = 1,
    ) -> SocketConnection:
        """Wait until a session is open (hello sent) and at least ``total`` sessions were ever opened
        (``total=2`` after ``drop_connections()`` waits for the reconnect). Returns the newest open session."""

        def ready() -> SocketConnection | None:
            live = self.open_connections
            return live[-1] if live and len(self.connections) >= total else None

        return await self.wait_for(ready, timeout, f"a Socket Mode connection (total>={total})")

    async def send_envelope(
        self,
        envelope_type: str,
        payload: JsonDict,
        *,
        accepts_response_payload: bool = False,
        extra: Mapping[str, Any] | None = None,
        connect_timeout: float = 10.0,
    ) -> str:
        """Push any envelope (events_api, interactive, slash_commands...) on one open session (see ``routing``),
        waiting for one if the client is (re)connecting. Returns the envelope_id to ``wait_ack`` on. Sent as
        is, once: Slack's retries of events come with ``send_event``."""
        sent = await self._send(envelope_type, payload, accepts_response_payload, extra or {}, connect_timeout)
        return sent.envelope_id

    async def _send(
        self,
        envelope_type: str,
        payload: JsonDict,
        accepts_response_payload: bool,
        extra: Mapping[str, Any],
        connect_timeout: float,
    ) -> SentEnvelope:
        body: JsonDict = {
            "envelope_id": str(uuid.uuid4()),
            "payload": payload,
            "type": envelope_type,
            "accepts_response_payload": accepts_response_payload,
            **extra,
        }
        raw = json.dumps(body)
        while True:
            conn = await self._route(connect_timeout)
            sent = SentEnvelope(body["envelope_id"], envelope_type, body, time.perf_counter(), conn.id)
            self.envelopes.append(sent)
            try:
                await conn.ws.send_str(raw)
            except ConnectionError:
                self.envelopes.remove(sent)
                conn.closed_at = conn.closed_at or time.perf_counter()
                continue
            self._notify()
            return sent

    async def _route(self, connect_timeout: float) -> SocketConnection:
        """The session the next envelope goes to; waits up to ``connect_timeout`` for one to be open."""
        newest = await self.wait_connected(connect_timeout)
        return newest if self.routing == "newest" else self.rng.choice(self.open_connections)

    async def send_event(
        self,
        event: Mapping[str, Any],
        *,
        event_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str = "timeout",
        team_id: str = TEAM_ID,
        connect_timeout: float = 10.0,
    ) -> str:
        """Deliver an Events API event exactly as Slack wraps it, and retry it as Slack does (see the constructor:
        ``redeliver_after_s``, ``redeliver_fraction``). Reuse ``event_id`` with ``retry_num`` to simulate one of
        Slack's retries by hand. Returns the envelope_id of this first send."""
        payload = event_callback_body(event, event_id=event_id, team_id=team_id)
        extra = {"retry_attempt": retry_num or 0, "retry_reason": retry_reason if retry_num else ""}
        chain = [await self._send("events_api", payload, False, extra, connect_timeout)]
        duplicate = self.redeliver_fraction > 0 and self.rng.random() < self.redeliver_fraction
        if duplicate and chain[0].retry_attempt < MAX_EVENT_RETRIES:
            chain.append(await self._retry(chain[0], "duplicate"))
        if self.redeliver_after_s is not None:
            task = asyncio.create_task(self._chase(chain))
            self._chasers.add(task)
            task.add_done_callback(self._chasers.discard)
        return chain[0].envelope_id

    async def _chase(self, chain: list[SentEnvelope]) -> None:
        """Slack's side of one event: send it again until one of its envelopes is acked, or give up."""
        while (after_s := self.redeliver_after_s) is not None:
            if await self._poll(lambda: any(e.envelope_id in self.acks for e in chain), after_s):
                return
            if chain[-1].retry_attempt >= MAX_EVENT_RETRIES:
                break
            try:
                chain.append(await self._retry(chain[-1], "timeout"))
            except TimeoutError:  # no session open for as long as Slack waits for an ack
                break
        if not any(e.envelope_id in self.acks for e in chain):
            self.abandoned.append(str(chain[0].event_id))
            self._notify()

    async def _retry(self, last: SentEnvelope, cause: str) -> SentEnvelope:
        """A new envelope of the same event (same ``event_id``), ``retry_attempt`` one up."""
        attempt = last.retry_attempt + 1
        extra = {"retry_attempt": attempt, "retry_reason": "timeout"}
        sent = await self._send(last.type, last.body["payload"], False, extra, self.redeliver_after_s or 10.0)
        self.redeliveries.append(Redelivery(str(last.event_id), sent.envelope_id, attempt, cause, sent.time))
        self._notify()
        return sent

    async def redeliver(self, envelope_id: str, reason: str = "timeout") -> str:
        """Resend an events_api envelope the way Slack retries: new envelope_id, same event_id, retry_attempt+1."""
        old = next(e for e in self.envelopes if e.envelope_id == envelope_id)
        attempt = int(old.body.get("retry_attempt") or 0) + 1
        extra = {"retry_attempt": attempt, "retry_reason": reason}
        return await self.send_envelope(old.type, old.body["payload"], extra=extra)

    async def send_interactive(self, payload: Mapping[str, Any]) -> str:
        """Deliver an interactive payload (e.g. from ``block_action``); returns the envelope_id. Never retried."""
        return await self.send_envelope("interactive", dict(payload), accepts_response_payload=False)

    async def wait_ack(self, envelope_id: str, timeout: float = 5.0) -> float:  # noqa: ASYNC109
        """Wait for the client's ack of an envelope; returns the ack latency in seconds."""
        ack = await self.wait_for(lambda: self.acks.get(envelope_id), timeout, f"ack of envelope {envelope_id}")
        sent = next(e for e in self.envelopes if e.envelope_id == envelope_id)
        return ack.time - sent.time

    def unacked(self) -> list[SentEnvelope]:
        """Envelopes sent but not (yet) acknowledged."""
        return [e for e in self.envelopes if e.envelope_id not in self.acks]

    def envelopes_of(self, event_id: str) -> list[SentEnvelope]:
        """Every envelope that carried one event (the first delivery and Slack's retries), in sending order."""
        return [e for e in self.envelopes if e.event_id == event_id]

    def event_acked(self, event_id: str) -> bool:
        """True once any envelope of the event was acked: then Slack counts it delivered and stops retrying."""
        return any(e.envelope_id in self.acks for e in self.envelopes_of(event_id))

    def acked_by(self, envelope_id: str) -> int | None:
        """The id of the session whose client acked the envelope; None while unacked."""
        ack = self.acks.get(envelope_id)
        return ack.connection_id if ack is not None else None

    def deliveries_per_connection(self) -> Counter[int]:
        """Envelopes sent, by session id (retries included)."""
        return Counter(e.connection_id for e in self.envelopes)

    async def request_reconnect(self, reason: str = "refresh_requested") -> None:
        """Send Slack's ``disconnect`` message on every open session; the SDK then calls apps.connections.open
        and opens a new session (what Slack does periodically, and every ~6 min with debug_reconnects)."""
        frame = json.dumps({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}})
        for conn in self.open_connections:
            with contextlib.suppress(ConnectionError):
                await conn.ws.send_str(frame)

    async def drop_connections(self, code: int = WSCloseCode.GOING_AWAY) -> None:
        """Close every open session from the server side (a CLOSE frame); the SDK's auto-reconnect kicks in."""
        for conn in self.open_connections:
            with contextlib.suppress(ConnectionError, TimeoutError):
                await conn.ws.close(code=code, message=b"fake slack closing")
            conn.closed_at = conn.closed_at or time.perf_counter()
        self._notify()
