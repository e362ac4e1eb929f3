"""Files people share in a thread, as content blocks the model can read.

Images (png, jpeg, gif, webp) become image blocks, PDFs document blocks, and
text-like files (plain text, Markdown, code, CSV, JSON, logs) text labelled with
the file's name. Each file is fetched from its `url_private_download` with the
bot token. A file that cannot be read is never dropped silently: it becomes a
one-line note saying why (too big, unsupported type, no access), so the model
can tell the person what it did not see.

Slack answers a download it will not serve with a redirect to its login page
(an HTML page, status 200, for a client that follows redirects), so redirects
are not followed and HTML where a file was expected counts as no access. The
bytes of an image or PDF are checked against their format's signature: a
mislabelled file would otherwise make the Messages API reject the whole turn.

The bot token is only ever sent to Slack's own hosts (or the host of
`SLACK_API_URL`): an external file (a Google Drive link shared in Slack) has a
`url_private` elsewhere, and the token must not go there.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.fence import untrusted
from bot.agent.protocol import text_block, truncate
from bot.config import Settings
from bot.errors import SlackResponseError

log = logging.getLogger(__name__)

Block = dict[str, Any]

CHUNK_BYTES = 64 * 1024
SLACK_HOST_SUFFIXES = (".slack.com", ".slack-gov.com")
PDF_SIGNATURE = b"%PDF-"
RESTARTED_WHILE_READING = "the bot restarted while reading it; ask to share it again"
TOO_SLOW = "Slack took too long to send it; ask to share it again"
IMAGE_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}
TEXT_MIMETYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
        "application/csv",
    }
)
_TEXT_SUFFIX_WORDS = """
    txt text md markdown rst csv tsv json jsonl ndjson yaml yml toml ini cfg conf env log
    py js mjs ts tsx jsx go rs java kt scala c h cc cpp hpp cs rb php pl lua r swift
    sh bash zsh ps1 sql html htm css scss xml svg diff patch tf proto graphql
"""
TEXT_SUFFIXES = frozenset(f".{word}" for word in _TEXT_SUFFIX_WORDS.split())


@dataclass(frozen=True, slots=True)
class FileLimits:
    max_bytes: int
    """Largest file fetched at all (BOT_FILE_MAX_BYTES)."""
    total_max_bytes: int
    """All files of one message together (BOT_FILES_MAX_TOTAL_BYTES): a request over the API's size limit
    would fail, and stay in the session's history failing every later turn."""
    text_max_chars: int
    """A text file longer than this is cut, with a note saying so (BOT_FILE_TEXT_MAX_CHARS)."""

    @classmethod
    def of(cls, settings: Settings) -> FileLimits:
        return cls(settings.bot_file_max_bytes, settings.bot_files_max_total_bytes, settings.bot_file_text_max_chars)


class Skipped(Exception):
    """A file the model will not see; the message is the reason, for its one-line note."""


class FileReader:
    """Turns the `files` of a Slack message into content blocks, one file after another."""

    def __init__(self, client: AsyncWebClient, limits: FileLimits) -> None:
        self._client = client
        self._limits = limits

    async def blocks(self, files: Sequence[Any]) -> list[Block]:
        """Blocks for every file, in order; a file that cannot be read becomes its note, never an error."""
        blocks: list[Block] = []
        left = self._limits.total_max_bytes
        for item in files:
            meta = item if isinstance(item, dict) else {}
            try:
                file_blocks, used = await self._read(meta, left)
            except Exception:
                log.exception("reading the Slack file %s failed", _name(meta))
                file_blocks, used = [_note(_name(meta), "it could not be read (internal error)")], 0
            blocks += file_blocks
            left -= used
        return blocks

    async def _read(self, item: dict[str, Any], left: int) -> tuple[list[Block], int]:
        """The file's blocks and the bytes it took from what the message has `left` (a note and 0 if skipped)."""
        name = _name(item)
        try:
            meta = await self._complete(item)
            name = _name(meta)
            kind = kind_of(meta)
            if kind is None:
                raise Skipped(f"unsupported type ({meta.get('mimetype') or meta.get('filetype') or 'unknown'})")
            size = meta.get("size")
            if isinstance(size, int):
                self._check_size(size, left)
            if meta.get("is_external") or meta.get("mode") == "external":
                raise Skipped("unsupported type (a link to a file kept outside Slack)")
            url = str(meta.get("url_private_download") or meta.get("url_private") or "")
            if not url:
                raise Skipped("no access (Slack gave no download link)")
            if not self._is_slack(url):
                raise Skipped("no access (its link is not on a Slack host)")
            data = await self._download(url, str(meta.get("mimetype") or ""), min(left, self._limits.max_bytes))
            # The download stops just past the cap, so a size found here is a lower bound.
            self._check_size(len(data), left, at_least=True)
            return self._content(kind, name, data), len(data)
        except Skipped as reason:
            log.info("file %s not given to the model: %s", name, reason)
            return [_note(name, str(reason))], 0

    def _is_slack(self, url: str) -> bool:
        host = (urlsplit(url).hostname or "").lower()
        return host.endswith(SLACK_HOST_SUFFIXES) or host == urlsplit(self._client.base_url).hostname

    def _check_size(self, size: int, left: int, *, at_least: bool = False) -> None:
        limits = self._limits
        shown = f"over {_size(min(left, limits.max_bytes))}" if at_least else _size(size)
        if size > limits.max_bytes:
            raise Skipped(f"too big ({shown}; the limit is {_size(limits.max_bytes)})")
        if size > left:
            total = _size(limits.total_max_bytes)
            raise Skipped(f"too big to go with the message's other files ({shown}; {total} in all is the limit)")

    async def _complete(self, item: dict[str, Any]) -> dict[str, Any]:
        """An event may carry a stub (`file_access: check_file_info`); files.info has the rest."""
        if item.get("url_private_download") or item.get("url_private") or not item.get("id"):
            return item
        try:
            response = await self._client.files_info(file=str(item["id"]))
        except SlackResponseError as exc:
            raise Skipped(f"no access (files.info: {exc.error})") from None
        file = response.get("file")
        if not isinstance(file, dict):
            raise Skipped("no access (files.info returned no file)")
        return file

    async def _download(self, url: str, mimetype: str, cap: int) -> bytes:
        """At most `cap` + 1 bytes: enough to know a file is over the cap without reading all of it."""
        session = self._client.session
        if session is not None:
            return await self._fetch(session, url, mimetype, cap)
        async with aiohttp.ClientSession() as own:
            return await self._fetch(own, url, mimetype, cap)

    async def _fetch(self, session: aiohttp.ClientSession, url: str, mimetype: str, cap: int) -> bytes:
        headers = {"Authorization": f"Bearer {self._client.token}"}
        timeout = aiohttp.ClientTimeout(total=self._client.timeout)
        try:
            async with session.get(url, headers=headers, allow_redirects=False, timeout=timeout) as response:
                if 300 <= response.status < 400 or response.status in (401, 403, 404):
                    raise Skipped("no access (Slack would not let the bot download it; it needs files:read)")
                if response.status != 200:
                    raise Skipped(f"download failed (HTTP {response.status})")
                if response.content_type == "text/html" and not mimetype.startswith("text/html"):
                    raise Skipped("no access (Slack answered with a sign-in page instead of the file)")
                data = bytearray()
                async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                    data += chunk
                    if len(data) > cap:
                        break
                return bytes(data)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Skipped(f"download failed ({type(exc).__name__})") from None

    def _content(self, kind: str, name: str, data: bytes) -> list[Block]:
        label = text_block(untrusted("file", f"(its {kind} follows)", name=name))
        if kind == "image":
            media_type = image_type(data)
            if media_type is None:
                raise Skipped("unsupported type (not a png, jpeg, gif or webp image)")
            source = {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()}
            return [label, {"type": "image", "source": source}]
        if kind == "pdf":
            if not data.startswith(PDF_SIGNATURE):
                raise Skipped("unsupported type (not a PDF)")
            source = {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(data).decode()}
            return [label, {"type": "document", "source": source, "title": name}]
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise Skipped("unsupported type (binary, not UTF-8 text)") from None
        if not text.strip():
            return [text_block(untrusted("file", "(empty)", name=name))]
        return [text_block(untrusted("file", truncate(text, self._limits.text_max_chars), name=name))]


def kind_of(meta: dict[str, Any]) -> str | None:
    """ "image", "pdf" or "text" by what Slack says the file is; None for anything else."""
    mimetype = str(meta.get("mimetype") or "").lower().partition(";")[0].strip()
    suffix = PurePosixPath(str(meta.get("name") or "")).suffix.lower()
    if mimetype in ("image/png", "image/jpeg", "image/gif", "image/webp"):
        return "image"
    if mimetype == "application/pdf" or (not mimetype and suffix == ".pdf"):
        return "pdf"
    if mimetype.startswith("text/") or mimetype in TEXT_MIMETYPES or suffix in TEXT_SUFFIXES:
        return "text"
    return None


def image_type(data: bytes) -> str | None:
    """The image format the bytes really are (the API checks), whatever the file was called."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for kind, signs in IMAGE_SIGNATURES.items() if data.startswith(signs)), None)


def unread(files: Sequence[Any], reason: str = RESTARTED_WHILE_READING) -> list[Block]:
    """What a message holds in place of its files until they are read: if the process dies while reading
    them, the resumed turn tells the model why they are missing instead of dropping them silently."""
    return [_note(_name(item if isinstance(item, dict) else {}), reason) for item in files]


def _note(name: str, reason: str) -> Block:
    return text_block(untrusted("file", f"(skipped: {reason})", name=name))


def _name(meta: dict[str, Any]) -> str:
    return str(meta.get("name") or meta.get("title") or meta.get("id") or "a file")


def _size(count: int) -> str:
    """Decimal units, as BOT_FILE_MAX_BYTES's default (5,000,000 bytes) is written."""
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f} MB"
    return f"{count / 1_000:.0f} KB" if count >= 1_000 else f"{count} bytes"
