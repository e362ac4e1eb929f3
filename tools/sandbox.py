"""Where a `run_command` command runs: a scrubbed environment, a work dir per session, and under bubblewrap
a filesystem that holds nothing of the daemon's.

The daemon's environment carries its Slack and Anthropic secrets (from the shell, Docker's `env_file`,
systemd's `EnvironmentFile`) and its data dir holds every conversation (`bot.db`) and `HEARTBEAT.md`,
which the heartbeat runs as a turn. A command the model was talked into must see neither. So a command
gets only `PATH`, `HOME`, `LANG`, `TZ`, `TERM` and the names the operator lists, never a name the
daemon's own secrets live under; and under `bwrap` it sees the system directories read-only, its own
session's work dir, a private `/tmp`, and no home directory.

Resource limits are set with `prlimit` (util-linux) in front of everything, so every process of the
command inherits them; a `preexec_fn` would do the same but is unsafe in a process with threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

SANDBOX_WORK_DIR = "/work"
"""Where the session's work dir appears inside the sandbox: a fixed path says nothing of the host's layout."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Bound read-only when present; a symlink (a merged /usr) is recreated as the same symlink."""
MASKED = (
    *("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d"),
    *("/etc/ssh", "/etc/ssl/private", "/etc/threadbot.env"),
)
"""Secrets under the read-only /etc, hidden (an empty file or folder in their place): a daemon that runs as
root owns them, and the owner reads a 0600 file without any capability."""
PASSED_THROUGH = ("PATH", "LANG", "TZ", "TERM")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SECRET_PREFIXES = ("SLACK_", "ANTHROPIC_", "BOT_")
MIB = 1 << 20


class Sandbox(StrEnum):
    BWRAP = "bwrap"
    """bubblewrap: new namespaces, read-only system, one writable work dir."""
    NONE = "none"
    """The host as the daemon sees it (a container as the boundary); the environment is still scrubbed."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-process limits every process of a command inherits."""

    address_space_mib: int = 4096
    file_size_mib: int = 1024
    processes: int = 256
    """Counted per user id, so it only binds when the daemon does not run as root (the kernel exempts root)."""

    def prlimit_argv(self) -> list[str]:
        return [
            "prlimit",
            f"--as={self.address_space_mib * MIB}",
            f"--fsize={self.file_size_mib * MIB}",
            f"--nproc={self.processes}",
            "--",
        ]


@dataclass(frozen=True, slots=True)
class ShellPolicy:
    """How the shell is fenced; the daemon builds it from BOT_SHELL_* settings."""

    sandbox: Sandbox = Sandbox.BWRAP
    network: bool = False
    env_names: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)


def secret_name_reason(name: str) -> str | None:
    """Why `name` may never be handed to a command (the daemon's own secrets live under it), or None."""
    upper = name.upper()
    if upper.startswith(SECRET_PREFIXES):
        return f"{name} is one of the daemon's own variables ({', '.join(p + '*' for p in SECRET_PREFIXES)})"
    if upper.endswith(("DATABASE_URL", "_DSN")) or upper.startswith("PG"):
        return f"{name} may hold a database URL or password"
    return None


def session_dir(work_root: Path, session_key: str) -> Path:
    """The session's own work dir: readable name, plus a hash so that two keys never share a folder."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", session_key).strip(".-")[:80] or "session"
    digest = hashlib.sha256(session_key.encode()).hexdigest()[:12]
    return work_root / f"{readable}-{digest}"


def forget_files(work_root: Path, session_key: str) -> None:
    """Delete what the session's commands wrote: forgetting a session forgets its files too."""
    shutil.rmtree(session_dir(work_root, session_key), ignore_errors=True)


def environment(policy: ShellPolicy, home: str, source: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The command's whole environment: the few basics, then the operator's names, never a secret's."""
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "TERM": "dumb"}
    env.update({name: source[name] for name in PASSED_THROUGH if name in source})
    for name in policy.env_names:
        if name in source and secret_name_reason(name) is None:
            env[name] = source[name]
    env["HOME"] = home
    return env


def resolver_binds(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """Name resolution for a command with network: `/etc/resolv.conf` is often a symlink into /run
    (systemd-resolved, NetworkManager), which is not bound; its folder is, read-only, and nothing else of /run."""
    if not os.path.islink(resolv_conf):
        return []
    folder = os.path.dirname(os.path.realpath(resolv_conf))
    if not os.path.isdir(folder) or folder.startswith(tuple(d + "/" for d in SYSTEM_DIRS)):
        return []
    return ["--ro-bind", folder, folder]


async def sandbox_problem(policy: ShellPolicy, work_dir: Path) -> str | None:
    """Why a command cannot run as `policy` says on this host (bwrap's own last words), or None when it can;
    `work_dir` must exist.

    bwrap present is not bwrap working: a container's seccomp profile or a unit's RestrictNamespaces=
    refuses the namespaces it needs, and then every command would fail, each with the same puzzle."""
    argv, cwd, home = wrap(policy, ["/bin/sh", "-c", "exit 0"], work_dir)
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=environment(policy, home),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate()
    if process.returncode == 0:
        return None
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {process.returncode}"


def wrap(policy: ShellPolicy, argv: list[str], work_dir: Path) -> tuple[list[str], Path | None, str]:
    """The argv that runs `argv` for a session whose work dir is `work_dir`, the host cwd to start it in
    (None under bwrap, which changes directory itself), and the work dir's path as the command sees it."""
    limited = policy.limits.prlimit_argv()
    if policy.sandbox is Sandbox.NONE:
        return [*limited, *argv], work_dir, str(work_dir)
    # No --new-session: the daemon already starts the command in a new session, and the group must stay
    # the one the daemon kills. Capabilities are dropped so that root inside cannot mount or mknod its way out.
    fence = ["bwrap", "--unshare-all", *(["--share-net"] if policy.network else []), "--die-with-parent"]
    fence += ["--cap-drop", "ALL"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            fence += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            fence += ["--ro-bind", path, path]
    for path in MASKED:
        if os.path.isdir(path) and not os.path.islink(path):
            fence += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.lexists(path):
            fence += ["--ro-bind", "/dev/null", path]
    if policy.network:
        fence += resolver_binds()
    fence += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    fence += ["--bind", str(work_dir), SANDBOX_WORK_DIR, "--chdir", SANDBOX_WORK_DIR, "--"]
    return [*limited, *fence, *argv], None, SANDBOX_WORK_DIR
