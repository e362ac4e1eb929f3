"""`serve()` refuses bad Slack configuration with one line naming the variable, before taking any event."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from fakes.slack_api import FakeSlack

from bot.config import Settings
from bot.errors import ConfigError
from bot.slack.daemon import serve
from bot.slack.metrics import Metrics


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(tokens={"xoxb-good", "xapp-good"}) as server:
        yield server


async def test_http_mode_needs_a_signing_secret(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ConfigError, match=r"^SLACK_SIGNING_SECRET: required in HTTP mode"):
        await serve(make_settings(slack_bot_token="xoxb-good"), port=0)


async def test_a_missing_bot_token_is_named(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ConfigError, match=r"^SLACK_BOT_TOKEN: required for run"):
        await serve(make_settings(slack_app_token="xapp-good"), port=0)


async def test_a_refused_bot_token_is_named(slack: FakeSlack, make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(slack_bot_token="xoxb-bad", slack_app_token="xapp-good", slack_api_url=slack.api_url)
    with pytest.raises(ConfigError, match=r"^SLACK_BOT_TOKEN: Slack refused it \(invalid_auth\)$"):
        await serve(settings, port=0)


async def test_a_refused_app_token_is_named(
    slack: FakeSlack, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    settings = make_settings(slack_bot_token="xoxb-good", slack_app_token="xapp-bad", slack_api_url=slack.api_url)
    with pytest.raises(ConfigError, match=r"^SLACK_APP_TOKEN: Slack refused it \(invalid_auth\)$"):
        await serve(settings, port=0)
    assert slack.open_connections == []


def test_metrics_are_prometheus_text() -> None:
    metrics = Metrics()
    metrics.inc("turns_started_total", 3)
    metrics.gauge("tool_calls_running", "tool calls running now", lambda: 2)
    text = metrics.render()
    assert "# TYPE threadbot_turns_started_total counter\nthreadbot_turns_started_total 3\n" in text
    assert "# HELP threadbot_tool_calls_running tool calls running now\n" in text
    assert text.endswith("threadbot_tool_calls_running 2\n")
    with pytest.raises(KeyError):
        metrics.inc("no_such_counter")
