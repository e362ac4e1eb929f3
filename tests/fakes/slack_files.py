"""The files part of the fake Slack: shared files, their authenticated downloads, and `files_upload_v2`'s three steps.

Kept apart from ``slack_api.py`` so the rest of the fake can change without touching it; ``FakeSlack`` builds
one ``FakeFiles`` and lets it add its methods and routes. What it copies from real Slack:

- ``url_private_download`` needs ``Authorization: Bearer <bot token>``. Without a token that Slack accepts (or for
  a file the bot may not see) the answer is a 302 to a login page, which serves HTML with status 200: a client
  that follows redirects gets an HTML page instead of the file, and has to notice.
- A file in an event may come as a stub (``"file_access": "check_file_info"``) without URLs; ``files.info``
  gives the whole object, or ``file_not_found`` for a file the bot may not see.
- ``files.getUploadURLExternal`` (filename, length) → an upload URL and a file id; the bytes are POSTed there;
  ``files.completeUploadExternal`` (files, channel_id, thread_ts, initial_comment) shares them: a bot message
  with the file appears in the thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from fakes.slack_api import FakeSlack

JsonDict = dict[str, Any]
LOGIN_PAGE = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"


@dataclass
class FakeFile:
    """A file in the fake workspace: shared by a test user, or uploaded by the bot."""

    id: str
    name: str
    content: bytes
    mimetype: str
    filetype: str
    user: str
    title: str = ""
    accessible: bool = True  # False: the bot may not see it (files.info says file_not_found, downloads redirect)
    channel: str | None = None
    thread_ts: str | None = None
    comment: str = ""
    message_ts: str | None = None

    def to_api(self, base_url: str) -> JsonDict:
        url = f"{base_url}/files-pri/T1-{self.id}"
        return {
            "id": self.id,
            "created": int(time.time()),
            "name": self.name,
            "title": self.title or self.name,
            "mimetype": self.mimetype,
            "filetype": self.filetype,
            "user": self.user,
            "size": len(self.content),
            "mode": "hosted",
            "is_external": False,
            "url_private": f"{url}/{self.name}",
            "url_private_download": f"{url}/download/{self.name}",
        }

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


@dataclass
class Download:
    """One GET of a file URL: which file, and whether the token was good enough to get its bytes."""

    file_id: str
    authorized: bool
    time: float


@dataclass
class _PendingUpload:
    filename: str
    length: int
    data: bytes | None = None


@dataclass
class FakeFiles:
    slack: FakeSlack
    files: dict[str, FakeFile] = field(default_factory=dict)
    downloads: list[Download] = field(default_factory=list)
    refuse_uploads: bool = False
    """The upload URL answers 500, as the file host does when it will not take the bytes."""
    _uploads: dict[str, _PendingUpload] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _held: asyncio.Event | None = None

    def handlers(self) -> dict[str, Callable[[JsonDict, str | None], JsonDict]]:
        return {
            "files.info": self._files_info,
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/files-pri/{key}/download/{name}", self._handle_download)
        app.router.add_get("/files-pri/{key}/{name}", self._handle_download)
        app.router.add_post("/upload/v1/{file_id}", self._handle_upload)
        app.router.add_get("/login", self._handle_login)

    # ---- test-side builders ---------------------------------------------------------------------------------

    def hold_downloads(self) -> asyncio.Event:
        """Answer no download (each is listed in ``downloads`` when it arrives) until the returned event is set."""
        self._held = asyncio.Event()
        return self._held

    def share(
        self,
        name: str,
        content: bytes | str,
        mimetype: str,
        filetype: str = "",
        *,
        user: str = "U1",
        accessible: bool = True,
        stub: bool = False,
    ) -> JsonDict:
        """Store a file a user shares and return its object as an event carries it (``stub``: the short form
        with ``file_access: check_file_info``, which the bot must complete with files.info)."""
        data = content.encode() if isinstance(content, str) else content
        file = self._add(name, data, mimetype, filetype or name.rpartition(".")[2], user, accessible=accessible)
        if stub:
            return {"id": file.id, "mode": "file_access", "file_access": "check_file_info"}
        return file.to_api(self.slack.base_url)

    def attach(self, event: JsonDict, *files: JsonDict) -> JsonDict:
        """The event as Slack sends a message with files: subtype ``file_share`` and a ``files`` list."""
        return {**event, "subtype": "file_share", "files": list(files)}

    def uploaded(self, channel: str, thread_ts: str) -> list[FakeFile]:
        """Files the bot uploaded into a thread, oldest first."""
        return [f for f in self.files.values() if f.channel == channel and f.thread_ts == thread_ts]

    def _add(
        self, name: str, data: bytes, mimetype: str, filetype: str, user: str, *, accessible: bool = True
    ) -> FakeFile:
        file = FakeFile(f"F{next(self._ids):08d}", name, data, mimetype, filetype, user, accessible=accessible)
        self.files[file.id] = file
        return file

    # ---- HTTP: downloads and uploads ------------------------------------------------------------------------

    async def _handle_download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["key"].partition("-")[2]
        file = self.files.get(file_id)
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        authorized = file is not None and file.accessible and self._token_ok(token)
        self.downloads.append(Download(file_id, authorized, time.perf_counter()))
        self.slack._notify()
        if self._held is not None:
            await self._held.wait()
        if file is None or not authorized:
            raise web.HTTPFound(f"/login?redir={request.path}")
        return web.Response(body=file.content, content_type=file.mimetype)

    async def _handle_login(self, request: web.Request) -> web.Response:
        return web.Response(text=LOGIN_PAGE, content_type="text/html")

    async def _handle_upload(self, request: web.Request) -> web.Response:
        pending = self._uploads.get(request.match_info["file_id"])
        if self.refuse_uploads:
            return web.Response(status=500, text="upload failed")
        if pending is None:
            return web.Response(status=404, text="not found")
        pending.data = await request.read()
        return web.Response(text=f"OK - {len(pending.data)}", content_type="text/plain")

    def _token_ok(self, token: str) -> bool:
        if self.slack.tokens is not None and token not in self.slack.tokens:
            return False
        return token.startswith(("xoxb-", "xoxp-"))

    # ---- Web API methods ------------------------------------------------------------------------------------

    def _files_info(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import SlackError, _require

        file = self.files.get(_require(params, "file", "file_not_found"))
        if file is None or not file.accessible:
            raise SlackError("file_not_found")
        return {"file": file.to_api(self.slack.base_url), "comments": [], "response_metadata": {"next_cursor": ""}}

    def _get_upload_url(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import SlackError, _require

        filename = _require(params, "filename")
        length = _require(params, "length")
        if not length.isdigit() or int(length) <= 0:
            raise SlackError("invalid_length")
        file_id = f"F{next(self._ids):08d}"
        self._uploads[file_id] = _PendingUpload(filename, int(length))
        return {"upload_url": f"{self.slack.base_url}/upload/v1/{file_id}", "file_id": file_id}

    def _complete_upload(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import BOT_ID, BOT_USER_ID, SlackError, StoredMessage, _require

        raw = _require(params, "files")
        try:
            items = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise SlackError("invalid_arguments") from None
        done: list[FakeFile] = []
        for item in items:
            pending = self._uploads.get(str(item.get("id")))
            if pending is None or pending.data is None:
                raise SlackError("file_not_found")
            if len(pending.data) != pending.length:
                raise SlackError("file_upload_size_mismatch")
        for item in items:
            pending = self._uploads.pop(str(item["id"]))
            assert pending.data is not None
            mimetype, filetype = _guess_type(pending.filename)
            file = FakeFile(str(item["id"]), pending.filename, pending.data, mimetype, filetype, BOT_USER_ID)
            file.title = str(item.get("title") or pending.filename)
            self.files[file.id] = file
            done.append(file)
        channel = params.get("channel_id") or None
        if channel:
            thread_ts = params.get("thread_ts") or None
            comment = str(params.get("initial_comment") or "")
            message = self.slack._store(
                StoredMessage(
                    channel=str(channel),
                    ts=self.slack._next_ts(),
                    text=comment,
                    user=BOT_USER_ID,
                    thread_ts=thread_ts,
                    bot_id=BOT_ID,
                    extra={"files": [f.to_api(self.slack.base_url) for f in done]},
                )
            )
            for file in done:
                file.channel, file.thread_ts = str(channel), thread_ts
                file.comment, file.message_ts = comment, message.ts
        return {"files": [{"id": f.id, "title": f.title} for f in done]}


def _guess_type(filename: str) -> tuple[str, str]:
    import mimetypes

    suffix = filename.rpartition(".")[2].lower() if "." in filename else "binary"
    return mimetypes.guess_type(filename)[0] or "application/octet-stream", suffix
