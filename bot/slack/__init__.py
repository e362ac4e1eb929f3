"""The Slack edge: bolt app, events to engine, rendering, and the chat.update budget."""
