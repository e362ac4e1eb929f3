"""A real MCP server for the tests and the benchmark, written with the SDK's own server side (`MCPServer`).

Run it over stdio (`python tests/mcp_server.py`) or streamable HTTP
(`python tests/mcp_server.py --http PORT`). With `MCP_TEST_RECORD=path` it appends
one line per event to that file (`pid 123`, `start steps`, `cancelled steps`, …),
so a test can see what the SERVER saw, such as its handler really being cancelled.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

# The smallest valid PNG: one transparent pixel.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

server = MCPServer("threadbot-test", instructions="Tools for threadbot's tests.")


def record(event: str) -> None:
    path = os.environ.get("MCP_TEST_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{time.monotonic():.6f} {event}\n")


@server.tool(structured_output=False)
async def steps(n: int, ctx: Context, interval_ms: int = 100) -> str:
    """Work through n steps, reporting progress after each (every interval_ms)."""
    record("start steps")
    try:
        for step in range(1, n + 1):
            await anyio.sleep(interval_ms / 1000)
            await ctx.report_progress(step, n, f"step {step} of {n}")
    except anyio.get_cancelled_exc_class():
        record("cancelled steps")
        raise
    record("done steps")
    return f"finished {n} steps"


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged (the benchmark's cheapest call)."""
    return text


@server.tool()
def fail(reason: str = "the test asked for it") -> CallToolResult:
    """Always fails, with the reason as its error."""
    return CallToolResult(content=[TextContent(type="text", text=f"deliberate failure: {reason}")], is_error=True)


@server.tool()
def picture() -> list[TextContent | ImageContent]:
    """A one-pixel PNG with a caption."""
    data = base64.b64encode(PIXEL_PNG).decode()
    return [TextContent(type="text", text="one pixel"), ImageContent(type="image", data=data, mime_type="image/png")]


@server.tool(structured_output=False)
def huge(chars: int = 100_000) -> str:
    """A result far longer than anyone should read."""
    return ("0123456789" * (chars // 10 + 1))[:chars]


@server.tool()
def document() -> EmbeddedResource:
    """An embedded text resource."""
    notes = TextResourceContents(uri="file:///notes.txt", text="the notes", mime_type="text/plain")
    return EmbeddedResource(type="resource", resource=notes)


@server.tool()
def measure(width: int, height: int) -> dict[str, int]:
    """Structured output: the area of a rectangle."""
    return {"area": width * height}


@server.tool(structured_output=False)
async def grow(ctx: Context) -> str:
    """Adds a tool named `extra` and tells clients the list changed."""

    @server.tool(structured_output=False)
    def extra() -> str:
        """A tool that did not exist at the start."""
        return "extra works"

    await ctx.notify_tools_changed()
    return "added extra"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    record(f"pid {os.getpid()}")
    print(f"threadbot-test MCP server starting (pid {os.getpid()})", file=sys.stderr, flush=True)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
