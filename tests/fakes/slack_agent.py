"""The agent part of the fake Slack: App Home views, suggested prompts, thread titles, and their events.

Kept apart from ``slack_api.py`` like ``slack_files.py``; ``FakeSlack`` builds one ``FakeAgentSurface`` and lets
it add its methods. What it copies from Slack's docs:

- ``views.publish`` (Tier 4, no scope): ``user_id`` and a ``view`` are required (``invalid_arguments``); the view
  must parse as slack_sdk's ``View`` of type ``home`` and pass its validation (100 blocks at most on a home tab,
  no ``submit``/``close``), else ``invalid_arguments`` with the reason in ``response_metadata.messages``; over
  250 kB is ``view_too_large``; a stale ``hash`` is ``hash_conflict``; a home tab the app has not enabled
  (``home_tab_enabled=False``) is ``not_enabled``. The published view is kept per user with a new ``hash``.
- ``assistant.threads.setSuggestedPrompts`` (Tier 4, ``assistant:write``): ``channel_id`` and 1-4 ``prompts``
  each with ``title`` and ``message``. An agent app (``agent_view``, the default) that passes ``thread_ts``
  gets ``ok`` and nothing happens: Slack's docs say the call then "silently fails".
- ``assistant.threads.setTitle`` (Tier 4, ``assistant:write``): ``channel_id``, ``thread_ts`` and ``title``.
- ``agents.sessions.setStatus`` (Tier 3, ``chat:write``): ``channel_id``, ``thread_ts`` and a ``status`` of
  ``active``, ``processing``, ``suspended`` or ``closed`` (else ``invalid_arguments``). The first call for a thread
  creates its session with ``title`` (200 characters at most) and ``initiator_user_id``; later calls change only
  the status (Slack ignores both then). Every status set is kept in order per thread (``agent_sessions``). An app
  not subscribed to ``agent_session_stopped`` (``stopped_subscribed=False``) gets ``ok`` with the warning
  ``missing_agent_session_stopped_event_subscription``.
- ``refuse_agent_methods``: the error an app not declared an agent gets from the two ``assistant.threads``
  methods and ``agents.sessions.setStatus`` (e.g. ``not_authorized``, ``missing_scope``); None, the default,
  accepts them.
- ``app_home_opened`` (``tab`` ``home`` or ``messages``), ``assistant_thread_started`` and
  ``agent_session_stopped`` (the Stop button, only shown while a session is ``processing``) events, built for
  ``send_event``; ``feedback_click`` builds the ``block_actions`` payload of a message's feedback buttons.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.views import View

if TYPE_CHECKING:
    from fakes.slack_api import FakeSlack

JsonDict = dict[str, Any]
TIER_4_PER_MINUTE = 100
"""Tier 4 ("100+ per minute"): views.publish, assistant.threads.setSuggestedPrompts and setTitle."""
TIER_3_PER_MINUTE = 50
"""Tier 3 ("50+ per minute"): agents.sessions.setStatus, and assistant.threads.setStatus (served by ``FakeSlack``),
whose docs say only "Special": taken to be its twin's tier."""
SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})
MAX_TITLE_CHARS = 200
STOPPED_WARNING = "missing_agent_session_stopped_event_subscription"
MAX_VIEW_BYTES = 250_000
MAX_PROMPTS = 4


@dataclass
class PromptOffer:
    channel: str
    thread_ts: str | None
    prompts: list[JsonDict]
    title: str | None


@dataclass
class AgentSession:
    """One thread's agent session as Slack keeps it: its title and starter from the first call, every status."""

    channel: str
    thread_ts: str
    title: str | None
    initiator: str | None
    statuses: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.statuses[-1]


@dataclass
class PublishedView:
    user: str
    view: JsonDict
    hash: str
    history: list[JsonDict] = field(default_factory=list)


class FakeAgentSurface:
    def __init__(self, slack: FakeSlack) -> None:
        self._slack = slack
        self.agent_app = True
        """Declared with ``agent_view`` (prompts without ``thread_ts``); False: the older ``assistant_view``."""
        self.home_tab_enabled = True
        self.refuse_agent_methods: str | None = None
        self.homes: dict[str, PublishedView] = {}
        self.prompt_offers: list[PromptOffer] = []
        self.titles: dict[tuple[str, str], str] = {}
        self.agent_sessions: dict[tuple[str, str], AgentSession] = {}
        self.stopped_subscribed = True
        self._hashes = 0

    def handlers(self) -> dict[str, Callable[[JsonDict, str | None], JsonDict]]:
        return {
            "views.publish": self._views_publish,
            "assistant.threads.setSuggestedPrompts": self._set_suggested_prompts,
            "assistant.threads.setTitle": self._set_title,
            "agents.sessions.setStatus": self._set_session_status,
        }

    def limit_like_slack(self, *, time_scale: float = 1.0) -> None:
        """Each of these methods at its tier, as Slack limits them (a minute's calls may come at once)."""
        for method in self.handlers():
            per_minute = TIER_3_PER_MINUTE if method.startswith("agents.") else TIER_4_PER_MINUTE
            self._slack.rate_limit(method, per_minute=per_minute, time_scale=time_scale)
        self._slack.rate_limit("assistant.threads.setStatus", per_minute=TIER_3_PER_MINUTE, time_scale=time_scale)

    def session_of(self, channel: str, thread_ts: str) -> AgentSession | None:
        return self.agent_sessions.get((channel, thread_ts))

    def home_of(self, user: str) -> JsonDict | None:
        published = self.homes.get(user)
        return published.view if published is not None else None

    # ---- events ---------------------------------------------------------------------------------------------

    def app_home_opened(self, user: str = "U1", *, tab: str = "home", channel: str | None = None) -> JsonDict:
        """The event Slack sends when ``user`` opens the app's Home (``tab="home"``) or its DM (``"messages"``)."""
        event: JsonDict = {
            "type": "app_home_opened",
            "user": user,
            "channel": channel or f"D{user}",
            "tab": tab,
            "event_ts": self._slack._next_ts(),
        }
        if tab == "home" and user in self.homes:
            event["view"] = self.homes[user].view
        return event

    def assistant_thread_started(self, user: str = "U1", *, channel: str | None = None) -> JsonDict:
        """The event an ``assistant_view`` app gets when ``user`` opens a new assistant thread."""
        ts = self._slack._next_ts()
        return {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": user,
                "channel_id": channel or f"D{user}",
                "thread_ts": ts,
                "context": {"channel_id": None, "team_id": None, "enterprise_id": None},
            },
            "event_ts": ts,
        }

    def agent_session_stopped(self, user: str, channel: str, thread_ts: str) -> JsonDict:
        """The event Slack sends when ``user`` presses Stop on a thread's session (shown only while ``processing``):
        no stream of this app was active (the bot streams nothing), so ``streaming_message_ts`` is empty."""
        session = self.session_of(channel, thread_ts)
        if session is None or session.status != "processing":
            raise AssertionError(f"no Stop button in {channel}/{thread_ts}: its session is not processing")
        return {
            "type": "agent_session_stopped",
            "channel": channel,
            "thread_ts": thread_ts,
            "user": user,
            "streaming_message_ts": [],
            "event_ts": self._slack._next_ts(),
        }

    def feedback_click(self, channel: str, ts: str, *, user: str = "U1", positive: bool = True) -> JsonDict:
        """A ``block_actions`` payload for a click on the feedback buttons of a stored message: the action is of
        type ``feedback_buttons`` and carries the clicked button's ``value`` (and its text)."""
        message = self._slack.message(channel, ts)
        for block in message.blocks or []:
            if block.get("type") != "context_actions":
                continue
            for element in block.get("elements") or []:
                if element.get("type") == "feedback_buttons":
                    button = element["positive_button" if positive else "negative_button"]
                    payload = self._slack.block_action(
                        channel, ts, element.get("action_id") or "", user=user, block_id=block.get("block_id") or ""
                    )
                    payload["actions"] = [
                        {
                            "type": "feedback_buttons",
                            "action_id": element.get("action_id"),
                            "block_id": block.get("block_id"),
                            "value": button["value"],
                            "text": button["text"],
                            "action_ts": self._slack._next_ts(),
                        }
                    ]
                    return payload
        raise AssertionError(f"no feedback buttons on {channel}/{ts}")

    def home_action(self, user: str, action_id: str, value: str, *, view_of: str | None = None) -> JsonDict:
        """A ``block_actions`` payload for a button in a published home tab (``view_of``'s, default ``user``'s:
        another's view, as a forged click would carry it). A view's actions come without a channel or a
        ``response_url``: an answer to whoever clicked can only be a new view."""
        owner = view_of or user
        view = self.homes[owner].view
        buttons = [
            block["accessory"]
            for block in view.get("blocks", [])
            if (block.get("accessory") or {}).get("action_id") == action_id and block["accessory"].get("value") == value
        ]
        if not buttons:
            raise AssertionError(f"no {action_id} button with value {value!r} in {owner}'s home")
        base = self._slack.block_action_base(user)
        return {
            **base,
            "container": {"type": "view", "view_id": f"V{owner}"},
            "view": {"id": f"V{owner}", "type": "home", "hash": self.homes[owner].hash, **view},
            "state": {"values": {}},
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": f"{action_id}:{value}",
                    "type": "button",
                    "value": value,
                    "text": buttons[0]["text"],
                    "action_ts": self._slack._next_ts(),
                }
            ],
        }

    # ---- methods ----------------------------------------------------------------------------------------------

    def _views_publish(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import SlackError, _require

        user = _require(params, "user_id")
        raw = params.get("view")
        if raw is None:
            raise SlackError("invalid_arguments", response_metadata={"messages": ["missing required field: view"]})
        if isinstance(raw, str):
            if len(raw.encode()) > MAX_VIEW_BYTES:
                raise SlackError("view_too_large")
            raw = json.loads(raw)
        elif len(json.dumps(raw).encode()) > MAX_VIEW_BYTES:
            raise SlackError("view_too_large")
        if not self.home_tab_enabled:
            raise SlackError("not_enabled")
        try:
            view = View(**raw)
            if view.type != "home":
                raise SlackObjectFormationError("views.publish publishes home views only")
            view.validate_json()
            for block in view.blocks or []:
                if block is None:
                    raise SlackObjectFormationError("a block of a type Block Kit does not know")
                block.validate_json()
        except (SlackObjectFormationError, TypeError) as exc:
            raise SlackError("invalid_arguments", response_metadata={"messages": [f"[ERROR] {exc}"]}) from None
        published = self.homes.get(user)
        expected = params.get("hash")
        if expected and published is not None and expected != published.hash:
            raise SlackError("hash_conflict")
        self._hashes += 1
        new_hash = f"{self._hashes}.{len(self.homes)}"
        if published is None:
            published = self.homes[user] = PublishedView(user, raw, new_hash)
        published.view, published.hash = raw, new_hash
        published.history.append(raw)
        return {"view": {"id": f"V{user}", "type": "home", "hash": new_hash, **raw}}

    def _refuse(self) -> None:
        from fakes.slack_api import SlackError

        if self.refuse_agent_methods is not None:
            raise SlackError(self.refuse_agent_methods)

    def _set_suggested_prompts(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import SlackError, _require

        self._refuse()
        channel = _require(params, "channel_id", "channel_not_found")
        prompts = params.get("prompts")
        if isinstance(prompts, str):
            prompts = json.loads(prompts)
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS:
            raise SlackError("invalid_arguments")
        for prompt in prompts:
            if not isinstance(prompt, dict) or not prompt.get("title") or not prompt.get("message"):
                raise SlackError("invalid_arguments")
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None and self.agent_app:
            return {}  # Slack's docs: an agent app passing thread_ts has the call fail silently
        if thread_ts is None and not self.agent_app:
            raise SlackError("invalid_arguments")
        title = params.get("title")
        self.prompt_offers.append(PromptOffer(channel, thread_ts, prompts, str(title) if title else None))
        self._slack._notify()
        return {}

    def _set_title(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import _require

        self._refuse()
        channel = _require(params, "channel_id", "channel_not_found")
        thread_ts = _require(params, "thread_ts", "invalid_thread_ts")
        self.titles[(channel, thread_ts)] = _require(params, "title")
        self._slack._notify()
        return {}

    def _set_session_status(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import SlackError, _require

        self._refuse()
        channel = _require(params, "channel_id", "channel_not_found")
        thread_ts = _require(params, "thread_ts")
        status = _require(params, "status")
        if status not in SESSION_STATUSES:
            raise SlackError("invalid_arguments")
        title = params.get("title")
        if title is not None and len(str(title)) > MAX_TITLE_CHARS:
            raise SlackError("invalid_arguments")
        session = self.agent_sessions.get((channel, thread_ts))
        if session is None:
            initiator = params.get("initiator_user_id")
            session = self.agent_sessions[(channel, thread_ts)] = AgentSession(
                channel, thread_ts, str(title) if title else None, str(initiator) if initiator else None
            )
        session.statuses.append(status)
        self._slack._notify()
        answer: JsonDict = {"status": status, "title": session.title or ""}
        if not self.stopped_subscribed:
            answer["warning"] = STOPPED_WARNING
        return answer
