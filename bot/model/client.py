"""The Anthropic model client, built from the settings, and built off the daemon's start path.

Importing the anthropic SDK costs about a second of CPU (pydantic builds its hundreds of types), more
than everything else a daemon loads before Slack says hello. `deferred_anthropic_provider` therefore
builds the client in a worker thread while the daemon opens its store and connects; the first model
call waits for it, which by then it rarely has to. Nothing here imports the SDK at module level.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bot.config import Settings
from bot.errors import ConfigError
from bot.types import ModelReply, ModelRequest, TextSink

if TYPE_CHECKING:
    import anthropic

    from bot.model.anthropic import AnthropicProvider

log = logging.getLogger(__name__)

MODEL_CONNECT_TIMEOUT_S = 10.0
MODEL_READ_TIMEOUT_S = 180.0
"""No read, write or wait for a pooled connection may take longer; the streamed API pings well within it."""


def anthropic_client(
    *, api_key: str | None, base_url: str | None, max_retries: int = 2, timeout: anthropic.Timeout | None = None
) -> anthropic.AsyncAnthropic:
    """The SDK's client as the daemon uses it: `timeout` replaces the daemon's bounds (connect fast, no
    stalled read beyond a few minutes).

    Its HTTP goes through the SDK's aiohttp transport (`DefaultAioHttpClient`, aiohttp being the Slack
    edge's library already): httpx2's own HTTP/1.1 stack parses and checks every header and chunk in
    Python, about twice the CPU of the whole request on aiohttp's C parser (`bench/bench_model.py`).
    The SDK's retries, timeouts and error mapping sit above the transport and stay as they are.
    """
    import anthropic

    return anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout or anthropic.Timeout(MODEL_READ_TIMEOUT_S, connect=MODEL_CONNECT_TIMEOUT_S),
        http_client=anthropic.DefaultAioHttpClient(),
        # Each request's span is the daemon's own `chat` span (bot/telemetry/agent.py); the SDK's would be a
        # second one, and even unrecorded it costs every request its attributes and trace headers.
        open_telemetry=False,
    )


def anthropic_provider(
    settings: Settings, *, max_retries: int = 2, timeout: anthropic.Timeout | None = None
) -> AnthropicProvider:
    """The model client, handed `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` from the settings.

    The SDK would read only `os.environ`, which a `.env` file never reaches. Without a key in the
    settings the SDK still looks for its other credentials (`ANTHROPIC_AUTH_TOKEN`, profiles).
    """
    from bot.model.anthropic import AnthropicProvider

    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    client = anthropic_client(
        api_key=key, base_url=settings.anthropic_base_url, max_retries=max_retries, timeout=timeout
    )
    if client.api_key is None and client.auth_token is None and client.credentials is None:
        raise ConfigError("ANTHROPIC_API_KEY: not set (the Anthropic API key the model is called with)")
    return AnthropicProvider(
        model=settings.bot_model,
        max_tokens=settings.bot_max_tokens,
        client=client,
        idle_timeout_s=settings.bot_model_idle_timeout_s,
        request_timeout_s=settings.bot_model_timeout_s,
        cache_ttl=settings.cache_ttl,
    )


class DeferredProvider:
    """A `Provider` whose client is still being built in a worker thread; model calls wait for it."""

    def __init__(self, settings: Settings) -> None:
        self._built: asyncio.Future[AnthropicProvider] = asyncio.ensure_future(
            asyncio.to_thread(anthropic_provider, settings)
        )

    async def ready(self) -> None:
        """Wait until the client is built (a failure is raised to the first model call, not here)."""
        await asyncio.wait([self._built])

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        provider = await asyncio.shield(self._built)
        return await provider.complete(request, on_text)

    async def close(self) -> None:
        await asyncio.wait([self._built])
        if not self._built.cancelled() and self._built.exception() is None:
            await self._built.result().close()


def deferred_anthropic_provider(settings: Settings) -> DeferredProvider | AnthropicProvider:
    """The daemon's model client: built in the background when `ANTHROPIC_API_KEY` is set, at once otherwise,
    so that missing credentials still stop the start with their one line before anything opens."""
    if settings.anthropic_api_key is None:
        return anthropic_provider(settings)
    return DeferredProvider(settings)
