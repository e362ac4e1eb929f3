"""`Provider` on the anthropic SDK: streaming, the SDK's own retries, bounded waits, errors made readable.

The SDK already retries 408/409/429/5xx/529 with backoff and honours
`retry-after`, but only until the answer starts streaming. What can go wrong
after that is handled here: a stream that goes quiet (silent, or sending only
pings) is given up after `idle_timeout_s` and asked again, as the SDK would, if
nothing of it reached anyone yet; the whole request, retries included, has
`request_timeout_s`; and a stream that breaks off keeps its finished tool calls
while the cut-off ones are named, so the turn answers them with an error instead
of running them. Whatever is left becomes a `ModelError` whose message can be
shown to a person as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

import anthropic
import httpx2

from bot.errors import ContextOverflow, ModelError
from bot.model.caching import CacheTTL, mark_messages, system_blocks
from bot.model.stream_reader import StreamReader, StreamStalled
from bot.types import JSON, ModelReply, ModelRequest, TextSink, Usage

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT_S = 90.0
DEFAULT_REQUEST_TIMEOUT_S = 600.0


class AnthropicProvider:
    def __init__(
        self,
        *,
        model: str,
        max_tokens: int,
        client: anthropic.AsyncAnthropic,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        cache_ttl: CacheTTL | None = "5m",
    ) -> None:
        """`cache_ttl` None sends no cache breakpoints (see `bot.model.caching` for where they go)."""
        self._model = model
        self._max_tokens = max_tokens
        self._client = client
        self._idle_timeout_s = idle_timeout_s
        self._request_timeout_s = request_timeout_s
        self._cache_ttl = cache_ttl

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        params: dict[str, Any] = {
            "model": self._model,
            "max_tokens": request.max_tokens or self._max_tokens,
            "system": system_blocks(request.system, self._cache_ttl),
            "messages": mark_messages(request.messages, self._cache_ttl),
        }
        if request.tools:
            params["tools"] = request.tools
        if request.tool_choice:
            params["tool_choice"] = request.tool_choice
        deadline = asyncio.timeout(self._request_timeout_s)
        try:
            async with deadline:
                return await self._complete(params, on_text)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise ModelError(
                f"the model did not finish its answer within {self._request_timeout_s:g}s; please try again"
            ) from None
        except anthropic.APIStatusError as exc:
            if exc.status_code == 400 and "prompt is too long" in str(exc):
                raise ContextOverflow("this conversation no longer fits the model's context window") from exc
            raise ModelError(_describe_status(exc)) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelError(f"could not reach the model API ({exc.__class__.__name__})") from exc
        except UnicodeEncodeError as exc:
            # A lone surrogate (or other text UTF-8 cannot carry) got into the conversation: the request
            # cannot even be written. The edges replace such characters; this names the cause if one slips by.
            log.warning("model request not encodable: %s", exc)
            raise ModelError(
                "the conversation holds text that cannot be encoded as UTF-8 "
                f"({exc.object[exc.start : exc.end]!a}); the request was not sent"
            ) from exc
        except ValueError as exc:
            # The SDK raises ValueError when a tool call's streamed arguments are not valid JSON.
            log.warning("unreadable model response: %s", exc)
            raise ModelError("the model sent a tool call whose arguments are not valid JSON; please try again") from exc

    async def _complete(self, params: dict[str, Any], on_text: TextSink | None) -> ModelReply:
        """Stream the answer; a stall before anything was produced is retried like the SDK retries."""
        attempt = 0
        sent = time.monotonic()
        while True:
            reader = StreamReader(on_text)
            try:
                reply = await self._stream(params, reader)
                first = reader.first_content_at
                return reply if first is None else dataclasses.replace(reply, first_token_s=first - sent)
            except StreamStalled:
                if reader.produced or attempt >= self._client.max_retries:
                    raise ModelError(
                        f"the model stopped sending its answer (nothing for {self._idle_timeout_s:g}s); "
                        "please try again"
                    ) from None
                attempt += 1
                log.warning("model stream stalled before any content; retrying (%d)", attempt)

    async def _stream(self, params: dict[str, Any], reader: StreamReader) -> ModelReply:
        async with self._client.messages.stream(**params) as stream:
            try:
                await reader.read(stream, self._idle_timeout_s)
            except httpx2.TransportError as exc:
                # Raised as it is by the SDK once the body streams; before that it is an APIConnectionError.
                log.warning("model stream broke off: %r", exc)
            if not reader.started:
                raise ModelError("the connection to the model broke before it answered; please try again")
            message = stream.current_message_snapshot
        # warnings=False: a tool_use whose input is not an object is passed on as is (the turn answers it
        # with an error result) instead of making pydantic warn about the unexpected type.
        content: list[dict[str, JSON]] = [
            block.model_dump(mode="json", exclude_none=True, warnings=False) for block in message.content
        ]
        # The API rejects empty text blocks when they are sent back in the history.
        content = [block for block in content if block.get("type") != "text" or block.get("text")]
        incomplete = reader.tool_inputs.incomplete()
        stop_reason = message.stop_reason
        if not reader.finished:
            if not any(block.get("type") == "tool_use" for block in content):
                raise ModelError("the model's answer broke off mid-stream; please try again")
            stop_reason = stop_reason or "tool_use"  # the calls it did send are answered, the cut-off ones refused
        return ModelReply(
            content=content,
            stop_reason=stop_reason or "end_turn",
            incomplete_tool_ids=incomplete,
            usage=_usage(message),
            model=self._model,
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
