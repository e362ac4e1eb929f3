"""`Provider` on the anthropic SDK: streaming, the SDK's own retries, errors made readable.

The SDK already retries 408/409/429/5xx/529 with backoff and honours
`retry-after`; this module only turns what is left into a `ModelError` whose
message can be shown to a person as is.
"""

from __future__ import annotations

import logging

import anthropic

from bot.errors import ContextOverflow, ModelError
from bot.model.caching import CacheTTL, mark_messages, system_blocks
from bot.types import JSON, ModelReply, ModelRequest, TextSink, Usage

log = logging.getLogger(__name__)


class AnthropicProvider:
    def __init__(
        self, *, model: str, max_tokens: int, client: anthropic.AsyncAnthropic, cache_ttl: CacheTTL | None = "5m"
    ) -> None:
        """`cache_ttl` None sends no cache breakpoints (see `bot.model.caching` for where they go)."""
        self._model = model
        self._max_tokens = max_tokens
        self._client = client
        self._cache_ttl = cache_ttl

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        extra: dict[str, JSON] = {}
        if request.tools:
            extra["tools"] = request.tools
        if request.tool_choice:
            extra["tool_choice"] = request.tool_choice
        try:
            async with self._client.messages.stream(
                model=self._model,
                max_tokens=request.max_tokens or self._max_tokens,
                system=system_blocks(request.system, self._cache_ttl),  # type: ignore[arg-type]
                messages=mark_messages(request.messages, self._cache_ttl),  # type: ignore[arg-type]
                **extra,
            ) as stream:
                async for event in stream:
                    if event.type == "text" and on_text is not None and event.text:
                        on_text(event.text)
                message = await stream.get_final_message()
        except anthropic.APIStatusError as exc:
            if exc.status_code == 400 and "prompt is too long" in str(exc):
                raise ContextOverflow("this conversation no longer fits the model's context window") from exc
            raise ModelError(_describe_status(exc)) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelError(f"could not reach the model API ({exc.__class__.__name__})") from exc
        except ValueError as exc:
            # The SDK raises ValueError when a tool call's streamed arguments are not valid JSON.
            log.warning("unreadable model response: %s", exc)
            raise ModelError("the model sent a tool call whose arguments are not valid JSON; please try again") from exc
        # warnings=False: a tool_use whose input is not an object is passed on as is (the turn answers it
        # with an error result) instead of making pydantic warn about the unexpected type.
        content = [block.model_dump(mode="json", exclude_none=True, warnings=False) for block in message.content]
        # The API rejects empty text blocks when they are sent back in the history.
        content = [block for block in content if block.get("type") != "text" or block.get("text")]
        return ModelReply(
            content=content, stop_reason=message.stop_reason or "end_turn", usage=_usage(message), model=self._model
        )

    async def close(self) -> None:
        await self._client.close()


def _usage(message: anthropic.types.Message) -> Usage:
    usage = message.usage
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens or 0,
        cache_write_tokens=usage.cache_creation_input_tokens or 0,
    )


def _describe_status(exc: anthropic.APIStatusError) -> str:
    status = exc.status_code
    if status == 529 or (isinstance(exc, anthropic.InternalServerError) and "overload" in str(exc).lower()):
        return "the model is overloaded right now; please try again in a minute"
    if status == 429:
        return "the model API is rate limiting us; please try again shortly"
    if status in (401, 403):
        return "the model API refused our credentials (check ANTHROPIC_API_KEY)"
    if status >= 500:
        return f"the model API failed (HTTP {status}); please try again"
    body = exc.body if isinstance(exc.body, dict) else {}
    detail = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else None
    log.warning("model request rejected: %s", exc)
    return f"the model rejected the request: {detail or exc.message}"
