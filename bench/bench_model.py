"""Model client benchmark: the daemon's CPU per model request, split by package, beside what the wire needs.

Run: `.venv/bin/python bench/bench_model.py [N]` (N requests per client, default 300; about a minute).
Prints figures; asserts nothing (issue 18: keep the model client's per-request work to what the request needs).

Each request is what a thread sends in a tool turn: the daemon's system prompt, 20 tools (the built-ins and
15 more of their size), and a history that grows by (assistant reply, user content) pairs to 40 messages,
then starts again; the fake answers a user message with text and a tool call, and a tool result with an
answer. The fake Messages API (tests/fakes/anthropic_api.py) runs in a child process, so the CPU measured
here (`time.process_time`, this process only) is the client's alone. Four clients, taking turns in rounds
so the machine's noise falls on all of them:

- `provider`: `AnthropicProvider.complete` of this tree on the client the daemon builds
  (`bot.model.client.anthropic_client`), as the turn loop calls it;
- `sdk stream`: the SDK's typed accumulating stream (`client.messages.stream`, its events and its message
  snapshot, dumped to dicts) on the SDK's default httpx2 transport, with the same cache marks: what the
  provider did before issue 18;
- `httpx2 floor`, `aiohttp floor`: httpx2 (the SDK's default transport) or aiohttp posting the body as JSON
  and reading the SSE lines with `json.loads`, nothing else: what any client on that library pays.

A second pass runs each client under cProfile and splits its self CPU time by package.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import aiohttp  # noqa: E402
import anthropic  # noqa: E402
import httpx2  # noqa: E402

from bot.agent.prompt import system_prompt  # noqa: E402
from bot.model.anthropic import AnthropicProvider  # noqa: E402
from bot.model.caching import mark_messages, system_blocks  # noqa: E402
from bot.model.client import anthropic_client  # noqa: E402
from bot.types import JSON, Message, ModelRequest  # noqa: E402
from tools import builtin_tools  # noqa: E402
from tools.base import tool  # noqa: E402

MODEL = "claude-sonnet-5-5"
HISTORY_MAX = 40
ROUNDS = 3
RESULT_CHARS = 1500

# Where self time goes, by the file a function lives in (first match wins).
BUCKETS = (
    ("bot.model", ("/bot/model/",)),
    ("anthropic", ("/anthropic/",)),
    ("httpx2/httpcore", ("/httpx", "/httpcore", "/h11/", "/anyio/", "/sniffio/")),
    ("aiohttp", ("/aiohttp/", "/yarl/", "/multidict/", "/propcache/")),
    ("pydantic", ("/pydantic", "pydantic_core")),
    ("json", ("/json/", "<method 'encode' of '_json", "<method 'decode' of", "_json.")),
    ("asyncio/ssl/socket", ("/asyncio/", "selectors", "epoll", "socket", "<built-in method select")),
    ("bench", ("bench_model.py",)),
)


# --- the fake, in a child process ----------------------------------------------------------------------------


def serve_fake() -> None:
    """The fake Messages API: text and a tool call for a user message, an answer for a tool result."""
    from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use

    def answer(body: dict[str, Any]) -> Reply:
        if tool_results(body):
            return Reply.text_only("The search found what you asked for. " * 6)
        return Reply.tools(tool_use("search_docs", {"query": "release notes for 4.2", "limit": 5}), text="Looking.")

    async def main() -> None:
        async with FakeAnthropic(default=answer, min_cacheable_tokens=10**9) as fake:
            print(fake.url, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


# --- what a thread sends ---------------------------------------------------------------------------------------


def tool_specs() -> list[dict[str, JSON]]:
    specs = [t.spec() for t in builtin_tools(shell=None)]
    properties: dict[str, JSON] = {
        "query": {"type": "string", "description": "What to look for, in the user's own words."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "How many results at most."},
        "scope": {"type": "string", "enum": ["all", "channel", "thread"], "description": "Where to search."},
    }
    for k in range(20 - len(specs)):
        name = "search_docs" if k == 0 else f"extra_tool_{k}"
        description = f"Looks things up in source {k} of the workspace and returns matching passages. " * 4
        specs.append(tool(name, description, properties, required=("query",))(lambda args, ctx: "").spec())
    return specs


class Thread:
    """A conversation that grows by each answer and the user's next content, up to HISTORY_MAX messages."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.asked = 0

    def next_request(self, system: str, tools: list[dict[str, JSON]]) -> ModelRequest:
        if not self.messages or len(self.messages) >= HISTORY_MAX:
            self.messages = []
            self._user(f"Please find the release notes, question {self.asked}.")
        self.asked += 1
        # A fresh list of fresh specs, as the turn loop's `Toolbox.specs()` builds them for each request.
        return ModelRequest(system=system, messages=list(self.messages), tools=[dict(t) for t in tools])

    def answered(self, content: list[dict[str, JSON]]) -> None:
        self.messages.append({"role": "assistant", "content": content})
        uses = [b for b in content if b.get("type") == "tool_use"]
        if uses:
            result = "passage " * (RESULT_CHARS // 8)
            self.messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": result} for b in uses],
                }
            )
        else:
            self._user(f"Thanks. And question {self.asked}?")

    def _user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})


# --- the clients -------------------------------------------------------------------------------------------------

Client = Callable[[ModelRequest], Awaitable[list[dict[str, JSON]]]]
Closer = Callable[[], Awaitable[object]]


def provider_client(url: str) -> tuple[Client, Closer]:
    client = anthropic_client(api_key="bench", base_url=url, max_retries=0)
    provider = AnthropicProvider(model=MODEL, max_tokens=1024, client=client)

    async def ask(request: ModelRequest) -> list[dict[str, JSON]]:
        return (await provider.complete(request, on_text=lambda delta: None)).content

    return ask, provider.close


def sdk_stream_client(url: str) -> tuple[Client, Closer]:
    client = anthropic.AsyncAnthropic(base_url=url, api_key="bench", max_retries=0)

    async def ask(request: ModelRequest) -> list[dict[str, JSON]]:
        params: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 1024,
            "system": system_blocks(request.system, "5m"),
            "messages": mark_messages(request.messages, "5m"),
            "tools": request.tools,
        }
        async with client.messages.stream(**params) as stream:
            async for _ in stream:
                pass
            message = stream.current_message_snapshot
        return [b.model_dump(mode="json", exclude_none=True, warnings=False) for b in message.content]

    return ask, client.close


def _body(request: ModelRequest) -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "max_tokens": 1024,
            "stream": True,
            "system": system_blocks(request.system, "5m"),
            "messages": mark_messages(request.messages, "5m"),
            "tools": request.tools,
        }
    ).encode()


class _Answer:
    """The answer's blocks from the SSE `data:` lines, read with `json.loads` and nothing else."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self._raw: dict[int, str] = {}

    def line(self, line: bytes | str) -> None:
        text = line.decode() if isinstance(line, bytes) else line
        if not text.startswith("data: "):
            return
        event = json.loads(text[6:])
        kind = event["type"]
        if kind == "content_block_start":
            self.blocks.append(event["content_block"])
        elif kind == "content_block_delta":
            delta, index = event["delta"], event["index"]
            if delta["type"] == "text_delta":
                self.blocks[index]["text"] += delta["text"]
            else:
                self._raw[index] = self._raw.get(index, "") + delta["partial_json"]

    def done(self) -> list[dict[str, JSON]]:
        for index, text in self._raw.items():
            self.blocks[index]["input"] = json.loads(text)
        return self.blocks


HEADERS = {"x-api-key": "bench", "anthropic-version": "2023-06-01", "content-type": "application/json"}


def httpx2_client(url: str) -> tuple[Client, Closer]:
    http = httpx2.AsyncClient(base_url=url, headers=HEADERS)

    async def ask(request: ModelRequest) -> list[dict[str, JSON]]:
        answer = _Answer()
        async with http.stream("POST", "/v1/messages", content=_body(request)) as response:
            async for line in response.aiter_lines():
                answer.line(line)
        return answer.done()

    return ask, http.aclose


def aiohttp_client(url: str) -> tuple[Client, Closer]:
    session: list[aiohttp.ClientSession] = []

    async def ask(request: ModelRequest) -> list[dict[str, JSON]]:
        if not session:
            session.append(aiohttp.ClientSession(headers=HEADERS))
        answer = _Answer()
        async with session[0].post(f"{url}/v1/messages", data=_body(request)) as response:
            async for line in response.content:
                answer.line(line)
        return answer.done()

    async def close() -> None:
        if session:
            await session[0].close()

    return ask, close


CLIENTS: dict[str, Callable[[str], tuple[Client, Closer]]] = {
    "provider": provider_client,
    "sdk stream": sdk_stream_client,
    "httpx2 floor": httpx2_client,
    "aiohttp floor": aiohttp_client,
}


# --- measuring -------------------------------------------------------------------------------------------------


async def run(ask: Client, n: int, system: str, tools: list[dict[str, JSON]]) -> float:
    """CPU seconds for n requests in one thread after another."""
    thread = Thread()
    started = time.process_time()
    for _ in range(n):
        thread.answered(await ask(thread.next_request(system, tools)))
    return time.process_time() - started


def split(profiler: cProfile.Profile) -> dict[str, float]:
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    shares = dict.fromkeys([name for name, _ in BUCKETS] + ["other"], 0.0)
    for (path, _, name), (_, _, self_time, _, _) in stats.items():
        where = f"{path} {name}"
        shares[next((b for b, marks in BUCKETS if any(mark in where for mark in marks)), "other")] += self_time
    return shares


def top(profiler: cProfile.Profile, n: int = 12) -> list[str]:
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][3])
    lines = []
    for (path, lineno, name), (_, calls, _, cumulative, _) in rows:
        if "/anthropic/" in path or "/bot/model/" in path:
            lines.append(f"{cumulative * 1000:8.1f} ms cum  {calls:6d}×  {Path(path).name}:{lineno} {name}")
        if len(lines) >= n:
            break
    return lines


async def measure(url: str, n: int) -> None:
    system = system_prompt(ZoneInfo("UTC"))
    tools = tool_specs()
    body_kb = len(json.dumps({"system": system, "tools": tools})) / 1000
    print(f"  {len(tools)} tools and the system prompt: {body_kb:.1f} KB; history up to {HISTORY_MAX} messages")
    made = {name: make(url) for name, make in CLIENTS.items()}
    clients = {name: ask for name, (ask, _) in made.items()}
    try:
        await compare(clients, n, system, tools)
    finally:
        for _, close in made.values():
            await close()


async def compare(clients: dict[str, Client], n: int, system: str, tools: list[dict[str, JSON]]) -> None:
    for ask in clients.values():  # warm-up: the SDK builds its lazy parts on first use
        await run(ask, 5, system, tools)
    cpu: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(ROUNDS):
        for name, ask in clients.items():
            cpu[name].append(await run(ask, n, system, tools) * 1000 / n)
    floor = min(cpu["httpx2 floor"])
    print(f"\n  CPU per request (ms; best / median of {ROUNDS} rounds of {n}), this process only:")
    for name, figures in cpu.items():
        best, median = min(figures), sorted(figures)[len(figures) // 2]
        print(f"    {name:<13} {best:6.2f} / {median:6.2f}   over httpx2's floor: {best - floor:+6.2f}")
    print("\n  profiled (cProfile self time per request, ms; profiling inflates the totals):")
    for name, ask in clients.items():
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        await run(ask, n, system, tools)
        profiler.disable()
        shares = split(profiler)
        parts = ", ".join(f"{k} {v * 1000 / n:.2f}" for k, v in shares.items() if v * 1000 / n >= 0.005)
        print(f"    {name:<13} total {sum(shares.values()) * 1000 / n:5.2f}: {parts}")
        if os.environ.get("BENCH_TOP") and "floor" not in name:
            for row in top(profiler):
                print(f"        {row}")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"threadbot model client benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    fake = subprocess.Popen(
        [sys.executable, __file__, "--fake"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert fake.stdout is not None
        url = fake.stdout.readline().strip()
        asyncio.run(measure(url, n))
    finally:
        assert fake.stdin is not None
        fake.stdin.close()
        fake.wait(10)


if __name__ == "__main__":
    if sys.argv[1:] == ["--fake"]:
        serve_fake()
    else:
        main()
