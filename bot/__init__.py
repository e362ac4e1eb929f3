"""threadbot: every Slack thread a Claude agent session."""

__version__ = "0.1.0"
