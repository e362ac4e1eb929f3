"""The terminal edge: an interactive chat and the one-shot JSON runner, on the same engine."""
