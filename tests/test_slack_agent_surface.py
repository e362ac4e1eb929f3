"""Slack's agent surface: the manifest's declaration, BOT_SUGGESTED_PROMPTS, the fake's methods as Slack documents
them, the DM threads' prompts and titles, and the App Home built from the store (with the real slack_sdk client)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.slack_api import FakeSlack
from slack_sdk.models.blocks import SectionBlock
from slack_sdk.models.views import View
from slack_sdk.web.async_client import AsyncWebClient
from store_backends import StoreOpener

from bot.clock import utcnow
from bot.config import DEFAULT_SUGGESTED_PROMPTS, Settings, SuggestedPrompt, load_settings
from bot.errors import ConfigError, SlackResponseError
from bot.slack.admission import Admission
from bot.slack.home import BURST, PUBLISHES_PER_MINUTE, HomeTab, thread_link, week_start
from bot.slack.home_view import CANCEL_REMINDER_ACTION, MAX_CALLS, PersonWork, home_view
from bot.slack.prompts import AgentThreads
from bot.slack.render import CANCEL_ACTION
from bot.store import NewReminder, Reminder, ReminderKind, ReminderStatus, Store
from bot.telemetry.metrics import Metrics
from bot.toolcall import CallStatus, ProgressKind, ToolCall

MANIFEST = Path(__file__).resolve().parents[1] / "deploy" / "slack-manifest.yml"
WAIT_S = 20.0  # an upper bound: generous, so a loaded machine is slow, not failing
URL = "https://threadbot-test.slack.com/"


# --- the manifest ----------------------------------------------------------------------------------------------


def test_the_manifest_declares_an_agent_with_a_home_tab() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    features = manifest["features"]
    agent = features["agent_view"]
    assert agent["agent_description"].strip()
    prompts = [SuggestedPrompt(**prompt) for prompt in agent["suggested_prompts"]]
    assert prompts == list(DEFAULT_SUGGESTED_PROMPTS), "the manifest's prompts and BOT_SUGGESTED_PROMPTS' default"
    assert 1 <= len(prompts) <= 4
    assert features["app_home"]["home_tab_enabled"] is True
    assert features["app_home"]["messages_tab_enabled"] is True
    assert "assistant_view" not in features
    assert {"assistant:write", "chat:write"} <= set(manifest["oauth_config"]["scopes"]["bot"])
    events = manifest["settings"]["event_subscriptions"]["bot_events"]
    assert {"app_home_opened", "agent_session_stopped", "message.im"} <= set(events)
    assert "assistant_thread_started" not in events, "Agent View replaced it with app_home_opened (messages tab)"
    assert manifest["settings"]["interactivity"]["is_enabled"] is True


# --- BOT_SUGGESTED_PROMPTS -------------------------------------------------------------------------------------


def test_suggested_prompts_default_and_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(_env_file=None).bot_suggested_prompts == DEFAULT_SUGGESTED_PROMPTS
    monkeypatch.setenv("BOT_SUGGESTED_PROMPTS", '[{"title": " Build ", "message": "Run the build"}]')
    assert load_settings(_env_file=None).bot_suggested_prompts == (SuggestedPrompt("Build", "Run the build"),)
    monkeypatch.setenv("BOT_SUGGESTED_PROMPTS", "[]")
    assert load_settings(_env_file=None).bot_suggested_prompts == ()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("not json", "not JSON"),
        ('{"title": "a", "message": "b"}', "JSON list"),
        ("[" + ",".join(['{"title": "a", "message": "b"}'] * 5) + "]", "at most 4"),
        ('[{"title": "a"}]', '"title" and "message"'),
        ('[{"title": "a", "message": "b", "x": 1}]', '"title" and "message"'),
        ('[{"title": "", "message": "b"}]', "non-empty"),
        ('[{"title": "a", "message": 3}]', "non-empty"),
    ],
)
def test_bad_suggested_prompts_stop_the_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv("BOT_SUGGESTED_PROMPTS", value)
    with pytest.raises(ConfigError, match=r"^BOT_SUGGESTED_PROMPTS: ") as raised:
        load_settings(_env_file=None)
    assert says in str(raised.value)


# --- the fake, as Slack documents the methods ------------------------------------------------------------------


def _home(blocks: int) -> dict[str, Any]:
    return {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}] * blocks}


async def _error(call: Any) -> str:
    with pytest.raises(SlackResponseError) as raised:
        await call
    return str(raised.value.error)


async def test_the_fake_publishes_home_views_as_slack_does(slack: FakeSlack, client: AsyncWebClient) -> None:
    answer = await client.views_publish(user_id="U1", view=_home(100))
    assert answer["view"]["hash"] == slack.agent.homes["U1"].hash
    assert await _error(client.views_publish(user_id="U1", view=_home(101))) == "invalid_arguments"
    assert await _error(client.views_publish(user_id="U1", view={**_home(1), "type": "modal"})) == "invalid_arguments"
    assert await _error(client.views_publish(user_id="U1", view={"type": "home", "blocks": [{"type": "nope"}]})) == (
        "invalid_arguments"
    )
    assert await _error(client.views_publish(user_id="U1", view=_home(1), hash="stale")) == "hash_conflict"
    assert await _error(client.views_publish(user_id="", view=_home(1))) == "invalid_arguments"
    slack.agent.home_tab_enabled = False
    assert await _error(client.views_publish(user_id="U1", view=_home(1))) == "not_enabled"
    assert len(slack.agent.homes["U1"].history) == 1


async def test_the_fake_takes_prompts_and_titles_as_slack_does(slack: FakeSlack, client: AsyncWebClient) -> None:
    prompts = [{"title": "a", "message": "b"}]
    await client.assistant_threads_setSuggestedPrompts(channel_id="D1", prompts=prompts, title="Try")
    await client.assistant_threads_setSuggestedPrompts(channel_id="D1", thread_ts="1.1", prompts=prompts)
    assert [(o.channel, o.thread_ts, o.title) for o in slack.agent.prompt_offers] == [("D1", None, "Try")], (
        "an agent app's thread_ts makes the call fail silently"
    )
    too_many = prompts * 5
    assert await _error(client.assistant_threads_setSuggestedPrompts(channel_id="D1", prompts=too_many)) == (
        "invalid_arguments"
    )
    assert await _error(client.assistant_threads_setSuggestedPrompts(channel_id="D1", prompts=[{"title": "a"}])) == (
        "invalid_arguments"
    )
    await client.assistant_threads_setTitle(channel_id="D1", thread_ts="1.1", title="Holidays")
    assert slack.agent.titles == {("D1", "1.1"): "Holidays"}
    assert await _error(client.assistant_threads_setTitle(channel_id="D1", thread_ts="", title="x")) == (
        "invalid_thread_ts"
    )
    slack.agent.refuse_agent_methods = "not_authorized"
    assert await _error(client.assistant_threads_setTitle(channel_id="D1", thread_ts="1.1", title="x")) == (
        "not_authorized"
    )


# --- prompts and titles ------------------------------------------------------------------------------------------


def _body(event: dict[str, Any]) -> dict[str, Any]:
    return {"team_id": "T1", "event_id": "Ev1", "event": event}


@pytest.fixture
def threads(client: AsyncWebClient, settings: Settings) -> AgentThreads:
    return AgentThreads(
        client=client,
        prompts=settings.bot_suggested_prompts,
        bot_user_id="UBOT",
        admission=Admission.of(settings, "T1"),
    )


async def test_opening_the_dm_offers_the_prompts_without_a_thread(slack: FakeSlack, threads: AgentThreads) -> None:
    await threads.dm_opened(_body(slack.agent.app_home_opened("U1", tab="messages")))
    await threads.dm_opened(_body(slack.agent.app_home_opened("U1", tab="home")))  # the home tab: not a thread
    [offer] = slack.agent.prompt_offers
    assert (offer.channel, offer.thread_ts) == ("DU1", None)
    assert offer.prompts == [{"title": p.title, "message": p.message} for p in DEFAULT_SUGGESTED_PROMPTS]
    assert not [call for call in slack.calls if call.params.get("thread_ts")]


async def test_an_assistant_thread_gets_the_prompts_in_it(slack: FakeSlack, threads: AgentThreads) -> None:
    slack.agent.agent_app = False  # an app still declared with assistant_view
    event = slack.agent.assistant_thread_started("U1")
    await threads.thread_started(_body(event))
    [offer] = slack.agent.prompt_offers
    assert offer.thread_ts == event["assistant_thread"]["thread_ts"]


async def test_a_new_dm_thread_is_titled_from_its_first_request_once(slack: FakeSlack, threads: AgentThreads) -> None:
    long = "please   check the build on main\nand tell me what broke " + "and why " * 20
    root = slack.user_message("D1", long)
    await threads.message(_body(root))
    await threads.message(_body(root))  # a redelivery
    await threads.message(_body(slack.user_message("D1", "and this?", thread_ts=root["ts"])))  # a reply
    await threads.message(_body(slack.user_message("C1", "a channel message")))
    [(where, title)] = slack.agent.titles.items()
    assert where == ("D1", root["ts"])
    assert title.startswith("please check the build on main and tell me what broke") and len(title) <= 80
    assert len(slack.calls_to("assistant.threads.setTitle")) == 1


async def test_nobody_the_bot_does_not_answer_gets_prompts_or_titles(
    slack: FakeSlack, client: AsyncWebClient, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(bot_allowed_users="U1")
    threads = AgentThreads(
        client=client, prompts=DEFAULT_SUGGESTED_PROMPTS, bot_user_id="UBOT", admission=Admission.of(settings)
    )
    await threads.dm_opened(_body(slack.agent.app_home_opened("U2", tab="messages")))
    await threads.message(_body(slack.user_message("D2", "hello", user="U2")))
    assert not slack.agent.prompt_offers and not slack.agent.titles


async def test_an_app_slack_refuses_says_so_once_and_goes_on(
    slack: FakeSlack, threads: AgentThreads, caplog: pytest.LogCaptureFixture
) -> None:
    slack.agent.refuse_agent_methods = "not_authorized"
    with caplog.at_level(logging.INFO, logger="bot.slack.prompts"):
        for n in range(3):
            await threads.dm_opened(_body(slack.agent.app_home_opened("U1", tab="messages")))
            await threads.message(_body(slack.user_message("D1", f"request {n}")))
    said = [r.getMessage() for r in caplog.records if "refuses" in r.getMessage()]
    assert len(said) == 1 and "not_authorized" in said[0] and "agent_view" in said[0]
    assert len(slack.calls_to("assistant.threads.setSuggestedPrompts")) == 1
    assert not slack.calls_to("assistant.threads.setTitle"), "the same declaration is missing for titles"


async def test_a_home_tab_the_app_has_not_enabled_is_said_once(
    slack: FakeSlack,
    client: AsyncWebClient,
    store_opener: StoreOpener,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    slack.agent.home_tab_enabled = False
    home = Home(slack, client, await store_opener(), settings)
    try:
        with caplog.at_level(logging.INFO, logger="bot.slack.home"):
            await home.tab.opened(_body(slack.agent.app_home_opened("U1")))
            said = lambda: [r.getMessage() for r in caplog.records if "not_enabled" in r.getMessage()]  # noqa: E731
            await slack.wait_for(said, WAIT_S, "the refusal logged")
            await home.tab.opened(_body(slack.agent.app_home_opened("U2")))
    finally:
        await home.tab.close(1.0)
    assert len(said()) == 1 and len(slack.calls_to("views.publish")) == 1


# --- the App Home ------------------------------------------------------------------------------------------------


def _address(channel: str, ts: str, user: str) -> dict[str, str]:
    return {"edge": "slack", "team": "T1", "channel": channel, "thread_ts": ts, "requester": user, "speaker": user}


async def _work(store: Store) -> ToolCall:
    """U1 runs a call with progress and set a reminder; U2 set one of their own."""
    await store.ensure_session("slack:T1:C1:1.1", _address("C1", "1.1", "U1"))
    await store.ensure_session("slack:T1:C2:2.2", _address("C2", "2.2", "U2"))
    call = ToolCall("toolu_long", "slack:T1:C1:1.1", "t1", "sleep_for", {"seconds": 600}, requester="U1")
    call.transition(CallStatus.RUNNING)
    call.add_progress(ProgressKind.PARTIAL, {"message": "slept 42s of 600s"})
    await store.save_call(call)
    due = utcnow() + timedelta(hours=1)
    await store.add_reminders(
        [
            NewReminder("slack:T1:C1:1.1", ReminderKind.REMINDER, "stand-up <!here>", due, requester="U1"),
            NewReminder("slack:T1:C2:2.2", ReminderKind.REMINDER, "lunch", due, requester="U2"),
        ]
    )
    return call


class Home:
    """A `HomeTab` on a store and the fake, with the scheduler's cancel replaced by the store's own."""

    def __init__(self, slack: FakeSlack, client: AsyncWebClient, store: Store, settings: Settings, **kw: Any) -> None:
        self.cancelled: list[int] = []

        async def cancel(reminder_id: int, session_key: str) -> Reminder | None:
            self.cancelled.append(reminder_id)
            return await store.cancel_reminder(reminder_id, session_key=session_key)

        async def requesters(session_key: str) -> set[str]:
            record = await store.get_session(session_key)
            return {str(record.address["requester"])} if record else set()

        self.tab = HomeTab(
            client=client,
            store=store,
            settings=settings,
            cancel_reminder=cancel,
            requesters=requesters,
            admission=Admission.of(settings, "T1"),
            metrics=Metrics(),
            workspace_url=URL,
            **kw,
        )
        self.slack = slack

    async def open(self, user: str) -> dict[str, Any]:
        published = len(self.slack.calls_to("views.publish"))
        await self.tab.opened(_body(self.slack.agent.app_home_opened(user)))
        await self.slack.wait_for(lambda: len(self.slack.calls_to("views.publish")) > published, WAIT_S, "a publish")
        view = self.slack.agent.home_of(user)
        assert view is not None
        return view


def _texts(view: dict[str, Any]) -> str:
    return "\n".join(str((block.get("text") or {}).get("text") or "") for block in view["blocks"])


def _buttons(view: dict[str, Any], action_id: str) -> list[str]:
    return [
        block["accessory"]["value"]
        for block in view["blocks"]
        if (block.get("accessory") or {}).get("action_id") == action_id
    ]


async def test_the_home_shows_a_persons_own_work_and_validates(
    slack: FakeSlack, client: AsyncWebClient, store_opener: StoreOpener, settings: Settings
) -> None:
    store = await store_opener()
    call = await _work(store)
    home = Home(slack, client, store, settings)
    try:
        mine = await home.open("U1")
        View(**mine).validate_json()
        text = _texts(mine)
        assert "sleep_for" in text and "slept 42s of 600s" in text
        assert f"<{URL}archives/C1/p11|thread> in <#C1>" in text
        assert "stand-up" in text and "<!here>" not in text, "a reminder's text notifies nobody"
        assert "lunch" not in text
        assert _buttons(mine, CANCEL_ACTION) == [call.id]
        [reminder] = await store.pending_reminders_of("U1")
        assert _buttons(mine, CANCEL_REMINDER_ACTION) == [str(reminder.id)]
        assert "*working*" in text and "This week:" in text
        theirs = await home.open("U2")
        assert "lunch" in _texts(theirs) and not _buttons(theirs, CANCEL_ACTION)
    finally:
        await home.tab.close(1.0)


async def test_the_home_is_the_same_after_a_restart(
    slack: FakeSlack, client: AsyncWebClient, store_opener: StoreOpener, settings: Settings
) -> None:
    store = await store_opener()
    await _work(store)
    before = Home(slack, client, store, settings)
    first = await before.open("U1")
    await before.tab.close(1.0)
    await store_opener.close(store)
    after = Home(slack, client, await store_opener(), settings)
    try:
        again = await after.open("U1")
    finally:
        await after.tab.close(1.0)
    assert _buttons(again, CANCEL_ACTION) == _buttons(first, CANCEL_ACTION)
    assert _buttons(again, CANCEL_REMINDER_ACTION) == _buttons(first, CANCEL_REMINDER_ACTION)


async def test_a_reminder_is_cancelled_only_by_whoever_set_it(
    slack: FakeSlack, client: AsyncWebClient, store_opener: StoreOpener, settings: Settings
) -> None:
    store = await store_opener()
    await _work(store)
    home = Home(slack, client, store, settings)
    try:
        await home.open("U1")
        [reminder] = await store.pending_reminders_of("U1")
        forged = slack.agent.home_action("U2", CANCEL_REMINDER_ACTION, str(reminder.id), view_of="U1")
        await home.tab.on_cancel_reminder(forged)
        assert home.cancelled == [] and (await store.get_reminder(reminder.id)).status is ReminderStatus.PENDING  # type: ignore[union-attr]
        await home.tab.on_cancel_reminder(slack.agent.home_action("U1", CANCEL_REMINDER_ACTION, str(reminder.id)))
        assert home.cancelled == [reminder.id]
        await slack.wait_for(
            lambda: "stand-up" not in _texts(slack.agent.home_of("U1") or {"blocks": []}), WAIT_S, "the home without it"
        )
    finally:
        await home.tab.close(1.0)


async def test_an_open_home_follows_the_store(
    slack: FakeSlack, client: AsyncWebClient, store_opener: StoreOpener, settings: Settings
) -> None:
    """A call that ends on any replica is gone from the home at the next refresh: the view is read from the rows."""
    store = await store_opener()
    call = await _work(store)
    home = Home(slack, client, store, settings, refresh_s=0.05)
    try:
        await home.open("U1")
        call.transition(CallStatus.COMPLETED)
        await store.save_call(call)
        await slack.wait_for(
            lambda: not _buttons(slack.agent.home_of("U1") or {"blocks": []}, CANCEL_ACTION), WAIT_S, "the call gone"
        )
    finally:
        await home.tab.close(1.0)


async def test_many_people_watching_stay_inside_tier_4(
    slack: FakeSlack, client: AsyncWebClient, store_opener: StoreOpener, settings: Settings
) -> None:
    """Time runs 12x: the fake allows Tier 4's 100 a minute (20/s here); the home spends 80 a minute (16/s)
    across the workspace, this replica half of it beside another live one (8/s), whoever is watching."""
    scale = 12.0
    slack.agent.limit_like_slack(time_scale=scale)
    store = await store_opener()
    home = Home(slack, client, store, settings, refresh_s=0.01, per_minute=PUBLISHES_PER_MINUTE * scale)
    home.tab.share_budget(2)
    try:
        for n in range(30):
            await home.tab.opened(_body(slack.agent.app_home_opened(f"U{n:02d}")))
        await slack.wait_for(lambda: len(slack.calls_to("views.publish")) >= 30, WAIT_S, "30 publishes")
    finally:
        await home.tab.close(1.0)
    times = [call.time for call in slack.calls_to("views.publish")]
    elapsed = times[-1] - times[0]
    rate = PUBLISHES_PER_MINUTE * scale / 60 / 2
    assert len(times) <= BURST + rate * elapsed + 2, f"{len(times)} publishes in {elapsed:.2f}s"
    assert slack.rate_limited["views.publish"] == 0


def test_the_home_view_keeps_to_100_blocks() -> None:
    now = utcnow()
    calls = [ToolCall(f"toolu_{n}", "s", "t", "sleep_for", {"seconds": n}, requester="U1") for n in range(80)]
    reminders = [
        Reminder(n, "s", ReminderKind.WAKE, "x" * 5000, "U1", now, None, None, ReminderStatus.PENDING, None, now)
        for n in range(80)
    ]
    work = PersonWork("U1", calls, reminders, [], {"s": _address("C1", "1.1", "U1")}, 0, 0)
    view = home_view(work, now, lambda address: thread_link(URL, address))
    view.validate_json()
    assert len(view.blocks or []) <= 100
    assert sum(isinstance(block, SectionBlock) and block.accessory is not None for block in view.blocks or []) == (
        2 * MAX_CALLS
    )
    assert "…and 50 more" in str(view.to_dict())


def test_the_week_starts_on_monday() -> None:
    now = utcnow()
    start = week_start(now)
    assert start.weekday() == 0 and timedelta(0) <= now - start < timedelta(days=7)
    assert thread_link("", {"channel": "C1", "thread_ts": "1.1"}) is None
