"""The daemon's exceptions, under one base.

ThreadbotError
├── ConfigError        bad configuration; the CLI prints it as one line
│   └── PolicyError    a bad tool policy file (bot/policy.py)
├── StoreError         the database cannot be opened or migrated
│   ├── DataDirBusy    another process holds the SQLite database's lock
│   └── FencedError    this replica was declared dead: its writes are refused
└── ModelError         the model request failed after the SDK's own retries
    └── ContextOverflow  the request no longer fits the model's context window
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
