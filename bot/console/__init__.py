"""The terminal edge: an interactive chat and the one-shot JSON runner, on the same engine."""


def console_key(session: str) -> str:
    """The engine's key for the console session named `session`."""
    return f"console:{session}"


def owns_console_session(key: str) -> bool:
    """The console fires the waits and reminders of console sessions only."""
    return key.startswith("console:")
