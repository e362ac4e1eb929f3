"""Protocol-level fakes of external services (Anthropic API, ...) that real clients talk to over loopback."""
