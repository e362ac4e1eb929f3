"""The bolt side: the Web API client, the `AsyncApp`, and listeners that only hand work off.

One process: bolt acks an event before its listener runs, so ack latency is bolt's
own (in Socket Mode on a thread of its own, bot/slack/socket_thread.py); the listeners
stay thin anyway (count, spawn a tracked task, return) so nothing slow sits between
Slack and the ack even for interactions, which we ack ourselves.
A cluster acks only after the durable effect (bolt's `process_before_response`), see
`Ingress`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped, warning_token_skipped
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.concurrency import TaskSet
from bot.config import Settings
from bot.errors import ConfigError, SlackResponseError, SlackUnreachable, ThreadbotError
from bot.slack import tokens
from bot.slack.approvals import ApprovalButtons
from bot.slack.cancel import Canceller
from bot.slack.client import SlackClient
from bot.slack.events import MessageRouter
from bot.slack.feedback import FEEDBACK_ACTION
from bot.slack.feedback_clicks import FeedbackButtons
from bot.slack.forget import FORGET_ACTION
from bot.slack.home import HomeTab
from bot.slack.home_view import CANCEL_REMINDER_ACTION
from bot.slack.prompts import AgentThreads
from bot.slack.render import ANSWER_ACTIONS, APPROVE_ACTION, CANCEL_ACTION, DENY_ACTION
from bot.slack.socket_thread import Relay, in_place
from bot.telemetry.metrics import Metrics
from bot.telemetry.tracing import Tracing

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30
"""The bound on every Slack Web API call, connection and answer included."""
RATE_LIMIT_RETRIES = 3
SERVER_ERROR_RETRIES = 2


def slack_http_session(timeout_s: float = REQUEST_TIMEOUT_S) -> aiohttp.ClientSession:
    """The aiohttp session Slack clients share (make it inside the running loop), every request bounded.

    slack_sdk applies its own `timeout` only to sessions it opens itself; a session handed in keeps its own
    timeout, and aiohttp's default is 300 s, long enough for one stalled call to freeze whatever waits on it.
    """
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))


def build_client(
    settings: Settings, session: aiohttp.ClientSession | None = None, *, retry_rate_limits: bool = True
) -> SlackClient:
    """A Web API client pointed at `SLACK_API_URL`, retrying 429s (per Retry-After) and 5xx itself, and
    raising the project's `SlackError`s (bot/slack/client.py) once it gives up.

    Pass a `session` from `slack_http_session()`: without one, slack_sdk opens a new aiohttp session, and a new
    connection, for every call, which under load costs more than the calls themselves. A session without a
    bounded total timeout is refused, since slack_sdk would not bound its calls (see `slack_http_session`).
    `retry_rate_limits=False` is for the `EditScheduler`: it must see every 429 itself, to pause all edits,
    instead of having one slept out inside a call while its single worker, and every edit, waits blindly.
    """
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN: required for run (the bot token, xoxb-…)")
    if session is not None and not 0 < (session.timeout.total or 0) <= REQUEST_TIMEOUT_S:
        raise ValueError(f"a Slack client's session needs a total timeout of at most {REQUEST_TIMEOUT_S}s")
    base_url = settings.slack_api_url if settings.slack_api_url.endswith("/") else settings.slack_api_url + "/"
    client = SlackClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=base_url,
        timeout=REQUEST_TIMEOUT_S,
        session=session,
    )
    if retry_rate_limits:
        client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES))
    client.retry_handlers.append(AsyncServerErrorRetryHandler(max_retry_count=SERVER_ERROR_RETRIES))
    return client


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is in Slack, from `auth.test`; the names are for people reading the log."""

    team_id: str
    user_id: str
    bot_id: str | None
    user_name: str = ""
    team_name: str = ""
    url: str = ""
    """The workspace's address (`https://team.slack.com/`): thread links are made from it."""

    def describe(self) -> str:
        """`@threadbot (U123) in team "Acme" (T456)`."""
        team = self.team_name or self.team_id
        return f'@{self.user_name or self.user_id} ({self.user_id}) in team "{team}" ({self.team_id})'


async def meet_slack(client: AsyncWebClient, app_token: str | None, timeout_s: float = REQUEST_TIMEOUT_S) -> Identity:
    """What `run` asks Slack before anything else, and `check` asks the same way: `auth.test`, then in
    Socket Mode `apps.connections.open`, the two bounded together by `timeout_s`.

    Each failure is one line naming the variable to change: a refused token, a Slack that cannot be
    reached, or one that takes the connection and never answers (then the bound is named too)."""
    try:
        async with asyncio.timeout(timeout_s):
            me = await _identify(client)
            if app_token is not None:
                await _check_app_token(client, app_token)
    except TimeoutError:
        raise ThreadbotError(
            f"no answer from Slack at {client.base_url} (SLACK_API_URL) within {timeout_s:g}s"
        ) from None
    return me


async def _identify(client: AsyncWebClient) -> Identity:
    """`auth.test`, turned into one clear line when the token is wrong or Slack cannot be reached."""
    try:
        response = await client.auth_test()
    except SlackResponseError as exc:
        raise ConfigError(tokens.refused(tokens.BOT, exc.error, client.base_url)) from None
    except SlackUnreachable as exc:
        raise _unreachable(client, exc) from exc
    return Identity(
        team_id=str(response["team_id"]),
        user_id=str(response["user_id"]),
        bot_id=response.get("bot_id"),
        user_name=str(response.get("user") or ""),
        team_name=str(response.get("team") or ""),
        url=str(response.get("url") or ""),
    )


async def _check_app_token(client: AsyncWebClient, app_token: str) -> None:
    """Ask for a Socket Mode URL once: the SDK's own connect retries a refused token forever, quietly."""
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackResponseError as exc:
        raise ConfigError(tokens.refused(tokens.APP, exc.error, client.base_url)) from None
    except SlackUnreachable as exc:
        raise _unreachable(client, exc) from exc


def _unreachable(client: AsyncWebClient, exc: SlackUnreachable) -> ThreadbotError:
    return ThreadbotError(f"cannot reach Slack at {client.base_url} (SLACK_API_URL): {exc.reason}")


class _ExpectedBoltNotices(logging.Filter):
    """Drops the two warnings bolt gives every app built like ours: a `client` and an `authorize` make
    it ignore `SLACK_BOT_TOKEN`, which is the intent. Every other bolt record passes."""

    EXPECTED = frozenset({warning_client_prioritized_and_token_skipped(), warning_token_skipped()})

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.EXPECTED


def _bolt_logger() -> logging.Logger:
    """The logger handed to bolt as its own `logger=`.

    Without one, bolt builds its framework logger with `get_bolt_logger`, which copies the root
    logger's level onto it at that moment, so a level set beforehand never holds. A logger passed in
    is used as it is, for the app, its middleware and the Socket Mode client alike.
    """
    logger = logging.getLogger("slack_bolt")
    if not any(isinstance(existing, _ExpectedBoltNotices) for existing in logger.filters):
        logger.addFilter(_ExpectedBoltNotices())
    return logger


class Ingress:
    """Where bolt's listeners drop events: each becomes a tracked task, or nothing.

    One process acks first and handles in the background (what it acked is in its store before
    anything can be lost). With `ack_after` (a cluster) a listener returns, and the event is acked,
    only once its durable effect has committed: a replica that dies before then never acked it,
    so Slack delivers it again, to another connection."""

    def __init__(
        self,
        *,
        router: MessageRouter,
        canceller: Canceller,
        approvals: ApprovalButtons,
        metrics: Metrics,
        ack_after: bool = False,
        tracing: Tracing | None = None,
        home: HomeTab | None = None,
        threads: AgentThreads | None = None,
        feedback: FeedbackButtons | None = None,
    ) -> None:
        """`ack_after`: the coordination seam's `shared` (bot/coordination.py); `home` and `threads` are the agent
        surface (App Home; suggested prompts and titles), when wired; `feedback`
        takes the clicks on answers' feedback buttons."""
        self._feedback = feedback
        self._tracing = tracing or Tracing()
        self.router = router
        self.home = home
        self._threads = threads
        self._canceller = canceller
        self._approvals = approvals
        self._metrics = metrics
        self.ack_after = ack_after
        self.tasks = TaskSet()
        self.revoked = asyncio.Event()
        """Set when Slack says the bot's tokens are gone (`tokens_revoked`, `app_uninstalled`): the daemon stops."""
        self.revoked_by = ""

    @property
    def accepting(self) -> bool:
        return self.tasks.accepting

    async def message(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        kind = str((body.get("event") or {}).get("type"))
        await self._handle(self.router.handle(body), f"slack-event:{body.get('event_id')}", {"slack.event.type": kind})
        if self._threads is not None:
            self.tasks.spawn(self._threads.message(body), "slack-title")

    async def reaction(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        if self._canceller.wants(body):
            await self._handle(self._canceller.on_reaction(body), f"slack-reaction:{body.get('event_id')}")
        else:
            self._metrics.inc("events_ignored_total")

    async def button(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        await self._handle(self._then_repaint_home(self._canceller.on_button(body), body), "slack-cancel-button")

    async def home_opened(self, body: dict[str, Any]) -> None:
        """`app_home_opened`: the home tab is published, the messages tab (a DM) offered its prompts."""
        self._metrics.inc("events_received_total")
        if self.home is not None:
            await self.home.opened(body)
        if self._threads is not None:
            self.tasks.spawn(self._threads.dm_opened(body), "slack-prompts")

    async def thread_started(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        if self._threads is not None:
            self.tasks.spawn(self._threads.thread_started(body), "slack-prompts")

    async def session_stopped(self, body: dict[str, Any]) -> None:
        """`agent_session_stopped`: the Stop button of a thread's agent session."""
        self._metrics.inc("events_received_total")
        await self._handle(self._canceller.on_session_stopped(body), f"slack-stop:{body.get('event_id')}")

    async def feedback_button(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        if self._feedback is not None:
            await self._handle(self._feedback.on_click(body), "slack-feedback-button")

    async def reminder_button(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        if self.home is not None:
            await self._handle(self.home.on_cancel_reminder(body), "slack-reminder-button")

    async def _then_repaint_home(self, work: Coroutine[Any, Any, None], body: dict[str, Any]) -> None:
        await work
        if self.home is not None:
            self.home.poke(str((body.get("user") or {}).get("id") or ""))

    async def approval_button(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        await self._handle(self._approvals.on_button(body), "slack-approval-button")

    async def relayed(self, kind: str, body: dict[str, Any]) -> None:
        """A cancel or a decision relayed from any replica (this one too): acted on if its work is held here."""
        if kind == "approval":
            await self._approvals.on_button(body, forwarded=True)
        elif kind == "reaction":
            await self._canceller.on_reaction(body, forwarded=True)
        elif kind == "button":
            await self._canceller.on_button(body, forwarded=True)
        elif kind == "cancel":
            await self._canceller.on_forwarded_cancel(body)

    async def forget_button(self, body: dict[str, Any]) -> None:
        self._metrics.inc("events_received_total")
        await self._handle(self.router.forget_dialog.on_button(body), "slack-forget-button")

    def revoke(self, body: dict[str, Any]) -> None:
        """Stop using Slack when the bot token is revoked or the app uninstalled; a revoked user token is no matter.

        Every later call would fail with `token_revoked`, so there is nothing to wait for: the daemon stops."""
        event = body.get("event") or {}
        kind = str(event.get("type"))
        if kind == "tokens_revoked" and not (event.get("tokens") or {}).get("bot"):
            return
        if not self.revoked.is_set():
            self.revoked_by = kind
            log.error("Slack sent %s: the bot token no longer works; threadbot stops using Slack and exits", kind)
            self.revoked.set()

    async def _handle(
        self, work: Coroutine[Any, Any, None], name: str, attributes: dict[str, str] | None = None
    ) -> None:
        if self._tracing.enabled:
            work = self._traced(work, name, attributes or {})
        # One of the four mode branches outside the seam: a replica's ack waits for the durable effect.
        if self.ack_after:
            await self.tasks.run(work, name)
        else:
            self.tasks.spawn(work, name)

    async def _traced(self, work: Coroutine[Any, Any, None], name: str, attributes: dict[str, str]) -> None:
        """The event's handling as a span: the turn it starts, and that turn's posts, are its children."""
        kind, _, event_id = name.partition(":")  # "slack-event:Ev…" is the span "slack event"
        if event_id:
            attributes = {**attributes, "slack.event.id": event_id}
        with self._tracing.span(kind.replace("-", " "), attributes, kind="consumer"):
            await work

    async def close(self, timeout_s: float) -> None:
        """Stop taking events; give the handlers in flight `timeout_s` to finish, then the files they
        still read (a handler that claims a message meanwhile may still start reading its files)."""
        await self.tasks.close(timeout_s)
        await self.router.close(timeout_s)
        if self.home is not None:
            await self.home.close(timeout_s)


def build_app(
    settings: Settings, client: AsyncWebClient, ingress: Ingress, me: Identity, relay: Relay = in_place
) -> AsyncApp:
    """The bolt app with our listeners; bolt's own middleware drops the bot's own events.

    Each listener hands its work to `ingress` through `relay`: in place, or on the daemon's loop when bolt
    runs on a thread of its own (bot/slack/socket_thread.py).

    Authorization answers from the start-up `auth.test`: bolt's default would call `auth.test` again
    on the first event, before acking it (and once per event until the first call returns).
    """
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else ""

    async def authorize(user_id: str | None) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=None,
            team_id=me.team_id,
            bot_user_id=me.user_id,
            bot_id=me.bot_id,
            bot_token=client.token,
            user_id=user_id,
        )

    app = AsyncApp(
        name="threadbot",
        client=client,
        signing_secret=secret,
        authorize=authorize,
        logger=_bolt_logger(),
        process_before_response=ingress.ack_after,
    )

    async def on_message(body: dict[str, Any]) -> None:
        await relay(ingress.message(body))

    async def on_reaction(body: dict[str, Any]) -> None:
        await relay(ingress.reaction(body))

    # Acked first in both ways of acking: with `process_before_response` bolt still answers Slack only once
    # the listener has returned (and with a 500 if it raised), so a replica acks after the durable effect.
    async def on_cancel_button(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await relay(ingress.button(body))

    app.event("app_mention")(on_message)
    app.event("message")(on_message)
    app.event("reaction_added")(on_reaction)

    async def on_revoked(body: dict[str, Any]) -> None:
        async def revoke() -> None:
            ingress.revoke(body)

        await relay(revoke())

    app.event("tokens_revoked")(on_revoked)
    app.event("app_uninstalled")(on_revoked)
    app.action(CANCEL_ACTION)(on_cancel_button)

    async def on_forget_button(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await relay(ingress.forget_button(body))

    app.action(FORGET_ACTION)(on_forget_button)

    async def on_approval_button(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await relay(ingress.approval_button(body))

    app.action(APPROVE_ACTION)(on_approval_button)
    app.action(DENY_ACTION)(on_approval_button)
    app.action(ANSWER_ACTIONS)(on_approval_button)
    _listen_as_agent(app, ingress, relay)
    return app


def _listen_as_agent(app: AsyncApp, ingress: Ingress, relay: Relay) -> None:
    """The agent surface's listeners: App Home and DM openings, new assistant threads, a session's Stop, an
    answer's feedback, a reminder's Cancel."""

    async def on_home_opened(body: dict[str, Any]) -> None:
        await relay(ingress.home_opened(body))

    async def on_thread_started(body: dict[str, Any]) -> None:
        await relay(ingress.thread_started(body))

    async def on_session_stopped(body: dict[str, Any]) -> None:
        await relay(ingress.session_stopped(body))

    async def on_reminder_button(ack: AsyncAck, body: dict[str, Any]) -> None:
        if not ingress.ack_after:
            await ack()
        await relay(ingress.reminder_button(body))
        if ingress.ack_after:
            await ack()

    app.event("app_home_opened")(on_home_opened)
    app.event("assistant_thread_started")(on_thread_started)
    app.event("agent_session_stopped")(on_session_stopped)

    async def on_feedback(ack: AsyncAck, body: dict[str, Any]) -> None:
        if not ingress.ack_after:
            await ack()
        await relay(ingress.feedback_button(body))
        if ingress.ack_after:
            await ack()

    app.action(FEEDBACK_ACTION)(on_feedback)
    app.action(CANCEL_REMINDER_ACTION)(on_reminder_button)
