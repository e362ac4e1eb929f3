"""The daemon's model client is built off the start path and behaves as the client it wraps."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from fakes.anthropic_api import FakeAnthropic, Reply

from bot.config import Settings
from bot.errors import ConfigError
from bot.model.anthropic import AnthropicProvider
from bot.model.client import DeferredProvider, deferred_anthropic_provider
from bot.types import ModelRequest

REQUEST = ModelRequest(system="be brief", messages=[{"role": "user", "content": "hi"}], tools=[])


async def test_a_deferred_client_answers_once_built_and_closes(make_settings: Callable[..., Settings]) -> None:
    async with FakeAnthropic(default=Reply.text_only("hello there")) as model:
        settings = make_settings(anthropic_api_key="sk-test", anthropic_base_url=model.url)
        provider = deferred_anthropic_provider(settings)
        assert isinstance(provider, DeferredProvider)
        seen: list[str] = []
        reply = await provider.complete(REQUEST, seen.append)
        assert reply.content[0]["text"] == "hello there" and "".join(seen) == "hello there"
        assert len(model.requests) == 1
        await provider.close()


async def test_without_a_key_the_client_is_built_at_once_so_a_missing_credential_stops_the_start(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY: not set"):
        deferred_anthropic_provider(make_settings())
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-from-the-environment")
    assert isinstance(deferred_anthropic_provider(make_settings()), AnthropicProvider)


async def test_a_client_closed_before_it_was_ever_used_closes(make_settings: Callable[..., Settings]) -> None:
    provider = DeferredProvider(make_settings(anthropic_api_key="sk-test"))
    await provider.ready()
    await provider.close()


def test_the_daemon_does_not_import_the_model_sdk_before_it_connects() -> None:
    """What `run` imports at module level: the SDK (about a second of CPU) is not among it."""
    probe = "import sys, bot.__main__, bot.slack.daemon; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
