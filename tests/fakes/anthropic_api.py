"""Protocol-level fake of the Anthropic Messages API, served over 127.0.0.1.

Why a wire-level fake instead of mocking the SDK: the unmodified ``anthropic.AsyncAnthropic`` client talks to it,
so SSE parsing, retries, error mapping and the exact request JSON are all exercised. The fake also rejects requests
the real API would reject (tool_use/tool_result pairing, sampling parameters), so such bugs fail tests, not prod.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
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
Stall = Literal["silent", "pings"]
PING_INTERVAL_S = 0.02
"""How often a stalled ``pings`` stream pings: often enough that a ping-resets-the-clock bug shows at once."""
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
    so tests can observe (or cancel) a request that is mid-stream.

    ``stall`` makes the stream hang after the first delta until the client gives up: ``"silent"`` sends
    nothing more, ``"pings"`` sends only SSE pings. ``cut_input_at`` cuts the last tool_use's streamed JSON
    after that many characters; the stream then ends cleanly with ``stop_reason`` (``max_tokens``, as the
    real API does at the output limit), or, with ``disconnect``, the connection drops mid-message."""

    blocks: list[Block] = field(default_factory=list)
    stop_reason: StopReason = "end_turn"
    hold: asyncio.Event | None = None
    stall: Stall | None = None
    cut_input_at: int | None = None
    disconnect: bool = False

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

    @classmethod
    def cut_tool_input(cls, *uses: Block, keep_chars: int, disconnect: bool = False) -> Reply:
        """Tool calls whose last one's JSON input stops after ``keep_chars`` characters: at the output
        limit (stop_reason ``max_tokens``), or with ``disconnect`` by a connection that drops."""
        return cls(list(uses), "max_tokens", cut_input_at=keep_chars, disconnect=disconnect)

    @classmethod
    def stalled(cls, how: Stall, *, text: str = "Let me think") -> Reply:
        """A stream that sends one text delta, then hangs: silent, or sending only pings."""
        return cls([{"type": "text", "text": text}], stall=how)


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
    return _check_cache_markers(body) or _check_tools(body)


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


MAX_BREAKPOINTS = 4


def estimate_tokens(value: Any) -> int:
    """The fake's tokenizer: a quarter token per character of the value's canonical JSON."""
    return len(json.dumps(value, sort_keys=True, ensure_ascii=False)) // 4


def _prefix_segments(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request in the order the API caches it: tools, system blocks, then each message's blocks."""
    system = body.get("system") or []
    segments = [{"tool": t} for t in body.get("tools") or []]
    segments += [{"system": b} for b in ([text(system)] if isinstance(system, str) else system)]
    for i, message in enumerate(body["messages"]):
        segments += [{"message": i, "role": message["role"], "block": b} for b in _content_blocks(message)]
    return segments


def _strip_marker(segment: dict[str, Any]) -> dict[str, Any]:
    return {k: ({**v, "cache_control": None} if isinstance(v, dict) else v) for k, v in segment.items()}


def _is_breakpoint(segment: dict[str, Any]) -> bool:
    return any(isinstance(v, dict) and v.get("cache_control") for v in segment.values())


@dataclass
class PromptCache:
    """The API's prompt cache, as far as a test can see it: a request reads the longest earlier-written
    prefix that matches its own up to one of its breakpoints, byte for byte, and writes up to its last one.
    Prefixes shorter than ``min_tokens`` are not cached, as the API does below its minimum length."""

    min_tokens: int = 1024
    written: set[str] = field(default_factory=set)

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """input / cache read / cache write tokens of ``body``, recording what it writes."""
        segments = _prefix_segments(body)
        running = 0
        points: list[tuple[str, int]] = []  # (prefix key, tokens up to and including the breakpoint)
        canonical: list[str] = []
        for segment in segments:
            stripped = _strip_marker(segment)
            canonical.append(json.dumps(stripped, sort_keys=True, ensure_ascii=False))
            running += estimate_tokens(stripped)
            if _is_breakpoint(segment):
                points.append(("\n".join(canonical), running))
        read = max((tokens for key, tokens in points if key in self.written), default=0)
        cacheable = [(key, tokens) for key, tokens in points if tokens >= self.min_tokens]
        self.written.update(key for key, _ in cacheable)
        write = max(0, max((tokens for _, tokens in cacheable), default=0) - read)
        return {
            "input_tokens": max(1, running - read - write),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }


def without_cache_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_markers(v) for v in value]
    return value


def system_text(body: dict[str, Any]) -> str:
    """The system prompt of a request, whether sent as a string or as text blocks."""
    system = body.get("system") or ""
    return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)


def _check_cache_markers(body: dict[str, Any]) -> str | None:
    found = sum(1 for segment in _prefix_segments(body) if _is_breakpoint(segment))
    if found > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."
    return None


def _chunks(s: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(s) // n))
    return [s[k : k + size] for k in range(0, len(s), size)]


def _block_events(index: int, block: Block, cut_at: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    if block["type"] == "text":
        start: Block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"])]
    else:
        start = {**block, "input": {}}
        raw = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": c} for c in _chunks(raw[:cut_at])]
    return [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *[("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


class FakeAnthropic:
    """aiohttp server answering POST /v1/messages from a FIFO script, falling back to ``default``."""

    def __init__(
        self,
        default: ScriptItem | None = None,
        *,
        context_window: int | None = None,
        min_cacheable_tokens: int = 1024,
    ) -> None:
        """``context_window`` makes a request whose estimated tokens exceed it fail with the API's 400."""
        self.default: ScriptItem = default if default is not None else Reply.text_only("ok")
        self.context_window = context_window
        self.cache = PromptCache(min_cacheable_tokens)
        self.usages: list[dict[str, int]] = []
        """The usage reported for each answered request, in order."""
        self.raw_requests: list[dict[str, Any]] = []
        """Request bodies exactly as received."""
        self.requests: list[dict[str, Any]] = []
        """The same bodies without `cache_control` markers, so tests compare content, not where the cache breaks."""
        self.request_headers: list[dict[str, str]] = []  # per request, e.g. to see which API key was sent
        self.request_times: list[float] = []
        self.rejections: list[str] = []
        self.stalls = 0
        """How many streams have started hanging (a ``stall`` reply reached its hanging point)."""
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
        self.raw_requests.append(body)
        self.requests.append(without_cache_markers(body))
        self.request_headers.append({k.lower(): v for k, v in request.headers.items()})
        self.request_times.append(time.perf_counter())
        async with self._arrived:
            self._arrived.notify_all()
        problem = "request body is not a JSON object" if "_invalid_json" in body else validate_request(body)
        if problem is None and self.context_window is not None:
            size = estimate_tokens([body.get("tools"), body.get("system"), body["messages"]])
            if size > self.context_window:
                problem = f"prompt is too long: {size} tokens > {self.context_window} maximum"
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

    def _message(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        output_tokens = 1 + sum(len(json.dumps(b)) for b in reply.blocks) // 4
        usage = {**self.cache.usage(body), "output_tokens": output_tokens}
        self.usages.append(usage)
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply) -> web.StreamResponse:
        headers = {"content-type": "text/event-stream", "cache-control": "no-cache", "request-id": _rid()}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        message = self._message(body, reply)
        start = {**message, "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
        last = len(reply.blocks) - 1
        for index, block in enumerate(reply.blocks):
            events += _block_events(index, block, reply.cut_input_at if index == last else None)
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
        if reply.disconnect:  # the connection drops right after the cut input: no block stop, no message stop
            events = events[: max(k for k, (name, _) in enumerate(events) if name == "content_block_delta") + 1]
        hold_after = next((k for k, (name, _) in enumerate(events) if name == "content_block_delta"), 0)
        for k, (name, data) in enumerate(events):
            await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            if k == hold_after and reply.stall is not None:
                await self._stall(response, reply.stall)
                return response
            if k == hold_after and reply.hold is not None and not await self._wait_hold(reply.hold):
                return response  # the fake is shutting down; leave the stream truncated
        if reply.disconnect:
            # Closing the socket without the final chunk is what a dropped connection looks like to the client.
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write_eof()
        return response

    async def _stall(self, response: web.StreamResponse, how: Stall) -> None:
        """Hang until the client disconnects (the handler is then cancelled) or the fake stops."""
        self.stalls += 1
        if how == "silent":
            await self._closing.wait()
            return
        while not self._closing.is_set():
            await response.write(b'event: ping\ndata: {"type": "ping"}\n\n')
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), PING_INTERVAL_S)

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
