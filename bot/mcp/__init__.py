"""MCP servers as tool sources: configuration, connections kept alive, their tools for the model."""
