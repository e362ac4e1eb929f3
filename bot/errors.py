"""The daemon's exceptions, under one base.

ThreadbotError
├── ConfigError        bad configuration; the CLI prints it as one line
│   └── PolicyError    a bad tool policy file (bot/policy.py)
├── StoreError         the database cannot be opened or migrated
│   ├── DataDirBusy    another process holds the SQLite database's lock
│   └── FencedError    this replica was declared dead: its writes are refused
├── ModelError         the model request failed after the SDK's own retries
│   └── ContextOverflow  the request no longer fits the model's context window
└── SlackError         a Slack Web API call failed after slack_sdk's own retries (bot/slack/client.py)
    ├── SlackUnreachable   no answer: the connection failed (a call with no answer in time raises TimeoutError)
    └── SlackResponseError Slack answered with an error
        ├── SlackRefused       retrying cannot change the answer (`error` says why)
        ├── SlackRateLimited   HTTP 429: try again after `retry_after_s`
        └── SlackUnavailable   a 5xx, or an `error` that says "try again later"
"""

from __future__ import annotations


class ThreadbotError(Exception):
    """Base of every error the daemon raises on purpose."""


class ConfigError(ThreadbotError):
    pass


class StoreError(ThreadbotError):
    pass


class DataDirBusy(StoreError):
    """The message names the data dir and the other process; the CLI prints it as one line."""


class FencedError(StoreError):
    """The replica's row is gone or no longer alive/stopping: another replica may be taking over its work."""


class ModelError(ThreadbotError):
    """Carries a short message fit to show to the user in the thread."""


class ContextOverflow(ModelError):
    """The API refused the request as too long: the turn compacts the history and tries once more."""


class SlackError(ThreadbotError):
    """Which Web API method failed, and how; the edge matches on the subclass, never on slack_sdk's errors."""

    def __init__(self, method: str, reason: str, *, error: str | None = None, status: int | None = None) -> None:
        super().__init__(f"{method}: {reason}")
        self.method = method
        self.reason = reason
        """A few words fit for a log line or a user: Slack's `error`, else the HTTP status or the network error."""
        self.error = error
        """Slack's `error` code (`channel_not_found`, `already_reacted`, …), when it gave one."""
        self.status = status


class SlackUnreachable(SlackError):
    """The network error that stopped the call is chained as `__cause__`."""


class SlackResponseError(SlackError):
    """Slack answered the call, with an error."""


class SlackRefused(SlackResponseError):
    pass


class SlackRateLimited(SlackResponseError):
    def __init__(self, method: str, reason: str, *, retry_after_s: float, error: str | None, status: int) -> None:
        super().__init__(method, reason, error=error, status=status)
        self.retry_after_s = retry_after_s


class SlackUnavailable(SlackResponseError):
    pass
