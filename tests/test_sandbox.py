"""`run_command` under bubblewrap: cancel, timeout and output bounds still hold, limits bind, network is off.

The group ids come from `track_process_group`, as the daemon records them: inside the sandbox a command
sees its own PID namespace, so what it prints about itself means nothing out here.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from proc_groups import assert_group_gone, cancel_and_assert_gone, live_members

from bot.check import check_shell
from bot.config import load_settings
from bot.errors import ConfigError, ThreadbotError
from tools.base import ToolContext, ToolError
from tools.run_command import shell_tool
from tools.sandbox import MASKED, Limits, ShellPolicy, environment, resolver_binds

STOPS_S = 5.0
"""Far inside the 30 s a command would take; loose enough for a loaded machine."""


pytestmark = pytest.mark.usefixtures("needs_bwrap")


class Probe:
    """A context that records the process group and the first log line, as the registry would."""

    def __init__(self, tmp_path: Path) -> None:
        self.groups: list[int] = []
        self.logged = asyncio.Event()
        self.ctx = ToolContext(
            "toolu_sbx", "sandbox:session", tmp_path / "work", self._report, asyncio.get_running_loop()
        )
        self.ctx.track_process_group = self._track

    def _report(self, kind: str, payload: Any) -> None:
        self.logged.set()

    async def _track(self, pgid: int) -> None:
        self.groups.append(pgid)


async def test_cancel_kills_everything_the_sandboxed_command_started(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    task = asyncio.create_task(
        shell_tool(ShellPolicy()).run({"command": "sleep 30 & sleep 30 & echo started; wait"}, probe.ctx)  # type: ignore[arg-type]
    )
    await asyncio.wait_for(probe.logged.wait(), 15)
    [pgid] = probe.groups
    assert len(live_members(pgid)) >= 4  # prlimit became bwrap, its child, the supervisor, the sleeps
    await cancel_and_assert_gone(task, pgid, stops_s=STOPS_S)


async def test_timeout_and_output_bounds_hold_in_the_sandbox(tmp_path: Path) -> None:
    tool_ = shell_tool(ShellPolicy())
    probe = Probe(tmp_path)
    with pytest.raises(ToolError, match=r"timed out after 0\.5s"):
        await tool_.run({"command": "echo go; sleep 30", "timeout_seconds": 0.5}, probe.ctx)
    await assert_group_gone(probe.groups[0])
    result = await tool_.run({"command": "seq 1 10000"}, probe.ctx)
    assert result["truncated"] is True and result["output"].endswith("9999\n10000\n")


async def test_the_file_size_and_memory_limits_bind(tmp_path: Path) -> None:
    tool_ = shell_tool(ShellPolicy(limits=Limits(address_space_mib=256, file_size_mib=1)))
    probe = Probe(tmp_path)
    big = await tool_.run({"command": "head -c 2000000 /dev/zero > big; echo size=$(wc -c < big)"}, probe.ctx)
    assert "size=1048576" in big["output"]
    hog = await tool_.run({"command": "python3 -c 'b = bytearray(512 << 20)' && echo allocated"}, probe.ctx)
    assert "allocated" not in hog["output"] and hog["exit_code"] != 0


def _host_interfaces() -> list[str]:
    return sorted(line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:])


async def test_the_network_is_off_unless_asked_for(tmp_path: Path) -> None:
    command = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    off = await shell_tool(ShellPolicy()).run({"command": command}, Probe(tmp_path).ctx)
    assert off["output"].split() == ["lo"]
    on = await shell_tool(ShellPolicy(network=True)).run({"command": command}, Probe(tmp_path).ctx)
    assert sorted(on["output"].split()) == _host_interfaces()


def _host_secrets() -> dict[str, list[str]]:
    """The lines of each file to hide that this process (and so, unfenced, its shell) can read."""
    readable = [path for path in MASKED if os.path.isfile(path) and os.access(path, os.R_OK)]
    return {
        path: [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
        for path in readable
    }


async def test_the_hosts_secrets_under_etc_are_hidden_even_from_a_daemon_that_runs_as_root(tmp_path: Path) -> None:
    secrets = _host_secrets()
    if not secrets:
        pytest.skip("nothing under /etc this user could read: the sandbox has nothing to hide from it")
    command = " ; ".join(f"cat {path}" for path in secrets) + " ; ls -A /etc/ssh /etc/ssl/private ; head -1 /etc/passwd"
    output = (await shell_tool(ShellPolicy()).run({"command": command}, Probe(tmp_path).ctx))["output"]
    leaked = [path for path, lines in secrets.items() if any(line in output for line in lines)]
    assert leaked == [], f"{leaked} readable from the sandbox"
    assert output.rstrip().splitlines()[-1].startswith("root:"), "the rest of /etc stays readable"


def test_only_listed_names_pass_and_never_a_secret() -> None:
    source = {"PATH": "/usr/bin", "SAFE": "1", "SLACK_BOT_TOKEN": "x", "PGPASSWORD": "y", "OTHER": "z"}
    env = environment(ShellPolicy(env_names=("SAFE", "SLACK_BOT_TOKEN")), "/work", source)
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "TERM": "dumb", "SAFE": "1", "HOME": "/work"}


@pytest.mark.parametrize(
    "name", ["SLACK_BOT_TOKEN", "anthropic_api_key", "BOT_DATABASE_URL", "DATABASE_URL", "PGPASSWORD"]
)
def test_a_secret_name_in_bot_shell_env_stops_the_start(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"^BOT_SHELL_ENV: {name} .*never passed to run_command"):
        load_settings(_env_file=None, bot_shell_env=f"HTTP_PROXY,{name}")


async def test_check_runs_one_command_in_the_sandbox(tmp_path: Path) -> None:
    settings = load_settings(_env_file=None, bot_enable_shell=True, bot_data_dir=tmp_path)
    assert await check_shell(settings) == "the shell runs under bwrap (network off, BOT_SHELL_NETWORK)"


async def test_check_says_when_bwrap_cannot_build_its_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a container whose seccomp profile refuses user namespaces: bwrap is there, and fails."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    settings = load_settings(_env_file=None, bot_enable_shell=True, bot_data_dir=tmp_path)
    with pytest.raises(
        ThreadbotError, match=r"^BOT_SHELL_SANDBOX: bwrap cannot build the sandbox here \(bwrap: No perm"
    ):
        await check_shell(settings)


def test_a_resolv_conf_linked_into_run_has_its_folder_bound(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "resolve"
    folder.mkdir(parents=True)
    (folder / "stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    (tmp_path / "resolv.conf").symlink_to(folder / "stub-resolv.conf")
    assert resolver_binds(str(tmp_path / "resolv.conf")) == ["--ro-bind", str(folder), str(folder)]
    assert resolver_binds(str(folder / "stub-resolv.conf")) == []  # a plain file is in /etc already
