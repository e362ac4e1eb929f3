"""An MCP `CallToolResult` as a tool result for the model.

Text stays text; an image the Messages API can show becomes an image block (the
result is then a `blocks_result`); an embedded resource becomes its text, or a note
with its URI and size when it is binary; `structuredContent` becomes JSON. An
`isError` result raises `ToolError` with the server's own words, so the call fails.
"""

from __future__ import annotations

import base64
import binascii
import json

import mcp_types as types

from tools.base import JSON, ToolError, blocks_result

MODEL_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def convert_result(result: types.CallToolResult) -> JSON:
    """What the call returns to the registry: a string, JSON, or a `blocks_result` when images are in it."""
    blocks = [block for item in result.content for block in _blocks(item)]
    if result.is_error:
        message = "\n".join(block["text"] for block in blocks if block["type"] == "text").strip()
        raise ToolError(message or "the MCP server reported an error without a message")
    has_images = any(block["type"] == "image" for block in blocks)
    if result.structured_content is not None and not has_images:
        # By the spec the text content is a serialisation of the structured one; the JSON is the better copy.
        return result.structured_content
    if result.structured_content is not None:
        blocks.append({"type": "text", "text": json.dumps(result.structured_content, ensure_ascii=False)})
    if has_images:
        return blocks_result(blocks)
    return "\n".join(block["text"] for block in blocks)


def _blocks(item: types.ContentBlock) -> list[dict[str, JSON]]:
    if isinstance(item, types.TextContent):
        return [_text(item.text)] if item.text else []  # the Messages API refuses an empty text block
    if isinstance(item, types.ImageContent):
        if item.mime_type in MODEL_IMAGE_TYPES:
            source = {"type": "base64", "media_type": item.mime_type, "data": item.data}
            return [{"type": "image", "source": source}]
        return [_text(f"[image of type {item.mime_type}, {_size(item.data)} bytes: a type the model cannot view]")]
    if isinstance(item, types.AudioContent):
        return [_text(f"[audio of type {item.mime_type}, {_size(item.data)} bytes: not shown to the model]")]
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, types.TextResourceContents):
            return [_text(f"[resource {resource.uri}]\n{resource.text}")]
        kind = resource.mime_type or "unknown type"
        return [_text(f"[resource {resource.uri}: {kind}, {_size(resource.blob)} bytes of binary data, not shown]")]
    if isinstance(item, types.ResourceLink):
        size = f", {item.size} bytes" if item.size is not None else ""
        return [_text(f"[resource link {item.uri} ({item.name}{size})]")]
    return [_text(f"[content of type {getattr(item, 'type', 'unknown')} not shown]")]


def _text(text: str) -> dict[str, JSON]:
    return {"type": "text", "text": text}


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
