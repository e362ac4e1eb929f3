"""`python -m bot check`: say plainly what is wrong before the daemon has to find out."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import anthropic
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Settings
from bot.errors import StoreError
from bot.store import Store

Check = Callable[[Settings], Awaitable[str]]


async def check_database(settings: Settings) -> str:
    store = await Store.open(settings.db_path)
    await store.close()
    return f"database {settings.db_path} opens and is migrated"


async def check_slack(settings: Settings) -> str:
    if settings.slack_bot_token is None:
        raise RuntimeError("SLACK_BOT_TOKEN is not set (required for `run`)")
    if settings.slack_app_token is None and settings.slack_signing_secret is None:
        raise RuntimeError("HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN for Socket Mode)")
    client = AsyncWebClient(token=settings.slack_bot_token.get_secret_value(), base_url=settings.slack_api_url)
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        raise RuntimeError(f"Slack rejected SLACK_BOT_TOKEN: {exc.response.get('error')}") from None
    mode = "Socket Mode" if settings.slack_app_token else "HTTP mode"
    return f"Slack token works: bot {auth.get('user')} in team {auth.get('team')} ({mode})"


async def check_model(settings: Settings) -> str:
    try:
        async with anthropic.AsyncAnthropic(max_retries=1) as client:
            await client.messages.create(
                model=settings.bot_model, max_tokens=1, messages=[{"role": "user", "content": "ping"}]
            )
    except anthropic.APIStatusError as exc:
        raise RuntimeError(f"model {settings.bot_model}: HTTP {exc.status_code}: {exc.message}") from None
    except (anthropic.APIConnectionError, TypeError) as exc:
        raise RuntimeError(f"model API unreachable or not configured: {exc}") from None
    return f"model {settings.bot_model} answers"


CHECKS: dict[str, Check] = {"database": check_database, "slack": check_slack, "model": check_model}


async def run_checks(settings: Settings) -> int:
    """Run every check, print one line each, exit non-zero when any failed."""
    print("✓ configuration is valid")
    failures = 0
    for name, check in CHECKS.items():
        try:
            print(f"✓ {await check(settings)}")
        except (RuntimeError, StoreError) as exc:
            failures += 1
            print(f"✗ {name}: {exc}", file=sys.stdout)
    return 1 if failures else 0
