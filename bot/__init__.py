"""threadbot: every Slack thread a Claude agent session."""
