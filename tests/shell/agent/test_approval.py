"""`Agent(approve=...)`: the library's answer to a call that needs approval, sync or async."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import ruizn
from ruizn.effects.models.provider import ModelReply
from ruizn.events import ToolApprovalDecided
from ruizn.state import ToolUseBlock, Usage

WRITE = {"path": "out.txt", "content": "hi\n"}


def _writes(request: dict[str, Any]) -> ModelReply | str:
    """Asks for one write and one read, then answers with the results it got."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        return " | ".join(f"{b.get('is_error', False)}:{b['content']}" for b in results)
    calls = (
        ToolUseBlock(id="toolu_w", name="write_file", input=WRITE),
        ToolUseBlock(id="toolu_r", name="read_file", input={"path": "README.md"}),
    )
    return ModelReply(content=calls, stop_reason="tool_use", usage=Usage())


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text("readme\n")
    return tmp_path


def _decisions(result: ruizn.RunResult) -> list[tuple[str, bool, str, str | None]]:
    assert result.log_path is not None
    return [
        (e.id, e.approved, e.by, e.reason)
        for e in ruizn.replay_events(result.log_path)
        if isinstance(e, ToolApprovalDecided)
    ]


def test_a_sync_callback_sees_the_call_and_its_yes_lets_it_run(workspace: Path) -> None:
    seen: list[ruizn.ToolCall] = []

    def approve(call: ruizn.ToolCall) -> bool:
        seen.append(call)
        return True

    result = ruizn.Agent(_writes, workspace=workspace, approve=approve).run("write")
    assert result.status is ruizn.Status.SUCCESS
    assert [(c.id, c.name, c.input) for c in seen] == [("toolu_w", "write_file", WRITE)]
    assert (workspace / "out.txt").read_text() == "hi\n"
    assert result.output == "False:created out.txt (3 bytes) | False:readme\n"
    assert _decisions(result) == [("toolu_w", True, "user", None)]
    assert ruizn.replay(result.log_path) == result.state  # type: ignore[arg-type]


def test_an_async_callback_may_deny_with_a_reason(workspace: Path) -> None:
    async def approve(call: ruizn.ToolCall) -> tuple[bool, str]:
        await anyio.lowlevel.checkpoint()
        return False, "read only today"

    result = ruizn.Agent(_writes, workspace=workspace, approve=approve).run("write")
    assert result.status is ruizn.Status.SUCCESS
    assert not (workspace / "out.txt").exists()
    assert result.output.startswith(
        "True:write_file was not run: the user denied this call. Reason: read only today |"
    )
    assert _decisions(result) == [("toolu_w", False, "user", "read only today")]


def test_without_a_callback_the_run_stops_awaiting_approval(workspace: Path) -> None:
    result = ruizn.Agent(_writes, workspace=workspace).run("write")
    assert result.status is ruizn.Status.AWAITING_APPROVAL
    assert [c.id for c in result.state.awaiting_approval] == ["toolu_w"]
    assert not (workspace / "out.txt").exists()
    assert ruizn.replay(result.log_path) == result.state  # type: ignore[arg-type]


def test_approval_always_needs_no_callback(workspace: Path) -> None:
    result = ruizn.Agent(_writes, workspace=workspace, approval="always").run("write")
    assert result.status is ruizn.Status.SUCCESS
    assert (workspace / "out.txt").read_text() == "hi\n"
    assert _decisions(result) == [("toolu_w", True, "policy", None)]


def test_a_callback_that_returns_no_decision_ends_the_run_with_an_error(workspace: Path) -> None:
    result = ruizn.Agent(_writes, workspace=workspace, approve=lambda call: "yes").run("write")
    assert result.status is ruizn.Status.ERROR
    assert "approve returned str" in (result.error or "")
    assert not (workspace / "out.txt").exists()


def test_a_bad_approval_mode_is_a_config_error() -> None:
    with pytest.raises(ruizn.ConfigError, match="approval must be one of ask, always, never"):
        ruizn.Agent(_writes, approval="sometimes")


def test_only_the_built_ins_that_change_the_workspace_need_approval(tmp_path: Path) -> None:
    from ruizn.effects.tools.loader import collect_tools

    tools = [loaded.tool for loaded in collect_tools(tmp_path, plugins=False).tools]
    asking = {tool.name for tool in tools if tool.approval_required({"path": "a"})}
    assert asking == {"write_file", "edit_file"}
    assert all(tool.read_only for tool in tools if tool.name not in asking)
    assert not any(tool.read_only for tool in tools if tool.name in asking)
