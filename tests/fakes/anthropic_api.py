"""Protocol-level fake of the Anthropic Messages API, served over 127.0.0.1.

Why a wire-level fake instead of mocking the SDK: the unmodified ``anthropic.AsyncAnthropic`` client talks to it,
so SSE parsing, retries, error mapping and the exact request JSON are all exercised. The fake also rejects requests
the real API would reject (tool_use/tool_result pairing, sampling parameters), so such bugs fail tests, not prod.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import inspect
import itertools
import json
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

StopReason = Literal["end_turn", "tool_use", "max_tokens", "pause_turn", "refusal"]
Block = dict[str, Any]
_tool_ids = itertools.count(1)
_KNOWN_BLOCKS = frozenset(
    {"text", "image", "document", "search_result", "tool_use", "tool_result", "thinking", "redacted_thinking"}
    | {"server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result"}
)


def text(s: str) -> Block:
    """A text content block, as the model would produce it."""
    return {"type": "text", "text": s}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Block:
    """A tool_use block; ids are unique per process so multi-turn scripts never collide."""
    return {
        "type": "tool_use",
        "id": id or f"toolu_{next(_tool_ids):04d}{uuid.uuid4().hex[:20]}",
        "name": name,
        "input": input,
    }


@dataclass(frozen=True)
class Reply:
    """A scripted model turn. With ``hold`` the stream pauses after the first delta until the event is set,
    so tests can observe (or cancel) a request that is mid-stream."""

    blocks: list[Block] = field(default_factory=list)
    stop_reason: StopReason = "end_turn"
    hold: asyncio.Event | None = None

    def __post_init__(self) -> None:
        bad = [b.get("type") for b in self.blocks if b.get("type") not in ("text", "tool_use")]
        if bad:
            raise ValueError(f"FakeAnthropic can only stream text/tool_use blocks, got {bad}")

    @classmethod
    def text_only(cls, s: str, *, stop_reason: StopReason = "end_turn", hold: asyncio.Event | None = None) -> Reply:
        return cls([text(s)], stop_reason, hold)

    @classmethod
    def tools(cls, *uses: Block, text: str | None = None, hold: asyncio.Event | None = None) -> Reply:
        """Tool calls (optionally preceded by text, as the real model often does) with stop_reason tool_use."""
        prefix: list[Block] = [{"type": "text", "text": text}] if text else []
        return cls([*prefix, *uses], "tool_use", hold)


@dataclass(frozen=True)
class Failure:
    """An HTTP error answer with the real API's error body. ``headers=None`` means fast-retry headers for
    retryable statuses (the SDK treats ``retry-after: 0`` as "use backoff", so ``retry-after-ms: 1`` is sent too)."""

    status: int
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    headers: dict[str, str] | None = None


Outcome = Reply | Failure
Responder = Callable[[dict[str, Any]], Outcome | Awaitable[Outcome]]
ScriptItem = Reply | Failure | Responder


def _content_blocks(msg: dict[str, Any]) -> list[Block]:
    content = msg.get("content")
    return [text(content)] if isinstance(content, str) else list(content or [])


def _check_message(i: int, msg: Any) -> str | None:
    if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
        return f"messages.{i}: each message needs role 'user' or 'assistant'"
    content = msg.get("content")
    if not isinstance(content, str | list) or not content:
        return f"messages.{i}: all messages must have non-empty content"
    for j, block in enumerate(_content_blocks(msg)):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in _KNOWN_BLOCKS:
            return f"messages.{i}.content.{j}: unknown content block type {kind!r}"
        if kind == "text" and not block.get("text"):
            return f"messages.{i}.content.{j}: text content blocks must be non-empty"
        if kind in _MEDIA_TYPES and (problem := _check_source(kind, block.get("source"))):
            return f"messages.{i}.content.{j}.source: {problem}"
        if (kind == "tool_use" and msg["role"] != "assistant") or (kind == "tool_result" and msg["role"] != "user"):
            return f"messages.{i}.content.{j}: `{kind}` blocks are not allowed in {msg['role']} messages"
    return None


# What the real API accepts in a base64 `source` of an image / document block.
_MEDIA_TYPES = {
    "image": frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
    "document": frozenset({"application/pdf"}),
}


def _check_source(kind: str, source: Any) -> str | None:
    if not isinstance(source, dict) or source.get("type") != "base64":
        return "only base64 sources are accepted by this fake"
    if source.get("media_type") not in _MEDIA_TYPES[kind]:
        return f"media_type {source.get('media_type')!r} is not supported for {kind} blocks"
    try:
        base64.b64decode(str(source.get("data") or ""), validate=True)
    except (binascii.Error, ValueError):
        return "data is not valid base64"
    return None if source.get("data") else "data must be non-empty"


def _check_pairing(i: int, prev: dict[str, Any], msg: dict[str, Any]) -> str | None:
    """A user turn may only carry tool_results for the previous assistant turn's tool_uses, first and each once."""
    use_ids = [b["id"] for b in _content_blocks(prev) if b.get("type") == "tool_use"]
    blocks = _content_blocks(msg)
    leading = list(itertools.takewhile(lambda b: b.get("type") == "tool_result", blocks))
    if any(b.get("type") == "tool_result" for b in blocks[len(leading) :]):
        return f"messages.{i}: `tool_result` blocks must come first in the user message, before any other content"
    result_ids = [b.get("tool_use_id") for b in leading]
    unexpected = [r for r in result_ids if r not in use_ids]
    if unexpected:
        return (
            f"messages.{i}.content.{result_ids.index(unexpected[0])}: unexpected `tool_use_id` found in "
            f"`tool_result` blocks: {unexpected[0]}. Each `tool_result` block must have a corresponding "
            "`tool_use` block in the previous message."
        )
    if len(set(result_ids)) != len(result_ids):
        return f"messages.{i}: each `tool_use` id must have exactly one `tool_result` block"
    missing = [u for u in use_ids if u not in result_ids]
    if missing:
        return (
            f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block in "
            "the next message."
        )
    return None


def _check_tools(body: dict[str, Any]) -> str | None:
    names = [t.get("name") for t in body.get("tools") or []]
    choice = body.get("tool_choice") or {}
    if choice.get("type") == "tool" and choice.get("name") not in names:
        return f"tool_choice: tool {choice.get('name')!r} is not in `tools` ({names})"
    if choice.get("type") == "any" and not names:
        return "tool_choice: `any` requires at least one tool in `tools`"
    return None


def validate_request(body: dict[str, Any]) -> str | None:
    """Return why the real Messages API would answer 400 to ``body``, or None if it would accept it."""
    sampling = [k for k in ("temperature", "top_p", "top_k") if k in body]
    if sampling:
        return f"{sampling[0]}: sampling parameters are not supported by this model; remove {sampling}"
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, msg in enumerate(messages):
        if problem := _check_message(i, msg):
            return problem
    if messages[0]["role"] != "user":
        return "messages.0: the first message must use the `user` role"
    for i in range(1, len(messages) + 1):
        prev, msg = messages[i - 1], messages[i] if i < len(messages) else {"role": "user", "content": []}
        if i < len(messages) and prev["role"] == msg["role"]:
            return f"messages.{i}: roles must alternate between `user` and `assistant`, got two `{msg['role']}`"
        if msg["role"] == "user" and (problem := _check_pairing(i, prev, msg)):
            return problem
    return _check_tools(body)


def user_texts(request: dict[str, Any]) -> list[str]:
    """Every text string the user side sent (plain string content and text blocks), in order."""
    return [
        b["text"]
        for m in request.get("messages", [])
        if m.get("role") == "user"
        for b in _content_blocks(m)
        if b.get("type") == "text"
    ]


def user_blocks(request: dict[str, Any], kind: str) -> list[Block]:
    """Every user-side content block of one type (e.g. ``image``, ``document``), in order."""
    return [
        b
        for m in request.get("messages", [])
        if m.get("role") == "user"
        for b in _content_blocks(m)
        if b.get("type") == kind
    ]


def tool_results(request: dict[str, Any]) -> dict[str, Any]:
    """tool_use_id -> content of the tool_result blocks in the last user message."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    blocks = _content_blocks(users[-1]) if users else []
    return {b["tool_use_id"]: b.get("content") for b in blocks if b.get("type") == "tool_result"}


def _chunks(s: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(s) // n))
    return [s[k : k + size] for k in range(0, len(s), size)]


def _block_events(index: int, block: Block) -> list[tuple[str, dict[str, Any]]]:
    if block["type"] == "text":
        start: Block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"])]
    else:
        start = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": c} for c in _chunks(json.dumps(block["input"]))]
    return [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *[("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


class FakeAnthropic:
    """aiohttp server answering POST /v1/messages from a FIFO script, falling back to ``default``."""

    def __init__(self, default: ScriptItem | None = None) -> None:
        self.default: ScriptItem = default if default is not None else Reply.text_only("ok")
        self.requests: list[dict[str, Any]] = []
        self.request_times: list[float] = []
        self.rejections: list[str] = []
        self.url = ""
        self._queue: deque[ScriptItem] = deque()
        self._arrived = asyncio.Condition()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def script(self, *items: ScriptItem) -> None:
        """Queue answers; each /v1/messages request that passes validation consumes one."""
        self._queue.extend(items)

    @property
    def pending(self) -> int:
        """Scripted answers not yet consumed (assert 0 at the end of a test to catch unused script)."""
        return len(self._queue)

    async def start(self) -> None:
        self._closing.clear()
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        # handler_cancellation: a client that drops a held stream cancels the handler, like a real disconnect.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        self._closing.set()  # releases streams still waiting on a `hold` that the test never set
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_for_requests(self, n: int, timeout: float = 10) -> list[dict[str, Any]]:  # noqa: ASYNC109
        """Block until at least ``n`` requests arrived (event-driven, no polling); returns all requests so far."""
        try:
            async with asyncio.timeout(timeout), self._arrived:
                await self._arrived.wait_for(lambda: len(self.requests) >= n)
        except TimeoutError:
            raise TimeoutError(
                f"FakeAnthropic: waited {timeout}s for {n} request(s) but got {len(self.requests)}; "
                f"rejections={self.rejections}, unconsumed script items={len(self._queue)}"
            ) from None
        return list(self.requests)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        body = body if isinstance(body, dict) else {"_invalid_json": await request.text()}
        self.requests.append(body)
        self.request_times.append(time.perf_counter())
        async with self._arrived:
            self._arrived.notify_all()
        problem = "request body is not a JSON object" if "_invalid_json" in body else validate_request(body)
        if problem:
            self.rejections.append(problem)
            return self._error(Failure(400, "invalid_request_error", problem))
        item = self._queue.popleft() if self._queue else self.default
        outcome = item if isinstance(item, Reply | Failure) else item(body)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if isinstance(outcome, Failure):
            return self._error(outcome)
        if body.get("stream"):
            return await self._stream(request, body, outcome)
        message = self._message(body, outcome)
        return web.json_response({**message, "content": outcome.blocks}, headers={"request-id": _rid()})

    def _error(self, failure: Failure) -> web.Response:
        retryable = failure.status in (408, 409, 429) or failure.status >= 500
        headers = failure.headers if failure.headers is not None else {}
        if failure.headers is None and retryable:
            headers = {"retry-after": "0", "retry-after-ms": "1"}
        rid = _rid()
        body = {"type": "error", "error": {"type": failure.error_type, "message": failure.message}, "request_id": rid}
        return web.json_response(body, status=failure.status, headers={"request-id": rid, **headers})

    @staticmethod
    def _message(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        output_tokens = 1 + sum(len(json.dumps(b)) for b in reply.blocks) // 4
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 1 + len(json.dumps(body["messages"])) // 4, "output_tokens": output_tokens},
        }

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply) -> web.StreamResponse:
        headers = {"content-type": "text/event-stream", "cache-control": "no-cache", "request-id": _rid()}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        message = self._message(body, reply)
        start = {**message, "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(reply.blocks):
            events += _block_events(index, block)
        if len(events) > 1:  # the real API pings right after the first content_block_start
            events.insert(2, ("ping", {"type": "ping"}))
        delta = {"stop_reason": reply.stop_reason, "stop_sequence": None}
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": {"output_tokens": message["usage"]["output_tokens"]},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        hold_after = next((k for k, (name, _) in enumerate(events) if name == "content_block_delta"), 0)
        for k, (name, data) in enumerate(events):
            await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            if k == hold_after and reply.hold is not None and not await self._wait_hold(reply.hold):
                return response  # the fake is shutting down; leave the stream truncated
        await response.write_eof()
        return response

    async def _wait_hold(self, hold: asyncio.Event) -> bool:
        """Wait for ``hold`` or fake shutdown, whichever is first; True if the stream should continue."""
        waiters = [asyncio.ensure_future(hold.wait()), asyncio.ensure_future(self._closing.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return hold.is_set()


def _rid() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"
