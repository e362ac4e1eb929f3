"""`serve()` refuses bad Slack configuration with one line naming the variable, before taking any event."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable

import pytest
from fakes.slack_api import FakeSlack

from bot import check
from bot.config import Settings
from bot.errors import ConfigError, ThreadbotError
from bot.slack.daemon import serve

REFUSED = r"Slack at http://127\.0\.0\.1:\d+/api/ refused it"
BOT_HINT = r"SLACK_BOT_TOKEN should be the bot token \(xoxb-…\): the Bot User OAuth Token, under OAuth & Permissions"
APP_HINT = r"SLACK_APP_TOKEN should be the app-level token \(xapp-…\): an App-Level Token with the connections:write"
QUICK_S = 0.5
"""The start-up bound in tests of a Slack that never answers (the real one is 30 s)."""


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
    with pytest.raises(ConfigError, match=rf"^SLACK_BOT_TOKEN: {REFUSED} \(invalid_auth\)\. {BOT_HINT}"):
        await serve(settings, port=0)


async def test_a_refused_app_token_is_named(
    slack: FakeSlack, make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    settings = make_settings(slack_bot_token="xoxb-good", slack_app_token="xapp-bad", slack_api_url=slack.api_url)
    with pytest.raises(ConfigError, match=rf"^SLACK_APP_TOKEN: {REFUSED} \(invalid_auth\)\. {APP_HINT}"):
        await serve(settings, port=0)
    assert slack.open_connections == []


async def test_check_uses_the_daemons_client_so_a_url_without_a_slash_works(
    slack: FakeSlack, make_settings: Callable[..., Settings]
) -> None:
    url = slack.api_url.rstrip("/")
    settings = make_settings(slack_bot_token="xoxb-good", slack_app_token="xapp-good", slack_api_url=url)
    assert await check.check_slack(settings) == (
        f'Slack at {url}/: bot @threadbot (UBOT) in team "Threadbot Test" (T1); '
        "Socket Mode (SLACK_APP_TOKEN opens a connection)"
    )
    refused = make_settings(slack_bot_token="xoxb-bad", slack_app_token="xapp-good", slack_api_url=url)
    with pytest.raises(ConfigError, match=rf"^SLACK_BOT_TOKEN: {REFUSED} \(invalid_auth\)\. {BOT_HINT}"):
        await check.check_slack(refused)


async def test_check_reports_an_unreachable_slack_in_one_line(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/api"
    settings = make_settings(slack_bot_token="xoxb-good", slack_app_token="xapp-good", slack_api_url=url)
    with pytest.raises(
        ThreadbotError, match=r"^cannot reach Slack at http://127\.0\.0\.1:\d+/api/ \(SLACK_API_URL\): "
    ):
        await check.check_slack(settings)
    monkeypatch.setattr(check, "CHECKS", {"slack": check.check_slack})
    assert await check.run_checks(settings) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "✓ configuration is valid"
    assert len(out) == 2 and out[1].startswith("✗ slack: cannot reach Slack at http://127.0.0.1:"), out


@pytest.mark.parametrize("method", ["auth.test", "apps.connections.open"])
async def test_run_against_a_silent_slack_says_what_check_says(
    slack: FakeSlack, make_settings: Callable[..., Settings], method: str
) -> None:
    slack.hold(method)  # accepted, never answered
    settings = make_settings(slack_bot_token="xoxb-good", slack_app_token="xapp-good", slack_api_url=slack.api_url)
    line = f"no answer from Slack at {slack.api_url} (SLACK_API_URL) within {QUICK_S:g}s"
    with pytest.raises(ThreadbotError) as info:
        await serve(settings, port=0, slack_timeout_s=QUICK_S)
    assert str(info.value) == line
    with pytest.raises(ThreadbotError) as info:
        await check.check_slack(settings, QUICK_S)
    assert str(info.value) == line


async def test_run_names_swapped_tokens_before_asking_slack(
    slack: FakeSlack, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(slack_bot_token="xapp-good", slack_app_token="xoxb-good", slack_api_url=slack.api_url)
    with pytest.raises(ConfigError, match=r"^SLACK_BOT_TOKEN and SLACK_APP_TOKEN are swapped"):
        await serve(settings, port=0)
    assert slack.calls == []
