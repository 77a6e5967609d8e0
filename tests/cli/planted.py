"""A run folder as anyone could write it (the trust tests' planted runs), and the settings
it records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attrs import evolve

from ruizn.events import (
    Event,
    LlmCallStarted,
    LlmResponse,
    RunFinished,
    RunStarted,
    ToolCallFinished,
)
from ruizn.serde import encode
from ruizn.settings import RunSettings
from ruizn.state import Status, TextBlock, ToolResult, ToolUseBlock
from ruizn.toolsource import SourceKind, ToolSource

__all__ = ["BUILTINS", "READ", "RUN", "WRITE", "plant", "settings"]

RUN = "20260101-000000-abcdef"
READ = {"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}
WRITE = {"name": "write_file", "description": "Write a file.", "input_schema": {"type": "object"}}
BUILTINS = (
    ToolSource(tool="read_file", kind=SourceKind.BUILTIN, ref="read_file", read_only=True),
    ToolSource(tool="write_file", kind=SourceKind.BUILTIN, ref="write_file"),
)


def plant(workspace: Path, settings: RunSettings, *, pending_write: str | None = None) -> Path:
    """A run folder as anyone could write it: stopped at max_steps after one read, or (with
    `pending_write`) with a write_file call the model asked for, never answered."""
    started = RunStarted(seq=1, ts=1.0, run_id=RUN, goal="read README.md", settings=settings)
    call = (
        ToolUseBlock(id="toolu_w", name="write_file", input={"path": pending_write, "content": "x"})
        if pending_write
        else ToolUseBlock(id="toolu_r", name="read_file", input={"path": "README.md"})
    )
    stream: list[Event] = [
        started,
        LlmCallStarted(seq=2, ts=2.0, step=1),
        LlmResponse(
            seq=3, ts=3.0, content=(TextBlock(text="On it."), call), stop_reason="tool_use"
        ),
    ]
    if pending_write:
        stream.append(RunFinished(seq=4, ts=4.0, status=Status.ERROR, steps=1, elapsed=1.0))
    else:
        stream += [
            ToolCallFinished(seq=4, ts=4.0, id="toolu_r", result=ToolResult.ok("# Demo")),
            RunFinished(seq=5, ts=5.0, status=Status.MAX_STEPS, steps=1, elapsed=1.0),
        ]
    log = workspace / ".ruizn" / "runs" / RUN / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(encode(e) + "\n" for e in stream), encoding="utf-8")
    return log


def settings(workspace: Path, **changes: Any) -> RunSettings:
    base = RunSettings(
        model="test",
        max_steps=1,
        workspace=str(workspace),
        tools=(READ, WRITE),
        tool_sources=BUILTINS,
    )
    return evolve(base, **changes)
