"""Context management over the real CLI and the test server: a run that reads more than its
context limit holds keeps every request under it by clearing the oldest tool results, the
log replays to exactly the messages that were sent, and a turn that cannot fit ends the
run with the context error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.conftest import run_cli
from tests.fakeapi import Reply, Stream, Text, ToolUse
from tests.fakeapi.cache import boundaries

FILES = 8
FILE_BYTES = 40 * 1024
LIMIT = 30_000


def reads_every_file(files: int) -> Any:
    def reply(body: dict[str, Any], index: int) -> Reply:
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turns < files:
            call = ToolUse(f"toolu_{turns:03d}", "read_file", {"path": f"f{turns + 1}.txt"})
            return Stream((Text("Next file."), call), stop_reason="tool_use")
        return Stream((Text("Read them all."),))

    return reply


def make_files(workspace: Path) -> None:
    for number in range(1, FILES + 1):
        line = f"file {number}: " + "lorem ipsum dolor sit amet " * 2 + "\n"
        text = (line * (FILE_BYTES // len(line) + 1))[:FILE_BYTES]
        (workspace / f"f{number}.txt").write_text(text, encoding="ascii")


def prompt_tokens(body: dict[str, Any]) -> int:
    """The request's input tokens as the test server counts them (tools, system, messages)."""
    return boundaries(body)[-1].tokens


def breakpoints(body: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = [*body.get("system", []), *body.get("tools", [])]
    for message in body["messages"]:
        blocks.extend(message["content"])
    return [b for b in blocks if "cache_control" in b]


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Messages as (role, [(block type, its text)]), whichever side wrote them."""
    out = []
    for message in messages:
        blocks = []
        for block in message["content"]:
            kind = block["type"]
            if kind == "text" and not block["text"].strip():
                continue  # never sent
            text = {
                "text": block.get("text"),
                "tool_use": json.dumps([block.get("id"), block.get("input")]),
                "tool_result": f"{block.get('tool_use_id')}:{block.get('content')}",
            }[kind]
            blocks.append((kind, str(text)))
        out.append((message["role"], blocks))
    return out


def test_eight_40kb_reads_under_max_context_30000_keep_every_request_under_it(
    workspace: Path, server_factory: Any
) -> None:
    make_files(workspace)
    server = server_factory(reads_every_file(FILES))
    result = run_cli(
        ["run", "--max-context", str(LIMIT), "read the eight files"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    bodies = [request.body for request in server.requests]
    assert len(bodies) == FILES + 1
    sizes = [prompt_tokens(body) for body in bodies]
    # Without clearing the last request would hold every file: over 80,000 tokens.
    assert max(sizes) <= LIMIT, sizes
    for body in bodies:
        marks = breakpoints(body)
        assert len(marks) <= 4
    log = result.events()
    cleared = [e for e in log if e["type"] == "context_cleared"]
    assert cleared, "nothing was cleared"
    assert all(e["limit"] == LIMIT for e in cleared)
    first = cleared[0]["results"][0]
    assert first["tool_use_id"] == "toolu_000"
    assert first["size"] == FILE_BYTES
    assert "[context] cleared " in result.stdout
    # The oldest results are gone from the last request, replaced by what says what they were.
    last = bodies[-1]
    results = [
        block["content"]
        for message in last["messages"]
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
    assert 'read_file {"path": "f1.txt"}' in results[0]
    assert "40,960 bytes" in results[0]
    assert "Call the tool again if you need it" in results[0]
    assert results[-1].startswith("file 8: ")  # the last turn is never touched
    # The log replays to the messages that were sent: the last request, then the answer.
    replayed = run_cli(["replay", "last", "--json"], workspace=workspace)
    assert replayed.code == 0, replayed.stderr
    state = json.loads(replayed.stdout)
    assert state["status"] == "success"
    assert shape(state["messages"][:-1]) == shape(last["messages"])
    assert state["settings"]["max_context"] == LIMIT
    shown = run_cli(["show", "last"], workspace=workspace)
    assert "context:   limit 30,000 tokens · " in shown.stdout
    assert "tool results cleared" in shown.stdout


def test_the_default_limit_is_the_models_window_less_max_tokens(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(lambda body, index: Stream((Text("ok"),)))
    result = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    settings = json.loads(result.log_path.read_text().splitlines()[0])["settings"]
    assert settings["context_window"] == 1_000_000  # claude-sonnet-5-5 (genai-prices, Models API)
    assert "max_context" not in settings  # left out at its default: the window's limit
    shown = run_cli(["show", "last"], workspace=workspace)
    assert "context:   limit 968,000 tokens" in shown.stdout  # 1,000,000 - 32,000
    off = run_cli(
        ["run", "--max-context", "off", "hi"], workspace=workspace, base_url=server.base_url
    )
    assert off.code == 0, off.stderr
    assert json.loads(off.log_path.read_text().splitlines()[0])["settings"]["max_context"] == 0
    assert "context:   no limit" in run_cli(["show", "last"], workspace=workspace).stdout


def test_a_newest_turn_that_cannot_fit_ends_the_run_with_the_context_error(
    workspace: Path, server_factory: Any
) -> None:
    make_files(workspace)
    server = server_factory(reads_every_file(1))
    result = run_cli(
        ["run", "--max-context", "5000", "read one file"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 1
    # The limit is the user's --max-context: the fix named is a resume with a larger one.
    run_id = result.log_path.parent.name
    assert "resume the run with --max-context " in result.stdout
    assert f"continue with: ruizn resume {run_id} --max-context " in result.stderr
    assert "larger context window" not in result.stdout
    assert len(server.requests) == 1  # the request that could not fit was never sent
    log = result.events()
    assert log[-1]["status"] == "error"
    assert not [e for e in log if e["type"] == "context_cleared"]
