"""Shared fixtures: the fake Messages API, hermetic settings, a recording edge and a core factory.

Everything here is generic on purpose: tests of any package (agent, calls, schedule, edges) can
open a real engine against the wire-level fake and await what it reports, never sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes.anthropic_api import FakeAnthropic
from fakes.slack_api import FakeSlack
from store_backends import any_store, pg_dsn, pg_jobs_dsn, store_backend, store_opener

from bot.app import Core, open_ground, run_core
from bot.config import Settings, load_settings
from bot.model.anthropic import AnthropicProvider
from bot.model.client import anthropic_client
from bot.slack.client import SlackClient
from bot.store import Store
from bot.toolcall import CallStatus, ToolCall
from bot.types import EngineOutput, LineKind, OwedLine, OwedPost, TurnOutcome
from tools.base import SharedFile

__all__ = ["any_store", "pg_dsn", "pg_jobs_dsn", "store_backend", "store_opener"]  # the back-end fixtures
pytest_plugins = ["daemon_rig"]  # the daemon-as-a-process fixtures (`world`, `own`) for every module


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker more than there are cores (pyproject caps it at four). A daemon test mostly waits
    on its daemon's intervals and the fakes, so a third worker on two cores fills the waits."""
    return (os.cpu_count() or 1) + 1


MODEL = "claude-sonnet-5-5"
WAIT_S = 20.0  # an upper bound: generous, so a loaded machine is slow, not failing
"""How long a test waits for a condition before failing; generous, since it only matters when broken."""
SHUTDOWN_GRACE_S = 0.5
"""What a closing core gives running turns and calls: a test that shuts one down mid-turn need not wait 5 s."""


# --- the fake Messages API -----------------------------------------------------------------


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    """A started FakeAnthropic on 127.0.0.1; it answers "ok" when nothing is scripted."""
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """A started FakeSlack (Web API and Socket Mode) on 127.0.0.1."""
    async with FakeSlack() as server:
        yield server


@pytest.fixture
def client(slack: FakeSlack) -> SlackClient:
    """The real slack_sdk client, pointed at the fake."""
    return SlackClient(token="xoxb-test", base_url=slack.api_url)


# --- settings --------------------------------------------------------------------------------


HERMETIC_PREFIXES = ("BOT_", "SLACK_", "ANTHROPIC_", "OTEL_")
"""The variables the daemon reads: none of the developer's may reach a test, or a daemon a test starts."""


@pytest.fixture(scope="session", autouse=True)
def hermetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test runs away from the developer's checkout, shell and home.

    The daemon reads `./.env` and the variables above, and several tools look in `~`; so the session
    runs in an empty folder with an empty home, and without those variables. A test that wants one sets
    it itself (`monkeypatch.setenv`, or a daemon's `env`).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("cwd"))
        patch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
        for name in list(os.environ):
            if name.startswith(HERMETIC_PREFIXES):
                patch.delenv(name)
        yield


OPEN_POLICY = Path(__file__).with_name("open_policy.toml")
"""The tool policy tests run with unless they give their own: the shell and MCP tools need no approver."""


@pytest.fixture
def needs_bwrap() -> None:
    """Skip without bwrap on a developer's machine; fail under CI, where the sandbox must be tested."""
    if shutil.which("bwrap") is None:
        if os.environ.get("CI"):
            pytest.fail("bwrap is not installed (Debian package bubblewrap): the shell sandbox is untested")
        pytest.skip("bwrap is not installed (Debian package bubblewrap)")


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    """Settings on `tmp_path`, ignoring any `.env`; keyword overrides use the field names (`bot_…`)."""

    def make(**overrides: Any) -> Settings:
        overrides.setdefault("bot_data_dir", tmp_path)
        overrides.setdefault("bot_policy_file", OPEN_POLICY)
        return load_settings(_env_file=None, **overrides)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


# --- the edge: records everything, lets tests await conditions ---------------------------------


@dataclass(frozen=True, slots=True)
class CallSnapshot:
    """A call as it was when the registry published it (the ToolCall object itself keeps changing)."""

    id: str
    session_key: str
    tool_name: str
    status: CallStatus
    progress_count: int
    call: ToolCall


@dataclass(slots=True)
class _Waiter:
    predicate: Callable[[], bool]
    future: asyncio.Future[None]


@dataclass
class RecordingOutput:
    """An `EngineOutput` that records every call as `(method, args)` and wakes waiters on each one."""

    events: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    snapshots: list[CallSnapshot] = field(default_factory=list)
    outcomes: list[TurnOutcome] = field(default_factory=list)
    notices: list[tuple[str, str]] = field(default_factory=list)
    reminders: list[tuple[str, str]] = field(default_factory=list)
    files: list[tuple[str, SharedFile]] = field(default_factory=list)
    unsent: list[OwedPost] = field(default_factory=list)
    """Posts this edge says it still holds: the next turn's last save of their session owes them."""
    _waiters: list[_Waiter] = field(default_factory=list)

    # EngineOutput

    def turn_started(self, session_key: str) -> None:
        self._record("turn_started", session_key)

    def model_call_started(self, session_key: str) -> None:
        self._record("model_call_started", session_key)

    def text_delta(self, session_key: str, delta: str) -> None:
        self._record("text_delta", session_key, delta)

    def text_done(self, session_key: str) -> None:
        self._record("text_done", session_key)

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None:
        self._record("calls_started", session_key, [call.id for call in calls])

    def call_changed(self, call: ToolCall) -> None:
        snapshot = CallSnapshot(call.id, call.session_key, call.tool_name, call.status, len(call.progress), call)
        self.snapshots.append(snapshot)
        self._record("call_changed", snapshot)

    def notice(self, session_key: str, text: str) -> None:
        self.notices.append((session_key, text))
        self._record("notice", session_key, text)

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        """Recorded is shown: reminders in `reminders`, a firing's notices in `notices`."""
        for _, line in lines:
            if line.kind is LineKind.REMINDER:
                self.reminders.append((line.session_key, line.text))
                self._record("reminder", line.session_key, line.text)
            else:
                self.notice(line.session_key, line.text)
        return True

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        self.files.append((session_key, file))
        self._record("file_shared", session_key, file)

    def owed_posts(self, outcome: TurnOutcome) -> list[OwedPost]:
        owed = [post for post in self.unsent if post.session_key == outcome.session_key]
        self.unsent = [post for post in self.unsent if post.session_key != outcome.session_key]
        return owed

    def turn_finished(self, outcome: TurnOutcome) -> None:
        self.outcomes.append(outcome)
        self._record("turn_finished", outcome)

    # for tests

    def names(self, session_key: str | None = None) -> list[str]:
        """The method names called so far (for one session if given), in order."""
        return [name for name, args in self.events if session_key is None or _session_of(args) == session_key]

    def text(self, session_key: str) -> str:
        return "".join(args[1] for name, args in self.events if name == "text_delta" and args[0] == session_key)

    def statuses(self, call_id: str) -> list[CallStatus]:
        """The statuses published for a call, in order, without repeats."""
        seen: list[CallStatus] = []
        for snap in self.snapshots:
            if snap.id == call_id and (not seen or seen[-1] is not snap.status):
                seen.append(snap.status)
        return seen

    def finished(self, session_key: str) -> list[TurnOutcome]:
        return [outcome for outcome in self.outcomes if outcome.session_key == session_key]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:  # noqa: ASYNC109
        """Return as soon as `predicate()` holds; it is re-checked after every recorded call."""
        if predicate():
            return
        waiter = _Waiter(predicate, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter.future
        except TimeoutError:
            raise TimeoutError(f"condition not met within {timeout}s; events: {self.names()[-30:]}") from None
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    async def wait_status(self, call_id: str, status: CallStatus, timeout: float = WAIT_S) -> CallSnapshot:  # noqa: ASYNC109
        """Wait until the call was published with `status`; returns that snapshot."""

        def found() -> CallSnapshot | None:
            return next((s for s in self.snapshots if s.id == call_id and s.status is status), None)

        await self.wait_for(lambda: found() is not None, timeout)
        snapshot = found()
        assert snapshot is not None
        return snapshot

    async def wait_turns(self, session_key: str, count: int, timeout: float = WAIT_S) -> list[TurnOutcome]:  # noqa: ASYNC109
        """Wait until `count` turns of the session have finished; returns their outcomes."""
        await self.wait_for(lambda: len(self.finished(session_key)) >= count, timeout)
        return self.finished(session_key)

    def _record(self, name: str, *args: Any) -> None:
        self.events.append((name, args))
        for waiter in list(self._waiters):
            if not waiter.future.done() and waiter.predicate():
                waiter.future.set_result(None)


def _session_of(args: tuple[Any, ...]) -> str | None:
    first = args[0] if args else None
    if isinstance(first, str):
        return first
    if isinstance(first, CallSnapshot):
        return first.session_key
    if isinstance(first, TurnOutcome):
        return first.session_key
    return None


@pytest.fixture
def output() -> RecordingOutput:
    return RecordingOutput()


# --- the core factory ------------------------------------------------------------------------


class CoreFactory:
    """Opens cores (the whole engine) against the fake; every core left open is closed at teardown."""

    def __init__(self, fake: FakeAnthropic, make_settings: Callable[..., Settings], output: RecordingOutput) -> None:
        self._fake = fake
        self._make_settings = make_settings
        self.output = output
        self._stacks: dict[int, contextlib.AsyncExitStack] = {}

    async def __call__(
        self,
        *,
        settings: Settings | None = None,
        output: EngineOutput | Callable[[Store], EngineOutput] | None = None,
        max_retries: int = 0,
        open_kwargs: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> Core:
        """A core on `settings` (default: `make_settings(**overrides)`), reporting to `output`: an output, or
        what builds one on the store the core opens on (an edge that needs the store, as the Slack edge does).

        `max_retries=0` by default so tests can count requests; pass 2 to exercise the SDK's retries.
        `open_kwargs` go to `run_core` as they are (e.g. a scheduler `clock`).
        """
        settings = settings or self._make_settings(**overrides)
        client = anthropic_client(api_key="test", base_url=self._fake.url, max_retries=max_retries)
        provider = AnthropicProvider(
            model=MODEL,
            max_tokens=1024,
            client=client,
            idle_timeout_s=settings.bot_model_idle_timeout_s,
            request_timeout_s=settings.bot_model_timeout_s,
            cache_ttl=settings.cache_ttl,
        )
        stack = contextlib.AsyncExitStack()
        stack.push_async_callback(client.close)
        try:
            ground = await stack.enter_async_context(open_ground(settings))
            built = output or self.output
            core = await stack.enter_async_context(
                run_core(
                    ground,
                    built(ground.store) if callable(built) else built,
                    provider=provider,
                    **({"shutdown_grace_s": SHUTDOWN_GRACE_S} | (open_kwargs or {})),
                )
            )
        except BaseException:
            await stack.aclose()
            raise
        self._stacks[id(core)] = stack
        return core

    async def close(self, core: Core) -> None:
        """Close one core now (its engine and registry shut down, the store closes)."""
        stack = self._stacks.pop(id(core), None)
        if stack is not None:
            await stack.aclose()

    async def close_all(self) -> None:
        while self._stacks:
            _, stack = self._stacks.popitem()
            await stack.aclose()


@pytest.fixture
async def core_factory(
    fake: FakeAnthropic, make_settings: Callable[..., Settings], output: RecordingOutput
) -> AsyncIterator[CoreFactory]:
    factory = CoreFactory(fake, make_settings, output)
    try:
        yield factory
    finally:
        await factory.close_all()


@pytest.fixture
async def core(core_factory: CoreFactory) -> Core:
    """A core with default settings (on tmp_path) and `max_retries=0`."""
    return await core_factory()
