"""Tool calls at work: the process-wide registry, its slots and writer, and the system tools over it.

The call entity itself is `bot.toolcall`, below the store, which saves it without importing this package."""
