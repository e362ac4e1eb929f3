"""The tools the model calls. Each is a small module that knows nothing of the daemon."""

from __future__ import annotations

from tools.ask_user import ask_user
from tools.base import Tool
from tools.now import now
from tools.run_command import shell_tool
from tools.sandbox import ShellPolicy
from tools.share_file import share_file
from tools.sleep_for import sleep_for
from tools.wordcount import wordcount


def builtin_tools(*, shell: ShellPolicy | None) -> list[Tool]:
    """The plain tools; `run_command`, fenced by `shell`, only when the operator turned the shell on."""
    return [now, wordcount, sleep_for, share_file, ask_user, *([shell_tool(shell)] if shell is not None else [])]
