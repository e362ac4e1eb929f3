"""CI (`.ci/run`) runs exactly the README's test command, and that command lints as well as tests.

The README is what a newcomer copies; CI is what decides whether a change lands. If they drift, one of them
lies, so this compares them line for line.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_STEPS = (".venv/bin/ruff check", ".venv/bin/ruff format --check", ".venv/bin/mypy bot tools")


def readme_test_command() -> str:
    """The line after the Quick start's "# 2." comment, inside its shell block."""
    match = re.search(r"^# 2\. .*\n(.+)$", (ROOT / "README.md").read_text(), re.MULTILINE)
    assert match, "the README's Quick start has no step 2 (the test command)"
    return match.group(1).strip()


def ci_commands() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert ci_commands()[-1] == readme_test_command()
    assert ci_commands()[:-1] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."']


def test_the_test_command_lints_before_it_tests() -> None:
    sandbox, _, rest = readme_test_command().partition(") && ")
    assert sandbox == "(command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap)"
    steps = [step.strip() for step in rest.split("&&")]
    assert steps[:2] == ["python3 -m venv .venv", ".venv/bin/pip install -q -e '.[test]'"]
    assert steps[2:] == [*LINT_STEPS, ".venv/bin/pytest"]


def test_ci_script_is_executable() -> None:
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111


def _requirements() -> list[str]:
    """Every third-party requirement: the dependencies and each extra's (the test extra names `threadbot[…]`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [req for reqs in project["optional-dependencies"].values() for req in reqs]
    return [req for req in [*project["dependencies"], *extras] if not req.startswith(f"{project['name']}[")]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_dependency_has_a_floor_and_a_cap() -> None:
    for requirement in _requirements():
        assert re.fullmatch(r"[A-Za-z0-9_.-]+(\[[a-z,]+\])?>=[0-9][^,]*,<[0-9].*", requirement), requirement


def test_the_minimum_versions_file_pins_exactly_the_floors() -> None:
    floors = {}
    for requirement in _requirements():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[a-z,]+\])?>=([^,]+),<.*", requirement)
        assert match, requirement
        floors[_normal(match.group(1))] = match.group(2)
    pins = {}
    for line in (ROOT / ".ci" / "min-versions.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_normal(name)] = version.strip()
    assert pins.keys() == floors.keys()
    for name, floor in floors.items():
        assert pins[name] == floor or pins[name].startswith(floor + "."), (name, floor, pins[name])
