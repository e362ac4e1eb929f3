"""What a Slack token's shape tells before Slack is asked, and where to get the right one.

Slack's tokens say what they are in their first letters: `xoxb-` is a bot token, `xapp-` an
app-level token, `xoxp-` a user's. The usual mistakes at set-up are the placeholder from
`.env.example` left in, the two tokens swapped, or a user token pasted for the bot's. Each is
caught here with one line that names the variable, says where its value was set (the environment
wins over `.env`, so editing `.env` would change nothing) and where in Slack's settings the right
token is found.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import Settings
from bot.variables import where_set


@dataclass(frozen=True, slots=True)
class TokenKind:
    variable: str
    prefix: str
    name: str
    where: str


BOT = TokenKind(
    "SLACK_BOT_TOKEN",
    "xoxb-",
    "the bot token",
    "the Bot User OAuth Token, under OAuth & Permissions once the app is installed to the workspace",
)
APP = TokenKind(
    "SLACK_APP_TOKEN",
    "xapp-",
    "the app-level token",
    "an App-Level Token with the connections:write scope, under Basic Information → App-Level Tokens",
)
OTHER_PREFIXES = {"xoxp-": "a user token", "xoxe-": "a refresh token", "xoxa-": "a workspace token"}


def token_problem(settings: Settings) -> str | None:
    """The first token whose shape is wrong, as one line naming its variable; None when both look right."""
    bot = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    app = settings.slack_app_token.get_secret_value() if settings.slack_app_token else None
    if bot is not None and app is not None and bot.startswith(APP.prefix) and app.startswith(BOT.prefix):
        return (
            f"{BOT.variable} and {APP.variable} are swapped: {BOT.variable}{where_set(BOT.variable)} holds an "
            f"{APP.prefix}… token and {APP.variable}{where_set(APP.variable)} an {BOT.prefix}… one"
        )
    for kind, value in ((BOT, bot), (APP, app)):
        if value is not None and (problem := _shape(kind, value)) is not None:
            return f"{kind.variable}{where_set(kind.variable)}: {problem}. {hint(kind)}"
    return None


def hint(kind: TokenKind) -> str:
    """Where the right token is found, for a message about a token Slack refused."""
    return f"{kind.variable} should be {kind.name} ({kind.prefix}…): {kind.where}."


def refused(kind: TokenKind, error: object, url: str) -> str:
    """The line for a token that Slack at `url` refused with `error`."""
    return f"{kind.variable}{where_set(kind.variable)}: Slack at {url} refused it ({error}). {hint(kind)}"


def _shape(kind: TokenKind, value: str) -> str | None:
    if "..." in value or "…" in value or value.rstrip("-") == kind.prefix.rstrip("-"):
        return "still the placeholder from .env.example"
    if value.startswith(kind.prefix):
        return None
    other = APP if kind is BOT else BOT
    if value.startswith(other.prefix):
        return f"holds {other.name} ({other.prefix}…), which belongs in {other.variable}"
    for prefix, name in OTHER_PREFIXES.items():
        if value.startswith(prefix):
            return f"holds {name} ({prefix}…), not {kind.name}"
    return f"does not look like {kind.name}: it should start with {kind.prefix}"
