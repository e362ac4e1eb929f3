"""The terminal edge: an interactive chat and the one-shot JSON runner, on the same engine."""

from __future__ import annotations

import getpass

from bot.agent.fence import said
from bot.types import Speaker


def console_key(session: str) -> str:
    """The engine's key for the console session named `session`."""
    return f"console:{session}"


def owns_console_session(key: str) -> bool:
    """The console fires the waits and reminders of console sessions only."""
    return key.startswith("console:")


def typed(line: str) -> str:
    """A line typed at the console, attributed to the local user in the form Slack messages take."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name (a container without a passwd entry)
        user = "console"
    return said(Speaker(f"local:{user}", user), line)
