"""The bash tool (#29): real bubblewrap, real processes, the real CLI against the local
Messages API. The model's turns are scripted (tests.cli.approval_helpers.turns_model)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from ruizn.effects.runlog.reader import iter_events, replay_file
from ruizn.view.page import page_data
from ruizn.view.timeline import project
from tests.cli.approval_helpers import events, of_type, tool_results, turns_model
from tests.cli.conftest import API_KEY, cli_env, run_cli, start_cli, wait_for_event
from tests.fakeapi import ToolUse
from tests.view.chromium import dump_dom


def bash(call_id: str, command: str, **more: Any) -> ToolUse:
    return ToolUse(call_id, "bash", {"command": command, **more})


def _results(log: Path) -> dict[str, dict[str, Any]]:
    return {e["id"]: e["result"] for e in of_type(log, "tool_call_finished")}


def _processes_with(marker: str) -> list[str]:
    """Command lines of live processes that hold `marker` (read from /proc, killing nothing)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(cmdline)
    return found


def test_the_sandbox_confines_writes_network_home_and_secrets(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    git_config = (workspace / ".git" / "config").read_text()
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("top secret\n")
    outside = tmp_path / "outside.txt"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
    # a Unix socket of the host's (as docker's, dbus's, postgres's live in /run)
    unix_path = f"/run/ruizn-test-{os.getpid()}.sock"
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(unix_path)
    unix_listener.listen()
    unix_probe = f"import socket; socket.socket(socket.AF_UNIX).connect('{unix_path}')"
    server = server_factory(
        turns_model(
            [
                [
                    bash(
                        "t1",
                        f"touch {outside}; touch /usr/ruizn-x; echo made > inside.txt;"
                        " echo evil > .git/hooks/pre-commit; echo x >> .git/config;"
                        " ls .ruizn/runs | wc -l",
                    ),
                    bash("t2", f'python3 -c "{probe}" && echo CONNECTED'),
                    bash("t3", "cat ~/secret.txt; ls -A ~ | wc -l"),
                    bash("t4", "env"),
                    bash("t5", "echo to-out; echo to-err >&2; exit 7"),
                    bash("t6", f'python3 -c "{unix_probe}" && echo REACHED'),
                ]
            ]
        )
    )
    env = cli_env(server.base_url, HOME=str(home), GITHUB_TOKEN="ghp-0123456789abcdef")
    result = run_cli(
        ["run", "--goal", "look", "--shell", "--approval", "always"],
        workspace=workspace,
        env=env,
    )
    listener.close()
    unix_listener.close()
    os.unlink(unix_path)
    assert result.code == 0, result.stderr
    results = _results(result.log_path)
    # writes outside the workspace fail and leave nothing; inside, they work
    assert "Read-only file system" in results["t1"]["content"]
    assert not outside.exists()
    assert not Path("/usr/ruizn-x").exists()
    assert (workspace / "inside.txt").read_text() == "made\n"
    # no hook or git config planted to run later outside the sandbox; the logs hidden
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert (workspace / ".git" / "config").read_text() == git_config
    assert results["t1"]["content"].splitlines()[-2] == "0"
    # no network: 127.0.0.1 is the sandbox's own loopback, where nothing listens
    assert "CONNECTED" not in results["t2"]["content"]
    assert "Connection refused" in results["t2"]["content"]
    assert "REACHED" not in results["t6"]["content"]
    assert "No such file" in results["t6"]["content"]
    # the home folder is hidden (an empty tmpfs)
    assert "top secret" not in results["t3"]["content"]
    assert "No such file" in results["t3"]["content"]
    assert results["t3"]["content"].splitlines()[1] == "0"
    # ruizn's secrets are not in the command's environment
    assert "ANTHROPIC_API_KEY" not in results["t4"]["content"]
    assert API_KEY not in results["t4"]["content"]
    assert "GITHUB_TOKEN" not in results["t4"]["content"]
    assert f"HOME={home}" in results["t4"]["content"]
    # stdout and stderr in one stream, the exit code in the result
    assert results["t5"]["content"].startswith("to-out\nto-err\n[exit code 7 · ")
    # the request the model got holds the same result
    sent = tool_results(server.requests[-1].body)
    assert sent["t5"]["content"] == results["t5"]["content"]
    # the settings say how the shell was confined (a field at its default is left out)
    settings = replay_file(result.log_path).state.settings
    assert (settings.shell, settings.sandbox, settings.shell_network) == (True, True, False)
    # the page shows each command as such, its output folded under it
    data = page_data(project(iter_events(result.log_path)))
    shown = {t["id"]: t for step in data["steps"] for t in step["tools"]}
    assert shown["t5"]["cmd"]["t"] == "echo to-out; echo to-err >&2; exit 7"
    assert shown["t5"]["result"]["t"] == results["t5"]["content"]
    # and Chromium draws it so: the command as `$ ...`, the output in a closed <details>
    viewed = run_cli(["view", result.log_path.parent.name], workspace=workspace, env=env)
    assert viewed.code == 0, viewed.stderr
    page = Path(viewed.stdout.strip())
    dom = dump_dom(page if page.is_absolute() else workspace / page)
    assert "$ echo to-out; echo to-err &gt;&amp;2; exit 7" in dom
    folded = re.search(
        r"<details>\s*<summary>output · [^<]*</summary>\s*<pre>to-out\nto-err\n", dom
    )
    assert folded is not None
    # replay prints what the run printed, byte for byte
    replayed = run_cli(["replay", result.log_path.parent.name], workspace=workspace, env=env)
    assert replayed.code == 0, replayed.stderr
    assert replayed.stdout == result.stdout


def test_a_bubblewrap_that_cannot_start_ends_the_run_before_any_request(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(turns_model([[bash("t1", "true")]]))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    failing = run_cli(
        ["run", "--goal", "go", "--shell"],
        workspace=workspace,
        env=cli_env(server.base_url, PATH=path),
    )
    assert failing.code == 2, failing.stderr
    lines = failing.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "bubblewrap says: bwrap: No permissions to create new namespace" in lines[0]
    assert "--sandbox off" in lines[0]
    assert server.requests == []
    # no bwrap on PATH at all: the same, naming that
    fake.unlink()
    python_only = bin_dir / "python3"
    python_only.symlink_to(shutil.which("python3") or "/usr/bin/python3")
    missing = run_cli(
        ["run", "--goal", "go", "--shell"],
        workspace=workspace,
        env=cli_env(server.base_url, PATH=str(bin_dir)),
    )
    assert missing.code == 2, missing.stderr
    assert "bwrap is not on PATH" in missing.stderr
    assert server.requests == []
    # --sandbox off is explicit, and said at start
    off = run_cli(
        ["run", "--goal", "go", "--shell", "--sandbox", "off", "--approval", "always"],
        workspace=workspace,
        env=cli_env(server.base_url, PATH=path),
    )
    assert off.code == 0, off.stderr
    assert "--sandbox off: bash commands run unconfined" in off.stderr


def test_a_background_server_is_read_with_bash_output_and_killed_when_the_run_ends(
    workspace: Path, server_factory: Any
) -> None:
    marker = "8931"  # the port: it names this test's server among the machine's processes
    started: dict[str, str] = {}

    def reply(body: dict[str, Any], index: int) -> Any:
        from tests.fakeapi import Stream, Text

        done = [m for m in body["messages"] if m["role"] == "assistant"]
        if not done:
            command = f"python3 -u -m http.server {marker} --bind 127.0.0.1"
            turn = (bash("b1", command, background=True),)
        elif len(done) == 1:
            content = body["messages"][-1]["content"][0]["content"]
            started["id"] = re.findall(r"bg_[0-9a-f]+", content)[0]
            time.sleep(1.5)  # the server prints its banner
            turn = (ToolUse("o1", "bash_output", {"id": started["id"]}),)
        else:
            return Stream((Text("Done."),))
        return Stream((Text("Go."), *turn), stop_reason="tool_use")

    server = server_factory(reply)
    result = run_cli(
        ["run", "--goal", "serve", "--shell", "--approval", "always"],
        workspace=workspace,
        env=cli_env(server.base_url),
    )
    assert result.code == 0, result.stderr
    output = _results(result.log_path)["o1"]["content"]
    assert f"Serving HTTP on 127.0.0.1 port {marker}" in output
    assert f"[{started['id']}: running]" in output
    assert _processes_with(f"http.server {marker}") == []
    # show lists the run's background commands and what became of them
    shown = run_cli(["show", result.log_path.parent.name], workspace=workspace)
    assert shown.code == 0, shown.stderr
    assert "shell:     bash commands in bubblewrap, without network" in shown.stdout
    assert (
        f"background:{started['id']} · killed when its session ended, if still running · $"
        f" python3 -u -m http.server {marker} --bind 127.0.0.1"
    ) in shown.stdout


def test_ctrl_c_kills_a_running_command_and_every_background_one(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(
        turns_model(
            [
                [bash("b1", "sleep 4711", background=True)],
                [bash("f1", "sleep 4712")],
            ]
        )
    )
    proc = start_cli(
        ["run", "--goal", "wait", "--shell", "--approval", "always"],
        workspace=workspace,
        base_url=server.base_url,
    )
    log = wait_for_event(workspace / ".ruizn" / "runs", "tool_call_started", proc)
    deadline = time.monotonic() + 30
    while not _processes_with("sleep 4712") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with("sleep 4711")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert events(log)[-1]["status"] == "cancelled"
    assert _processes_with("sleep 4711") == []
    assert _processes_with("sleep 4712") == []
    # the log says the command was killed by Ctrl-C, and the model is told so on resume
    killed = _results(log)["f1"]
    assert killed["error_type"] == "interrupted"
    assert "because the run was cancelled (Ctrl-C)" in killed["content"]
    resumed = run_cli(
        ["resume", log.parent.name], workspace=workspace, env=cli_env(server.base_url)
    )
    assert resumed.code == 0, resumed.stderr
    assert "(Ctrl-C)" in tool_results(server.requests[-1].body)["f1"]["content"]


def test_kill_9_mid_command_then_resume_never_runs_it_twice(
    workspace: Path, server_factory: Any
) -> None:
    command = "echo > started; sleep 3; echo once >> done"
    server = server_factory(turns_model([[bash("k1", command)]]))
    proc = start_cli(
        ["run", "--goal", "work", "--shell", "--approval", "always"],
        workspace=workspace,
        base_url=server.base_url,
    )
    log = wait_for_event(workspace / ".ruizn" / "runs", "tool_call_started", proc)
    # Mid-command: the sandbox is up and the command running (a kill in the few ms while
    # bubblewrap sets itself up is test_bash's case: the command's guard).
    deadline = time.monotonic() + 20
    while not (workspace / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.communicate(timeout=20)
    # the sandbox dies with ruizn (the kernel's parent-death signals: slow on a loaded machine,
    # never later than the command's 3 s), and the command never finishes
    deadline = time.monotonic() + 2.5
    while _processes_with("sleep 3; echo once") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with("sleep 3; echo once") == []
    resumed = run_cli(
        ["resume", log.parent.name], workspace=workspace, env=cli_env(server.base_url)
    )
    assert resumed.code == 0, resumed.stderr
    time.sleep(3.5)
    assert not (workspace / "done").exists()
    result = _results(log)["k1"]
    assert result["error_type"] == "interrupted"
    assert "may or may not have taken effect" in result["content"]
    sent = tool_results(server.requests[-1].body)
    assert sent["k1"]["is_error"] is True
    assert len(of_type(log, "tool_call_started")) == 1


def test_allow_command_approves_matching_commands_and_asks_for_the_rest(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(turns_model([[bash("a1", "echo hello"), bash("a2", "echo hello; id")]]))
    result = run_cli(
        ["run", "--goal", "go", "--shell", "--allow-command", "echo *"],
        workspace=workspace,
        env=cli_env(server.base_url),
    )
    assert result.code == 4, result.stderr  # a2 waits for a person
    decided = of_type(result.log_path, "tool_approval_decided")
    assert [(d["id"], d["approved"], d["by"]) for d in decided] == [("a1", True, "policy")]
    assert "--allow-command 'echo *'" in decided[0]["reason"]
    requested = [e["id"] for e in of_type(result.log_path, "tool_approval_requested")]
    assert requested == ["a1", "a2"]
    assert "a2  bash" in result.stderr
    assert "echo hello; id" in result.stderr
    assert json.dumps(_results(result.log_path)) == "{}"  # nothing ran before a2 is decided
