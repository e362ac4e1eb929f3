"""`python -m bot check`: say plainly what is wrong before the daemon has to find out."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

from bot.app import anthropic_provider
from bot.config import Settings
from bot.errors import ConfigError, ModelError, ThreadbotError
from bot.slack.app import build_client, identify, slack_http_session
from bot.store import Store
from bot.types import ModelRequest

Check = Callable[[Settings], Awaitable[str]]


async def check_database(settings: Settings) -> str:
    store = await Store.open(settings.db_path)
    await store.close()
    return f"database {settings.db_path} opens and is migrated"


async def check_slack(settings: Settings) -> str:
    """The token, through the very client and `auth.test` that `run` starts with, so both agree on the URL."""
    async with slack_http_session() as session:
        client = build_client(settings, session)  # ConfigError without a token
        if settings.slack_app_token is None and settings.slack_signing_secret is None:
            raise RuntimeError("HTTP mode needs SLACK_SIGNING_SECRET (or set SLACK_APP_TOKEN for Socket Mode)")
        me = await identify(client)
    mode = "Socket Mode" if settings.slack_app_token else "HTTP mode"
    return f"Slack token works: bot <@{me.user_id}> in team {me.team_id} ({mode})"


async def check_model(settings: Settings) -> str:
    try:
        provider = anthropic_provider(settings, max_retries=1)
        try:
            await provider.complete(
                ModelRequest(system="", messages=[{"role": "user", "content": "ping"}], tools=[], max_tokens=1)
            )
        finally:
            await provider.close()
    except (ConfigError, ModelError) as exc:
        raise RuntimeError(f"model {settings.bot_model}: {exc}") from None
    return f"model {settings.bot_model} answers"


CHECKS: dict[str, Check] = {"database": check_database, "slack": check_slack, "model": check_model}


async def run_checks(settings: Settings) -> int:
    """Run every check, print one line each, exit non-zero when any failed."""
    print("✓ configuration is valid")
    failures = 0
    for name, check in CHECKS.items():
        try:
            print(f"✓ {await check(settings)}")
        except (RuntimeError, ThreadbotError) as exc:
            failures += 1
            print(f"✗ {name}: {exc}", file=sys.stdout)
    return 1 if failures else 0
