"""What tokens cost: a small price table (US$ per million tokens) the operator can override.

The defaults are list prices for the current models at the time of writing; an
estimate, not an invoice. `BOT_MODEL_PRICES` replaces or adds models, e.g.
`{"claude-sonnet-5-5": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}`.
Cache writes are priced for the 5-minute cache; with `BOT_PROMPT_CACHE=1h` they cost
twice the input price, so set `cache_write` accordingly.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bot.types import Usage


class Price(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(ge=0)
    cache_write: float = Field(ge=0)

    def cost(self, usage: Usage) -> float:
        """US$ for `usage`."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


DEFAULT_PRICES: dict[str, Price] = {
    "claude-opus-5-5": Price(input=5, output=25, cache_read=0.5, cache_write=6.25),
    "claude-sonnet-5-5": Price(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-haiku-5-5": Price(input=1, output=5, cache_read=0.1, cache_write=1.25),
}
