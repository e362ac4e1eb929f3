"""`threadbot migrate` and the database line of `check`, as processes, on SQLite and on a scratch PostgreSQL
schema; and cluster mode's rule that only `migrate` creates procrastinate's job queue."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CoreFactory
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use
from test_cli import bare_env
from test_console import run_bot

from bot.check import check_database
from bot.config import Settings
from bot.errors import ConfigError, StoreError, ThreadbotError
from bot.store import open_store, schema
from bot.store.pg_schema import MIGRATIONS
from bot.store.postgres import PostgresStore
from bot.toolcall import CallStatus


async def test_migrate_without_a_database_url_migrates_the_sqlite_file(tmp_path: Path) -> None:
    code, out, err = await run_bot("migrate", env=bare_env(BOT_DATA_DIR=str(tmp_path / "data")), cwd=tmp_path)
    assert code == 0, out + err
    assert out == f"✓ database {tmp_path / 'data' / 'bot.db'} is at schema version {len(schema.MIGRATIONS)}\n"


async def test_migrate_applies_both_schemas_once_then_check_is_content(
    pg_dsn: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    with pytest.raises(ThreadbotError, match=f"schema version 0, this program needs {len(MIGRATIONS)}: run `thr"):
        await check_database(make_settings(bot_database_url=pg_dsn))
    env = bare_env(BOT_DATABASE_URL=pg_dsn, BOT_DATA_DIR=str(tmp_path / "data"))

    runs = await asyncio.gather(*(run_bot("migrate", env=env, cwd=tmp_path) for _ in range(2)))  # two hosts at once
    assert [code for code, _, _ in runs] == [0, 0], runs
    outs = sorted(out for _, out, _ in runs)
    version = f"schema version {len(MIGRATIONS)}"
    assert [line.endswith(f"{version}, procrastinate schema applied now\n") for line in outs].count(True) == 1, outs
    assert [line.endswith(f"{version}, procrastinate schema present\n") for line in outs].count(True) == 1, outs

    env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:1"  # the model check fails at once, asking no one outside
    _, out, _ = await run_bot("check", env=env, cwd=tmp_path)
    assert f"answers; {version} is current, procrastinate's is there" in out, out
    assert "✗ database" not in out


async def test_run_applies_our_migrations_but_wants_the_job_queue_from_migrate(
    pg_dsn: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(bot_database_url=pg_dsn)
    with pytest.raises(StoreError, match=r"no procrastinate schema \(procrastinate_jobs\): run `threadbot migrate`"):
        await open_store(settings)
    code, _, err = await run_bot("usage", env=bare_env(BOT_DATABASE_URL=pg_dsn), cwd=tmp_path)
    assert code == 1
    assert err.startswith("threadbot: BOT_DATABASE_URL: PostgreSQL at ") and "run `threadbot migrate`" in err
    store = await PostgresStore.open(pg_dsn, require_jobs_schema=False)  # our own schema was migrated regardless
    await store.close()


async def test_an_opened_cluster_store_is_postgres(pg_jobs_dsn: str, make_settings: Callable[..., Settings]) -> None:
    store = await open_store(make_settings(bot_database_url=pg_jobs_dsn), replica=None)
    try:
        assert isinstance(store, PostgresStore)
        assert await store.claim_event("e1")
    finally:
        await store.close()


async def test_the_engine_runs_a_tool_turn_on_postgres_and_a_restart_finds_it(
    pg_jobs_dsn: str, core_factory: CoreFactory, fake: FakeAnthropic
) -> None:
    count = tool_use("wordcount", {"text": "one two three"})
    fake.script(Reply.tools(count, text="Counting."), Reply.text_only("Three words."))
    core = await core_factory(bot_database_url=pg_jobs_dsn)
    assert isinstance(core.store, PostgresStore)
    outcome = await core.engine.run_turn("test:pg", "count 'one two three'")
    assert outcome is not None and outcome.text == "Three words."
    await core_factory.close(core)

    again = await core_factory(bot_database_url=pg_jobs_dsn)
    assert [c.status for c in await again.store.session_calls("test:pg")] == [CallStatus.COMPLETED]
    assert len(await again.store.load_messages("test:pg")) == 4  # ask, tool use, its result, answer


async def test_check_never_shows_the_password(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(bot_database_url="postgresql://bot:hunter2@127.0.0.1:1/threadbot")
    with pytest.raises(ThreadbotError) as caught:
        await check_database(settings, timeout_s=5)
    assert str(caught.value).startswith("BOT_DATABASE_URL: cannot connect to PostgreSQL at bot@127.0.0.1:1/threadbot")
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("url", ["postgresql://h/db", "postgres://u:p@h:5432/db", " postgresql://h/db "])
def test_postgres_urls_are_accepted(url: str, make_settings: Callable[..., Settings]) -> None:
    assert make_settings(bot_database_url=url).database_url == url.strip()


@pytest.mark.parametrize(("url", "shown"), [("mysql://u:secret@h/db", "mysql://"), ("secret", "no scheme")])
def test_other_urls_are_one_line_that_never_repeats_them(
    url: str, shown: str, make_settings: Callable[..., Settings]
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_settings(bot_database_url=url)
    assert str(caught.value) == f"BOT_DATABASE_URL: must be a postgresql:// (or postgres://) URL, not {shown}"


def test_a_url_without_the_postgres_extra_names_the_extra(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "procrastinate" else real_find_spec(name, *a)
    )
    with pytest.raises(ConfigError) as caught:
        make_settings(bot_database_url="postgresql://h/db")
    assert str(caught.value) == (
        "BOT_DATABASE_URL: cluster mode needs procrastinate, which the default install leaves out: "
        "pip install 'threadbot[postgres]'"
    )


def test_an_empty_url_is_sqlite(make_settings: Callable[..., Settings]) -> None:
    assert make_settings(bot_database_url="").database_url is None
