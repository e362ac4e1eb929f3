"""The tool policy file: its shape, deny over ask over allow, patterns on a command's text, the built-in choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.policy import Asker, Policy, PolicyError, Verdict
from tools.base import Tool

ISSUE_EXAMPLE = """
[default]                      # for everyone the allow-lists admit
allow = ["now", "sleep_for", "*_reminder*"]
ask = ["run_command", "mcp__*"]
deny = []
approvers = []                 # empty: the person who asked approves
[[rule]]                       # applies when every list it gives matches the turn (user, user group, channel)
users = ["U0ADMIN"]
groups = ["S0OPS"]
channels = ["C0OPS"]
allow = ["run_command(git status*)"]
deny = ["mcp__github__delete_*"]
approvers = ["U0LEAD"]
"""

ADMIN_IN_OPS = Asker("U0ADMIN", "C0OPS", frozenset({"S0OPS"}))


async def _run(args: dict[str, object], ctx: object) -> None:
    return None


def mcp_tool(name: str, *, read_only: bool) -> Tool:
    return Tool(name, "an MCP tool", {"type": "object"}, _run, read_only=read_only)


def policy(tmp_path: Path, text: str) -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return Policy.load(path)


def verdict(policy: Policy, name: str, asker: Asker, tool: Tool | None = None, **arguments: object) -> Verdict:
    return policy.rule_for(tool, name, arguments, asker).verdict


def test_the_issues_example_reads_and_decides(tmp_path: Path) -> None:
    example = policy(tmp_path, ISSUE_EXAMPLE)
    anyone = Asker("U1", "C1")
    assert verdict(example, "now", anyone) is Verdict.ALLOW
    assert verdict(example, "set_reminder", anyone) is Verdict.ALLOW
    assert verdict(example, "run_command", anyone, command="git status") is Verdict.ASK
    # The admin's rule allows `git status`, but the default's ask is stronger: deny wins over ask over allow.
    assert verdict(example, "run_command", ADMIN_IN_OPS, command="git status") is Verdict.ASK
    assert verdict(example, "mcp__github__delete_repo", ADMIN_IN_OPS) is Verdict.DENY
    assert verdict(example, "mcp__github__delete_repo", anyone) is Verdict.ASK  # the rule is not theirs
    ruling = example.rule_for(None, "run_command", {"command": "ls"}, ADMIN_IN_OPS)
    assert ruling.approvers == ("U0LEAD",) and "[default]: ask run_command" in ruling.rule
    assert example.rule_for(None, "run_command", {"command": "ls"}, anyone).approvers == ("U1",)


def test_a_rule_applies_only_when_every_list_it_gives_matches(tmp_path: Path) -> None:
    rules = policy(tmp_path, '[[rule]]\nusers = ["U1"]\nchannels = ["C1"]\ndeny = ["run_command"]\n')
    assert verdict(rules, "run_command", Asker("U1", "C1")) is Verdict.DENY
    assert verdict(rules, "run_command", Asker("U1", "C2")) is Verdict.ASK  # the built-in choice
    assert verdict(rules, "run_command", Asker("U2", "C1")) is Verdict.ASK
    groups = policy(tmp_path, '[[rule]]\ngroups = ["S1"]\nallow = ["run_command"]\n')
    assert groups.uses_groups
    assert verdict(groups, "run_command", Asker("U9", groups=frozenset({"S1", "S2"}))) is Verdict.ALLOW
    assert verdict(groups, "run_command", Asker("U9")) is Verdict.ASK


def test_a_pattern_with_arguments_matches_the_commands_text_and_never_hides_the_tool(tmp_path: Path) -> None:
    rules = policy(tmp_path, '[default]\nallow = ["run_command(git status*)"]\ndeny = ["run_command(rm *)"]\n')
    anyone = Asker("U1")
    assert verdict(rules, "run_command", anyone, command="git status --short") is Verdict.ALLOW
    assert verdict(rules, "run_command", anyone, command="rm -rf /") is Verdict.DENY
    assert verdict(rules, "run_command", anyone, command="ls") is Verdict.ASK
    assert rules.hidden(["run_command", "now"], anyone) == frozenset()
    json_args = policy(tmp_path, '[default]\ndeny = [\'mcp__x__post({"channel":"C0SECRET"*)\']\n')
    assert verdict(json_args, "mcp__x__post", anyone, channel="C0SECRET", text="hi") is Verdict.DENY
    assert verdict(json_args, "mcp__x__post", anyone, channel="C1", text="hi") is Verdict.ASK


def test_a_bare_deny_hides_the_tool_from_the_model(tmp_path: Path) -> None:
    rules = policy(tmp_path, '[default]\ndeny = ["mcp__github__*"]\n[[rule]]\nusers = ["U1"]\ndeny = ["now"]\n')
    names = ["now", "mcp__github__list", "mcp__slack__post"]
    assert rules.hidden(names, Asker("U1")) == {"now", "mcp__github__list"}
    assert rules.hidden(names, Asker("U2")) == {"mcp__github__list"}


def test_without_a_file_built_in_tools_run_the_shell_asks_and_mcp_asks_unless_read_only() -> None:
    built_in = Policy.load(None)
    anyone = Asker("U1")
    assert verdict(built_in, "now", anyone) is Verdict.ALLOW
    assert verdict(built_in, "run_command", anyone, command="ls") is Verdict.ASK
    search, write = mcp_tool("mcp__docs__search", read_only=True), mcp_tool("mcp__docs__write", read_only=False)
    assert verdict(built_in, search.name, anyone, search) is Verdict.ALLOW
    assert verdict(built_in, write.name, anyone, write) is Verdict.ASK
    assert built_in.rule_for(None, "run_command", {}, Asker(None)).approvers == ()  # nobody: it times out


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[default]\nallow = ["now"]\nalow = ["x"]\n', 3, "unknown key 'alow'"),
        ('[default]\nallow = ["now"]\n\n[[rule]]\nusers = ["U1"]\ndeny = ["run_command(git"]\n', 6, "not a tool"),
        ('[default]\nallow = ["now"]\n[[rule]]\ndeny = ["now"]\n', 3, "gives no users, groups or channels"),
        ('[default]\nallow = "now"\n', 2, "allow must be a list"),
        ("[defaults]\nallow = []\n", 1, "unknown table 'defaults'"),
        ('[default]\nallow = ["now"\n', 2, "not valid TOML"),
        ('[default]\nallow = ["now",, ]\n', 2, "not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_the_line_and_the_rule(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        policy(tmp_path, text)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'policy.toml'}:{line}:") and words in message, message
    assert "\n" not in message


def test_a_missing_file_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        Policy.load(tmp_path / "nope.toml")


def test_describe_lists_every_table_in_one_screen(tmp_path: Path) -> None:
    lines = policy(tmp_path, ISSUE_EXAMPLE).describe()
    assert len(lines) == 3
    assert "[default] everyone" in lines[1] and "ask: run_command, mcp__*" in lines[1]
    assert "users=U0ADMIN groups=S0OPS channels=C0OPS" in lines[2] and "approvers: U0LEAD" in lines[2]
    assert Policy.load(None).describe()[0].startswith("built-in policy")
