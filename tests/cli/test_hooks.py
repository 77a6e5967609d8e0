"""Hooks on Claude Code's contract: the real CLI, the real SDK, the local Messages API, real
hook commands (Python scripts reading JSON on stdin, as Claude Code hook scripts do)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import cli_env, run_cli
from tests.fakeapi import Stream, Text, ToolUse

# A PreToolUse hook as one writes it for Claude Code: deny writes under src/.
DENY_SRC = """\
import json, sys
event = json.load(sys.stdin)
with open(sys.argv[1], "a") as seen:
    seen.write(event["hook_event_name"] + " " + event["tool_name"] + "\\n")
path = event["tool_input"].get("path", "")
if event["tool_name"] == "write_file" and path.startswith("src/"):
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "files under src/ are generated: edit templates/ instead",
    }}))
"""

CONTEXT = """\
import json, sys
event = json.load(sys.stdin)
assert event["hook_event_name"] == "PostToolUse", event
assert event["tool_response"]["is_error"] is False
print(json.dumps({"hookSpecificOutput": {
    "hookEventName": "PostToolUse",
    "additionalContext": "lint: " + event["tool_input"]["path"] + " has 2 warnings",
}}))
"""

STOP_ONCE = """\
import json, sys
event = json.load(sys.stdin)
if not event["stop_hook_active"]:
    print(json.dumps({"decision": "block", "reason": "run the tests before you stop"}))
"""


def _hooks_file(folder: Path, name: str, event: str, matcher: str, command: str) -> Path:
    path = folder / name
    group: dict[str, Any] = {"hooks": [{"type": "command", "command": command, "timeout": 10}]}
    if matcher:
        group["matcher"] = matcher
    path.write_text(json.dumps({"hooks": {event: [group]}}), encoding="utf-8")
    return path


def _script(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return f"{sys.executable} {path}"


def test_a_pretooluse_hook_denies_a_write_under_src_and_the_model_sees_why(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "src").mkdir()
    seen = workspace.parent / "seen.log"
    command = _script(workspace.parent, "deny_src.py", DENY_SRC) + f" {seen}"
    hooks = _hooks_file(
        workspace.parent, "hooks.json", "PreToolUse", "write_file|edit_file", command
    )
    write = {"path": "src/gen.py", "content": "X = 1\n"}
    server = server_factory(
        [
            Stream((ToolUse("toolu_w", "write_file", write),), stop_reason="tool_use"),
            Stream((Text("Understood."),)),
        ]
    )
    result = run_cli(
        ["run", "--approval", "always", "--hooks", str(hooks), "write it"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert not (workspace / "src" / "gen.py").exists()
    answer = server.requests[1].body["messages"][-1]["content"][0]
    assert answer["is_error"] is True
    assert "files under src/ are generated: edit templates/ instead" in json.dumps(answer)
    ran = [e for e in result.events() if e["type"] == "hook_ran"]
    assert [(e["hook_event"], e["decision"], e["exit_code"]) for e in ran] == [
        ("PreToolUse", "deny", 0)
    ]
    assert seen.read_text() == "PreToolUse write_file\n"
    shown = run_cli(["show", "last"], workspace=workspace)
    assert "hook:" in shown.stdout
    assert "deny_src.py" in shown.stdout
    # A rerun answers the hook from the recording: the command never runs again.
    offline = cli_env(None)
    del offline["ANTHROPIC_API_KEY"]
    again = run_cli(["rerun", result.log_path.parent.name], workspace=workspace, env=offline)
    assert again.code == 0, again.stderr
    assert again.stdout.startswith("identical: rerun ")
    assert seen.read_text() == "PreToolUse write_file\n"


def test_exit_2_blocks_with_stderr_as_the_reason(workspace: Path, server_factory: Any) -> None:
    command = f"{sys.executable} -c \"import sys; sys.stderr.write('not today'); sys.exit(2)\""
    hooks = _hooks_file(workspace.parent, "hooks.json", "PreToolUse", "*", command)
    server = server_factory(
        [
            Stream(
                (ToolUse("toolu_r", "read_file", {"path": "README.md"}),), stop_reason="tool_use"
            ),
            Stream((Text("ok"),)),
        ]
    )
    result = run_cli(
        ["run", "--hooks", str(hooks), "read"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 0, result.stderr
    assert "not today" in json.dumps(server.requests[1].body["messages"][-1])
    assert "A small demo project" not in json.dumps(server.requests[1].body["messages"][-1])


def test_posttooluse_additional_context_reaches_the_next_request(
    workspace: Path, server_factory: Any
) -> None:
    command = _script(workspace.parent, "context.py", CONTEXT)
    hooks = _hooks_file(workspace.parent, "hooks.json", "PostToolUse", "read_file", command)
    server = server_factory(
        [
            Stream(
                (ToolUse("toolu_r", "read_file", {"path": "README.md"}),), stop_reason="tool_use"
            ),
            Stream((Text("Read."),)),
        ]
    )
    result = run_cli(
        ["run", "--hooks", str(hooks), "read"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 0, result.stderr
    sent = json.dumps(server.requests[1].body["messages"][-1])
    assert "lint: README.md has 2 warnings" in sent
    assert "A small demo project" in sent  # the result itself is still there


def test_a_stop_hook_sends_the_model_back_once(workspace: Path, server_factory: Any) -> None:
    command = _script(workspace.parent, "stop_once.py", STOP_ONCE)
    hooks = _hooks_file(workspace.parent, "hooks.json", "Stop", "", command)
    server = server_factory([Stream((Text("Done."),)), Stream((Text("Tests pass. Done."),))])
    result = run_cli(  # no terminal at all (CI, `< /dev/null`): hooks fire all the same
        ["run", "--hooks", str(hooks), "fix it"],
        workspace=workspace,
        base_url=server.base_url,
        stdin=subprocess.DEVNULL,
    )
    assert result.code == 0, result.stderr
    assert len(server.requests) == 2
    assert "run the tests before you stop" in json.dumps(server.requests[1].body["messages"][-1])


def test_a_hook_that_hangs_is_killed_at_its_timeout(workspace: Path, server_factory: Any) -> None:
    path = workspace.parent / "hooks.json"
    hang = {"type": "command", "command": "sleep 30", "timeout": 0.5}
    path.write_text(json.dumps({"UserPromptSubmit": [{"hooks": [hang]}]}), encoding="utf-8")
    server = server_factory([Stream((Text("ok"),))])
    result = run_cli(
        ["run", "--hooks", str(path), "hi"],
        workspace=workspace,
        base_url=server.base_url,
        timeout=20,
    )
    assert result.code == 0, result.stderr
    ran = next(e for e in result.events() if e["type"] == "hook_ran")
    assert ran["exit_code"] is None
    assert "timeout" in ran["error"]
    assert ran["duration"] < 5


def test_a_project_hook_does_not_run_before_the_person_accepts_it(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / ".ruizn").mkdir()
    marker = workspace.parent / "project-hook-ran"
    project = {"SessionStart": [{"hooks": [{"type": "command", "command": f"touch {marker}"}]}]}
    (workspace / ".ruizn" / "hooks.json").write_text(json.dumps(project), encoding="utf-8")
    server = server_factory([Stream((Text("one"),)), Stream((Text("two"),))])
    refused = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert refused.code == 0, refused.stderr
    assert not marker.exists()
    assert ".ruizn/hooks.json holds 1 hook command(s)" in refused.stderr
    assert "--trust" in refused.stderr
    assert not refused.events()[0]["settings"].get("hooks")
    accepted = run_cli(["run", "--trust", "hi"], workspace=workspace, base_url=server.base_url)
    assert accepted.code == 0, accepted.stderr
    assert marker.exists()
    assert accepted.events()[0]["settings"]["hooks"][0]["source"] == ".ruizn/hooks.json"


def test_userpromptsubmit_stdout_is_context_in_the_first_request(
    workspace: Path, server_factory: Any
) -> None:
    path = workspace.parent / "hooks.json"
    say = {"type": "command", "command": "echo 'the deploy freeze is on until Monday'"}
    path.write_text(json.dumps({"UserPromptSubmit": [{"hooks": [say]}]}), encoding="utf-8")
    server = server_factory([Stream((Text("ok"),))])
    result = run_cli(
        ["run", "--hooks", str(path), "ship it"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 0, result.stderr
    first = json.dumps(server.requests[0].body["messages"][0])
    assert "ship it" in first
    assert "the deploy freeze is on until Monday" in first


def test_the_users_config_file_hooks_table_is_a_source(
    workspace: Path, server_factory: Any
) -> None:
    config = workspace.parent / "config.toml"
    config.write_text(
        "[[hooks.UserPromptSubmit]]\n"
        'hooks = [{ type = "command", command = "echo from the user config" }]\n',
        encoding="utf-8",
    )
    server = server_factory([Stream((Text("ok"),))])
    env = cli_env(server.base_url, RUIZN_CONFIG=str(config))
    result = run_cli(["run", "hi"], workspace=workspace, env=env)
    assert result.code == 0, result.stderr
    assert "from the user config" in json.dumps(server.requests[0].body["messages"][0])
    assert result.events()[0]["settings"]["hooks"][0]["source"] == f"{config} [hooks]"


# Hooks as Claude Code's hooks guide writes them: tool names `Bash`, `Edit|MultiEdit|Write`,
# fields `tool_input.command` and `tool_input.file_path`, jq and `python3 -c` one-liners.
BASH_GUARD = """\
import json, re, sys
input_data = json.load(sys.stdin)
if input_data.get("tool_name", "") != "Bash":
    sys.exit(0)
command = input_data.get("tool_input", {}).get("command", "")
if re.search(r"\\brm\\s+-rf\\b", command):
    print("• rm -rf is not allowed here", file=sys.stderr)
    sys.exit(2)
"""
PROTECT_FILES = (
    'python3 -c "import json, sys; data=json.load(sys.stdin);'
    " path=data.get('tool_input',{}).get('file_path','');"
    " sys.exit(2 if any(p in path for p in ['.env', 'package-lock.json', '.git/']) else 0)\""
)


def test_claude_code_hooks_run_as_written(workspace: Path, server_factory: Any) -> None:
    (workspace / "build").mkdir()
    bash_log = workspace.parent / "bash-command-log.txt"
    guard = _script(workspace.parent, "bash_guard.py", BASH_GUARD)
    logger = (
        'jq -r \'"\\(.tool_input.command) - \\(.tool_input.description // "No description")"\''
        f" >> {bash_log}"
    )
    config = {
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": logger}]},
                {"matcher": "Bash", "hooks": [{"type": "command", "command": guard}]},
                {
                    "matcher": "Edit|MultiEdit|Write",
                    "hooks": [{"type": "command", "command": PROTECT_FILES}],
                },
                {"matcher": "NotebookEdit", "hooks": [{"type": "command", "command": "true"}]},
            ],
            "Notification": [
                {"matcher": "", "hooks": [{"type": "command", "command": "notify-send hi"}]}
            ],
        }
    }
    hooks = workspace.parent / "settings.json"
    hooks.write_text(json.dumps(config), encoding="utf-8")
    calls = (
        ToolUse("toolu_b", "bash", {"command": "rm -rf build"}),
        ToolUse("toolu_l", "write_file", {"path": "package-lock.json", "content": "{}"}),
        ToolUse("toolu_n", "write_file", {"path": "notes.txt", "content": "kept\n"}),
    )
    server = server_factory([Stream(calls, stop_reason="tool_use"), Stream((Text("Done."),))])
    result = run_cli(
        ["run", "--shell", "--approval", "always", "--hooks", str(hooks), "clean up"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert (workspace / "build").is_dir()  # the Bash guard fired: rm -rf never ran
    assert not (workspace / "package-lock.json").exists()  # Write's file_path was protected
    assert (workspace / "notes.txt").read_text() == "kept\n"
    assert bash_log.read_text() == "rm -rf build - No description\n"
    answers = json.dumps(server.requests[1].body["messages"][-1])
    assert "rm -rf is not allowed here" in answers
    # One warning for the events ruizn does not run; the file's other hooks run.
    assert "ruizn does not run these hook events, their hooks are left out: Notification" in (
        result.stderr
    )
    idle = next(line for line in result.stderr.splitlines() if "'NotebookEdit'" in line)
    assert "matches no tool of this run" in idle
    assert "bash" in idle
    assert "write_file" in idle


UPDATE_PATH = """\
import json, sys
event = json.load(sys.stdin)
tool_input = dict(event["tool_input"])
tool_input["file_path"] = tool_input["file_path"].replace("/draft/", "/final/")
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
    "permissionDecision": "allow", "updatedInput": tool_input}}))
"""


def test_an_updated_input_in_claude_codes_fields_reaches_ruizns_tool(
    workspace: Path, server_factory: Any
) -> None:
    command = _script(workspace.parent, "update.py", UPDATE_PATH)
    hooks = _hooks_file(workspace.parent, "hooks.json", "PreToolUse", "Write", command)
    write = ToolUse("toolu_w", "write_file", {"path": "draft/a.txt", "content": "A\n"})
    server = server_factory([Stream((write,), stop_reason="tool_use"), Stream((Text("ok"),))])
    result = run_cli(
        ["run", "--approval", "always", "--hooks", str(hooks), "write"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert (workspace / "final" / "a.txt").read_text() == "A\n"
    assert not (workspace / "draft").exists()
    ran = next(e for e in result.events() if e["type"] == "hook_ran")
    assert ran["updated_input"] == {"path": "final/a.txt", "content": "A\n"}
