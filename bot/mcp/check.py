"""`threadbot check` for MCP servers: start each one, list its tools, stop it, and say how it went."""

from __future__ import annotations

import asyncio

from bot.config import Settings
from bot.errors import ThreadbotError
from bot.mcp.config import McpServerConfig, Transport, load_mcp_config


async def probe(config: McpServerConfig, timeout_s: float) -> str:
    """`✓ name: N tools` or `✗ name: why`, after one real start, handshake and listing."""
    # The SDK takes seconds to import; `threadbot check` without MCP servers should not wait for it.
    from bot.mcp.connection import connected_client, describe_failure, list_tools
    from bot.mcp.transport import StderrLog

    stderr = StderrLog(config.name) if config.transport is Transport.STDIO else None
    if stderr is not None:
        await stderr.start()
    try:
        async with connected_client(config, asyncio.Event(), stderr) as client:
            async with asyncio.timeout(min(config.startup_timeout_s, timeout_s)):
                tools = await list_tools(client, config)
    except Exception as exc:
        return f"✗ {config.name}: {describe_failure(config, exc)}"
    finally:
        if stderr is not None:
            await stderr.close()
    return f"✓ {config.name}: {len(tools)} tools"


async def check_mcp(settings: Settings, timeout_s: float) -> str:
    """Every enabled server of BOT_MCP_CONFIG, probed at once, each within its start-up bound and `timeout_s`;
    a ThreadbotError lists them when any failed."""
    if settings.bot_mcp_config is None:
        return "no MCP servers configured (BOT_MCP_CONFIG is not set)"
    servers = [server for server in load_mcp_config(settings.bot_mcp_config) if server.enabled]
    if not servers:
        return f"no enabled MCP servers in {settings.bot_mcp_config}"
    lines = await asyncio.gather(*(probe(server, timeout_s) for server in servers))
    listing = "\n".join(f"  {line}" for line in lines)
    failed = sum(line.startswith("✗") for line in lines)
    if failed:
        raise ThreadbotError(f"{failed} of {len(lines)} MCP servers failed\n{listing}")
    return f"MCP servers answer ({settings.bot_mcp_config})\n{listing}"
