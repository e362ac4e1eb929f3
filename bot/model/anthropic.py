"""`Provider` on the anthropic SDK: streaming, the SDK's own retries, bounded waits, errors made readable.

A request costs only what it needs: its body is JSON bytes written by `RequestBody` (the fixed system
prompt and tools serialized once), sent through the SDK's client so that its retries, timeouts, headers
and error mapping all stay, and its answer is read as the SDK's raw event stream (`AsyncStream[object]`:
the API's JSON objects, no typed event or message models) by `StreamReader`.

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

import anthropic
import httpx2

from bot.errors import ContextOverflow, ModelError
from bot.model.caching import CacheTTL
from bot.model.request_body import RequestBody
from bot.model.stream_reader import StreamReader, StreamStalled
from bot.types import ModelReply, ModelRequest, TextSink

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
        self._body = RequestBody(model=model, cache_ttl=cache_ttl)

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        deadline = asyncio.timeout(self._request_timeout_s)
        try:
            body = self._body(request, request.max_tokens or self._max_tokens)
            async with deadline:
                return await self._complete(body, on_text)
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

    async def _complete(self, body: bytes, on_text: TextSink | None) -> ModelReply:
        """Stream the answer; a stall before anything was produced is retried like the SDK retries."""
        attempt = 0
        sent = time.monotonic()
        while True:
            reader = StreamReader(on_text)
            try:
                reply = await self._stream(body, reader)
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

    async def _stream(self, body: bytes, reader: StreamReader) -> ModelReply:
        # The SDK's retries (408/409/429/5xx/529, `retry-after`) cover everything until the stream starts.
        stream = await self._client.post(
            "/v1/messages", cast_to=object, content=body, stream=True, stream_cls=anthropic.AsyncStream[object]
        )
        async with stream:
            try:
                await reader.read(stream, self._idle_timeout_s)
            except (httpx2.TransportError, anthropic.APIConnectionError) as exc:
                # The body stopped coming once the stream had started (the SDK raises the transport's error as it
                # is, or wraps it in an APIConnectionError): what arrived is kept, the cut-off calls refused.
                log.warning("model stream broke off: %r", exc)
        if not reader.started:
            raise ModelError("the connection to the model broke before it answered; please try again")
        content = reader.content()
        stop_reason = reader.stop_reason
        if not reader.finished:
            if not any(block.get("type") == "tool_use" for block in content):
                raise ModelError("the model's answer broke off mid-stream; please try again")
            stop_reason = stop_reason or "tool_use"  # the calls it did send are answered, the cut-off ones refused
        return ModelReply(
            content=content,
            stop_reason=stop_reason or "end_turn",
            incomplete_tool_ids=reader.tool_inputs.incomplete(),
            usage=reader.counted(),
            model=self._model,
        )

    async def close(self) -> None:
        await self._client.close()


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
