"""Tool calls as entities: their model, the process-wide registry, and the system tools over it."""
