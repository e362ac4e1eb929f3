"""The operator's own tools: modules in BOT_TOOL_MODULES and `threadbot.tools` entry points."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest
from conftest import CoreFactory
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use

from bot.agent.fence import untrusted
from bot.errors import ConfigError
from bot.operator_tools import load_entry_point_tools, load_module_tools

GREET = """
from tools.base import tool

@tool("{name}", "Greets someone by name.", {{"who": {{"type": "string"}}}}, required=("who",))
async def greet(args, ctx):
    return "hello, " + args["who"]
"""


def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    """A module with `source` on a temporary path; returns its (unique) name."""
    name = f"operator_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    """An installed package as importlib.metadata sees it: a dist-info with a `threadbot.tools` entry point."""
    info = tmp_path / "site" / "greeter_pkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: greeter-pkg\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[threadbot.tools]\n{entry}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


async def test_a_module_named_in_bot_tool_modules_gives_the_model_its_tools(
    core_factory: CoreFactory, fake: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = module(tmp_path, monkeypatch, GREET.format(name="greet"))
    core = await core_factory(bot_tool_modules=(name,))
    use = tool_use("greet", {"who": "Ada"})
    fake.script(Reply.tools(use), Reply.text_only("greeted"))
    await core.engine.run_turn("test:operator", "greet Ada")
    assert "greet" in [t["name"] for t in fake.requests[0]["tools"]]
    assert tool_results(fake.requests[1]) == {use["id"]: untrusted("tool", "hello, Ada", name="greet")}


async def test_a_name_clash_stops_the_start_naming_both_origins(
    core_factory: CoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = module(tmp_path, monkeypatch, GREET.format(name="now"))
    with pytest.raises(ConfigError) as caught:
        await core_factory(bot_tool_modules=(name,))
    assert str(caught.value) == f"tool name 'now' is declared twice: by the built-in tools and by module {name}"


async def test_an_entry_point_of_an_installed_package_gives_its_tools(
    core_factory: CoreFactory, fake: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = module(tmp_path, monkeypatch, GREET.format(name="greet_from_package"))
    distribution(tmp_path, monkeypatch, f"greeter = {name}:greet")
    core = await core_factory()
    assert core.toolbox.get("greet_from_package") is not None


def test_an_entry_point_clashing_with_a_module_names_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.operator_tools import unique_tools

    first = module(tmp_path, monkeypatch, GREET.format(name="greet"))
    second = module(tmp_path, monkeypatch, GREET.format(name="greet"))
    distribution(tmp_path, monkeypatch, f"greeter = {second}")
    with pytest.raises(ConfigError) as caught:
        unique_tools([*load_module_tools([first]), *load_entry_point_tools()])
    assert str(caught.value) == (
        f"tool name 'greet' is declared twice: by module {first} and by entry point greeter = {second} (greeter-pkg)"
    )


def test_modules_that_cannot_be_used_are_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="BOT_TOOL_MODULES: cannot import 'no_such_module_here': ModuleNotFoundError"):
        load_module_tools(["no_such_module_here"])
    empty = module(tmp_path, monkeypatch, "VALUE = 1\n")
    with pytest.raises(ConfigError, match=f"module '{empty}' defines no Tool"):
        load_module_tools([empty])
    distribution(tmp_path, monkeypatch, f"broken = {empty}:VALUE")
    with pytest.raises(ConfigError, match="names a int, not a Tool"):
        load_entry_point_tools()


def test_a_tool_whose_schema_is_not_json_schema_stops_the_start_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = module(
        tmp_path,
        monkeypatch,
        """
        from tools.base import tool

        @tool("broken", "Bad schema.", {"x": {"type": "no-such-type"}})
        async def broken(args, ctx):
            return None
        """,
    )
    with pytest.raises(ConfigError, match=f"module {broken}: tool 'broken' has an invalid input schema: "):
        load_module_tools([broken])
    distribution(tmp_path, monkeypatch, f"broken = {broken}:broken")
    with pytest.raises(ConfigError, match=r"entry point broken = .* tool 'broken' has an invalid input schema"):
        load_entry_point_tools()


async def test_every_tool_the_daemon_offers_itself_has_a_valid_schema(core_factory: CoreFactory) -> None:
    """Only the operator's and the MCP servers' schemas are checked when the daemon starts; its own are
    checked here, every built-in and system tool of a daemon with the shell on."""
    from jsonschema import Draft202012Validator

    core = await core_factory(bot_enable_shell=True)
    specs = core.toolbox.specs()
    assert {"run_command", "wait_for", "cancel_tool_call"} <= {spec["name"] for spec in specs}
    for spec in specs:
        Draft202012Validator.check_schema(spec["input_schema"])
