"""Calls the tool policy asks about: they wait as registry calls, and an approval, a denial, a timeout or a
cancel ends the wait with a clear result; a restart leaves them waiting. The edges' buttons are tested in
tests/test_e2e_approvals.py; here the engine, its registry and its store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from conftest import CoreFactory
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use

from bot.agent.engine import Delivery
from bot.app import Core
from bot.toolcall import CallStatus, Decision, ToolCall

KEY = "console:approvals"
WAIT_S = 20.0  # an upper bound: generous, so a loaded machine is slow, not failing


async def asked(core: Core) -> ToolCall:
    """The first call that waits for an approver, once it does."""
    found: asyncio.Future[ToolCall] = asyncio.get_running_loop().create_future()

    def listen(call: ToolCall) -> None:
        if call.awaiting_approval and not found.done():
            found.set_result(call)

    core.registry.subscribe(listen)
    for session_calls in [core.registry.open_calls(KEY)]:
        for call in session_calls:
            listen(call)
    return await asyncio.wait_for(found, WAIT_S)


async def shell_core(core_factory: CoreFactory, **overrides: object) -> Core:
    """The built-in policy: run_command asks."""
    return await core_factory(bot_enable_shell=True, bot_policy_file=None, **overrides)


def one_result(fake: FakeAnthropic, call_id: str) -> str:
    return next(results[call_id] for request in fake.requests if call_id in (results := tool_results(request)))


async def test_an_approved_call_runs_and_says_who_approved(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await shell_core(core_factory)
    echo = tool_use("run_command", {"command": "echo approved-output"})
    fake.script(Reply.tools(echo), Reply.text_only("Done."))
    core.engine.submit(KEY, "echo something", requester="U1")
    call = await asked(core)
    assert call.approvers == ["U1"] and call.status_view()["status"] == "awaiting_approval"
    [listed] = [item for item in core.registry.open_calls(KEY)]
    assert listed.status_view(include_progress=False)["status"] == "awaiting_approval"
    assert core.registry.decide(call.id, approve=True, by="U1")
    await core.engine.wait_turn(KEY)
    assert "approved-output" in one_result(fake, echo["id"])
    [row] = await core.store.audit_calls()
    assert (row.status, row.decision, row.decided_by, row.requester) == (
        CallStatus.COMPLETED,
        Decision.APPROVED,
        "U1",
        "U1",
    )


async def test_a_denied_call_does_not_run_and_the_model_is_told(
    core_factory: CoreFactory, fake: FakeAnthropic, tmp_path: Path
) -> None:
    core = await shell_core(core_factory)
    marker = tmp_path / "ran"
    touch = tool_use("run_command", {"command": f"touch {marker}"})
    fake.script(Reply.tools(touch), Reply.text_only("Understood."))
    core.engine.submit(KEY, "touch it", requester="U1")
    call = await asked(core)
    core.registry.decide(call.id, approve=False, by="U2")
    await core.engine.wait_turn(KEY)
    assert "denied by U2; it did not run" in one_result(fake, touch["id"])
    assert not marker.exists()
    [row] = await core.store.audit_calls()
    assert (row.status, row.decision, row.decided_by) == (CallStatus.FAILED, Decision.DENIED, "U2")


async def test_nobody_deciding_in_time_is_a_clear_result(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await shell_core(core_factory, bot_approval_timeout_s=0.2)
    ls = tool_use("run_command", {"command": "ls"})
    fake.script(Reply.tools(ls), Reply.text_only("Nobody answered."))
    await core.engine.run_turn(KEY, "list")
    assert "nobody approved this call within 0.2s; it did not run" in one_result(fake, ls["id"])
    [row] = await core.store.audit_calls()
    assert row.decision is Decision.TIMED_OUT and row.status is CallStatus.FAILED


async def test_a_call_cancelled_while_it_waits_ends_cancelled(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await shell_core(core_factory)
    ls = tool_use("run_command", {"command": "ls"})
    fake.script(Reply.tools(ls), Reply.text_only("Stopped."))
    core.engine.submit(KEY, "list", requester="U1")
    call = await asked(core)
    result = await core.registry.cancel(call.id, by="U1")
    assert result is not None and result.cancelled
    await core.engine.wait_turn(KEY)
    assert call.status is CallStatus.CANCELLED and not core.registry.decide(call.id, approve=True, by="U1")


async def test_other_calls_of_the_batch_run_while_one_waits(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await shell_core(core_factory)
    ls, now = tool_use("run_command", {"command": "ls"}), tool_use("now", {})
    fake.script(Reply.tools(ls, now), Reply.text_only("Both."))
    core.engine.submit(KEY, "list and tell the time", requester="U1")
    call = await asked(core)
    await asyncio.wait_for(core.registry.wait_final(now["id"]), WAIT_S)
    assert call.awaiting_approval
    core.registry.decide(call.id, approve=True, by="U1")
    await core.engine.wait_turn(KEY)


async def test_a_pending_approval_survives_a_restart(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    first = await shell_core(core_factory)
    echo = tool_use("run_command", {"command": "echo after-restart"})
    fake.script(Reply.tools(echo))
    first.engine.submit(KEY, "echo it", requester="U1")
    await asked(first)
    await core_factory.close(first)  # the turn is cut short; the call runs nothing, so it stays asked
    second = await shell_core(core_factory)
    waiting = second.registry.get(echo["id"])
    assert waiting is not None and waiting.awaiting_approval, "still waiting, in the new process"
    assert waiting.approvers == ["U1"]
    fake.script(Reply.text_only("It ran after all."))
    assert second.registry.decide(echo["id"], approve=True, by="U1")
    assert await second.registry.wait_final(echo["id"], WAIT_S)
    assert waiting.status is CallStatus.COMPLETED
    requests = await fake.wait_for_requests(2, WAIT_S)
    assert "after-restart" in json.dumps(requests[1]["messages"]), "the result reached the model in a turn of its own"


async def test_a_denied_tool_is_not_offered_and_a_denied_command_is_refused(
    core_factory: CoreFactory, fake: FakeAnthropic, tmp_path: Path
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[default]\nallow = ["run_command"]\ndeny = ["sleep_for", "run_command(rm *)"]\n')
    core = await core_factory(bot_enable_shell=True, bot_policy_file=path)
    rm = tool_use("run_command", {"command": "rm -rf x"})
    fake.script(Reply.tools(rm), Reply.text_only("Refused."))
    assert core.engine.submit(KEY, "remove x", requester="U1") is Delivery.STARTED
    await core.engine.wait_turn(KEY)
    offered = {tool["name"] for tool in fake.requests[0]["tools"]}
    assert "sleep_for" not in offered and "run_command" in offered
    assert "refused by the tool policy" in one_result(fake, rm["id"])
    [row] = await core.store.audit_calls()
    assert row.decision is Decision.DENIED and "deny run_command(rm *)" in (row.decided_by or "")
