"""The one place slack_sdk's failures are read: `SlackClient` raises the project's `SlackError` tree instead.

slack_sdk says "Slack refused this", "slow down" and "Slack is down" all as one `SlackApiError`, leaving each
caller to read the status, the `error` code and the `Retry-After` header again, and says "no connection" as
aiohttp's or the OS's own errors. Here each failure becomes one of a few types (bot/errors.py), after the SDK's
own retry handlers have had their go, so the edge decides by type:

- `SlackRefused`: Slack answered no, and will again (`error` says why: `channel_not_found`, `already_reacted`…);
- `SlackRateLimited`: HTTP 429, with the `retry_after_s` Slack asked for;
- `SlackUnavailable`: a 5xx, or an `error` that means "try again later";
- `SlackUnreachable`: no answer, the connection failed.

A call with no answer within its bound raises `TimeoutError`, as every bounded wait does, so a caller's own
`asyncio.timeout` and the session's read the same. Every call goes through `_request`, the further pages of a
paginated answer included, so nothing that uses this client sees a slack_sdk error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.web.slack_response import SlackResponse

from bot.errors import (
    SlackError,
    SlackRateLimited,
    SlackRefused,
    SlackResponseError,
    SlackUnavailable,
    SlackUnreachable,
)

TRANSIENT_ERRORS = frozenset({"ratelimited", "fatal_error", "internal_error", "service_unavailable", "request_timeout"})
"""`error` codes, with HTTP 200 or 4xx, that say "try again later" rather than "this request is wrong"."""


class SlackClient(AsyncWebClient):
    """An `AsyncWebClient` whose every failure is a `SlackError` (or `TimeoutError`); build it with `build_client`."""

    async def _request(self, *, http_verb: str, api_url: str, req_args: dict[str, Any]) -> dict[str, Any]:
        """Below every call and every further page: the answer is checked here, with the SDK's own `validate`."""
        method = api_url.removeprefix(self.base_url)
        try:
            res: dict[str, Any] = await super()._request(http_verb=http_verb, api_url=api_url, req_args=req_args)
            answer = AsyncSlackResponse(client=self, http_verb=http_verb, api_url=api_url, req_args=req_args, **res)
            answer.validate()  # type: ignore[no-untyped-call]  # slack_sdk leaves it unannotated
        except SlackApiError as exc:
            raise answered(method, exc.response) from exc
        except TimeoutError:
            raise
        except (aiohttp.ClientError, OSError) as exc:  # OSError covers refused connections
            raise unreachable(method, exc) from exc
        return res

    async def files_upload_v2(self, **kwargs: Any) -> AsyncSlackResponse:
        """The upload itself goes to a URL of its own, past `_request`: its failures are read here."""
        try:
            return await super().files_upload_v2(**kwargs)
        except SlackRequestError as exc:  # the upload URL refused the bytes
            raise SlackRefused("files.upload", str(exc)) from exc
        except (SlackError, TimeoutError):
            raise
        except (aiohttp.ClientError, OSError) as exc:
            raise unreachable("files.upload", exc) from exc


def answered(method: str, response: SlackResponse) -> SlackResponseError:
    """What an error answer of Slack's means: refused for good, rate limited, or unavailable for now."""
    status: int = response.status_code
    data = response.data
    error = data.get("error") if isinstance(data, dict) else None
    reason = error or f"HTTP {status}"
    if status == 429:
        return SlackRateLimited(
            method, reason, retry_after_s=retry_after_s(response.headers), error=error, status=status
        )
    if status >= 500 or error in TRANSIENT_ERRORS:
        return SlackUnavailable(method, reason, error=error, status=status)
    return SlackRefused(method, reason, error=error, status=status)


def unreachable(method: str, exc: BaseException) -> SlackUnreachable:
    return SlackUnreachable(method, str(exc) or type(exc).__name__)


def retry_after_s(headers: Mapping[str, str]) -> float:
    """Slack sends whole seconds; anything unreadable means 1 s rather than no pause at all."""
    try:
        return max(1.0, float(headers.get("Retry-After", "1")))
    except (TypeError, ValueError):
        return 1.0
