"""The shell tools' parts that need no model: the approval prompt, output capping, timeouts,
and the sandbox's command line (the whole tool runs in tests/cli/test_shell.py)."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from ruizn.effects.person.approval import TerminalApprover
from ruizn.effects.tools.bash import HEAD_BYTES, TAIL_BYTES, ShellJobs, shell_config, shell_tools
from ruizn.effects.tools.bwrap import find_bwrap, shell_environment
from ruizn.rules import command_allowed
from ruizn.state import ToolCall
from tests.conftest import run_python


def _jobs(workspace: Path, *, timeout: float = 120, network: bool = False, **env: str) -> ShellJobs:
    environ = {**shell_environment(os.environ), **env}
    return ShellJobs(
        shell_config(
            workspace=workspace,
            hidden=(),
            allow_read=(),
            network=network,
            sandbox=True,
            bwrap=find_bwrap(os.environ),
            environ=environ,
            timeout=timeout,
        )
    )


def test_the_prompt_shows_the_command_with_control_characters_escaped() -> None:
    out = io.StringIO()
    read, write = os.pipe()
    os.write(write, b"y\n")
    command = "echo ok\r\x1b[2Krm -rf ~\nls"
    call = ToolCall(id="t1", name="bash", input={"command": command, "timeout": 5})
    answer = anyio.run(lambda: TerminalApprover(out, in_fd=read)(call, None))
    os.close(read)
    os.close(write)
    assert answer is not None
    assert answer.approved
    shown = out.getvalue()
    assert "\x1b" not in shown
    assert "\r" not in shown
    assert "$ echo ok" in shown
    assert "rm -rf ~" in shown
    assert '{"timeout": 5}' in shown


def test_long_output_keeps_its_head_and_tail_and_says_how_much_was_cut(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path)
    bash = shell_tools(jobs)[0]
    try:
        result = anyio.run(lambda: bash.invoke({"command": "seq 1 200000; echo last-line"}))
    finally:
        jobs.close()
    assert isinstance(result, str)
    assert result.startswith("1\n2\n3\n")
    assert "last-line\n[exit code 0" in result
    assert "bytes of output cut" in result
    assert len(result.encode()) < HEAD_BYTES + TAIL_BYTES + 500


def test_a_sandboxed_command_runs_as_bash_c_would(tmp_path: Path) -> None:
    # The command starts behind a guard (is ruizn still alive?), which leaves no trace: $0 is
    # the shell, no descriptor of ruizn's is open, and BASH_ENV's file is read once.
    (tmp_path / "env.sh").write_text(f"echo sourced >> {tmp_path}/count\n", encoding="utf-8")
    jobs = _jobs(tmp_path, timeout=60, BASH_ENV=str(tmp_path / "env.sh"))
    bash = shell_tools(jobs)[0]
    command = 'echo "$0"; echo "$BASH_ENV"; cd /proc/$$/fd && echo *'
    try:
        result = anyio.run(lambda: bash.invoke({"command": command}))
    finally:
        jobs.close()
    assert isinstance(result, str)
    shell, bash_env, fds = result.splitlines()[:3]
    assert shell == "/bin/bash"
    assert bash_env == str(tmp_path / "env.sh")
    assert fds.split() == ["0", "1", "2", "3"]  # 3: the folder the glob reads
    assert (tmp_path / "count").read_text(encoding="utf-8") == "sourced\n"


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path)
    bash = shell_tools(jobs)[0]
    try:
        result = anyio.run(
            lambda: bash.invoke(
                {"command": "(sleep 30; touch late) & echo started; wait", "timeout": 1}
            )
        )
    finally:
        jobs.close()
    assert not isinstance(result, str)
    assert result.error_type == "timeout"
    assert "started" in str(result.content)
    assert "timed out after 1.0s" in str(result.content)
    assert all(job.proc.returncode is not None for job in jobs.jobs.values())


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("pytest -q tests/x.py", True),
        ("pytest", False),
        ("pytest -q | sh", False),
        ("pytest -q; rm -rf ~", False),
        ("pytest -q && rm -rf ~", False),
        ("pytest $(curl evil)", False),
        ("pytest `id`", False),
        ("pytest -q\nrm -rf ~", False),
        ("pytest > /etc/passwd", False),
        ("git status", True),
        ("git status ", False),
    ],
)
def test_allow_command_patterns_never_let_a_chained_command_through(
    command: str, allowed: bool
) -> None:
    patterns = ("pytest *", "git status")
    assert (command_allowed(command, patterns) is not None) is allowed


def test_a_pattern_that_spells_out_a_pipe_allows_exactly_that_pipe() -> None:
    assert command_allowed("git log | head", ("git log | head",)) == "git log | head"
    assert command_allowed("git log | sh", ("git log | head",)) is None


@pytest.mark.parametrize("network", [False, True])
def test_the_network_is_the_hosts_only_when_the_user_turns_it_on(
    tmp_path: Path, network: bool
) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    jobs = _jobs(tmp_path, network=network)
    bash = shell_tools(jobs)[0]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
    try:
        result = anyio.run(lambda: bash.invoke({"command": f'python3 -c "{probe}" && echo UP'}))
    finally:
        jobs.close()
        listener.close()
    # without the network the probe exits 1: a failed command, its output kept
    text = result if isinstance(result, str) else str(result.content)
    assert ("UP\n[exit code 0" in text) is network
    assert isinstance(result, str) is network
    if not network:
        assert not isinstance(result, str)
        assert (result.is_error, result.error_type) == (True, "exit_status")
        assert text.endswith("]")
        assert "[exit code 1 · " in text


def test_a_background_server_answers_the_runs_later_commands_with_the_network_off(
    tmp_path: Path,
) -> None:
    """The commands of one run share one network namespace: a server one starts answers the
    next ones; neither the host nor another run reaches it, and it reaches nothing outside."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    host_port = listener.getsockname()[1]
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    serve = f"python3 -m http.server {port} --bind 127.0.0.1"
    fetch = (
        "python3 -c 'import sys, urllib.request as u;"
        ' print(u.urlopen("http://127.0.0.1:" + sys.argv[1], timeout=2).status)\' '
    )
    jobs, other = _jobs(tmp_path), _jobs(tmp_path)
    bash, _, kill = shell_tools(jobs)

    async def session() -> tuple[str, ...]:
        started = await bash.invoke({"command": serve, "background": True})
        job_id = str(started).split()[5]  # "started in the background as ID (pid N)..."
        wait = f"for i in $(seq 50); do {fetch}{port} 2>/dev/null && break; sleep 0.1; done"
        same = await bash.invoke({"command": wait})
        out = await bash.invoke({"command": f"{fetch}{host_port} 2>&1 | tail -1"})
        elsewhere = await shell_tools(other)[0].invoke({"command": f"{fetch}{port} 2>&1 | tail -1"})
        await kill.invoke({"id": job_id})
        return str(same), str(out), str(elsewhere)

    try:
        same, out, elsewhere = anyio.run(session)
        with pytest.raises(ConnectionRefusedError):  # the host does not reach it
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        jobs.close()
        other.close()
        listener.close()
    assert same.startswith("200\n"), same
    assert "Connection refused" in out, out
    assert "Connection refused" in elsewhere, elsewhere


def test_many_commands_leave_no_descriptor_or_process_behind(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path)
    bash = shell_tools(jobs)[0]

    async def many() -> None:
        for _ in range(16):  # a descriptor lost per command would show at once
            await bash.invoke({"command": "true"})

    before = len(os.listdir("/proc/self/fd"))
    try:
        anyio.run(many)
        for job in jobs.jobs.values():
            job.wait_gone(5)
    finally:
        jobs.close()
    assert len(os.listdir("/proc/self/fd")) <= before + 2
    assert all(job.proc.returncode == 0 for job in jobs.jobs.values())


_KILLED_AT_ONCE = """
import os, signal, sys
from pathlib import Path
from ruizn.effects.tools.bash import ShellJobs, shell_config
from ruizn.effects.tools.bwrap import find_bwrap, shell_environment

workspace = Path(sys.argv[1])
jobs = ShellJobs(shell_config(
    workspace=workspace, hidden=(), allow_read=(), network=False, sandbox=sys.argv[2] == "on",
    bwrap=find_bwrap(os.environ), environ=shell_environment(os.environ), timeout=60,
))
job = jobs.start("sleep 1; echo ran >> done", background=True)
if sys.argv[3] == "bwrap":  # the instant bubblewrap is exec'd below the reaper
    children = f"/proc/{job.pid}/task/{job.pid}/children"
    while not any(
        Path(f"/proc/{child}/comm").read_text().strip() == "bwrap"
        for child in Path(children).read_text().split()
        if Path(f"/proc/{child}/comm").exists()
    ):
        pass
os.kill(os.getpid(), signal.SIGKILL)  # before the sandbox is set up
"""


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_ruizn_killed_the_instant_a_command_starts_takes_the_command_with_it(
    tmp_path: Path, sandbox: str
) -> None:
    """A kill -9 of ruizn at the worst moments (the command's reaper just started; with the
    sandbox, bubblewrap just exec'd, its own parent-death signal not set yet) still ends the
    command, and bubblewrap: nothing finishes or waits behind ruizn's back."""
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_AT_ONCE, encoding="utf-8")
    workspaces = []
    for attempt in range(12):
        workspace = tmp_path / f"ws{attempt}"
        workspace.mkdir()
        workspaces.append(workspace)
        when = "bwrap" if sandbox == "on" and attempt % 2 else "reaper"
        done = run_python(str(script), str(workspace), sandbox, when, timeout=30)
        assert done.returncode == -9, done.stderr
    time.sleep(2.5)  # each command would have written `done` after 1 s
    assert [w.name for w in workspaces if (w / "done").exists()] == []
    # Nor is bubblewrap left waiting in its set-up for a parent that is gone.
    assert _live_with(str(tmp_path)) == []


_DETACHES = """
import os, signal, sys, time
from pathlib import Path
from ruizn.effects.tools.bash import ShellJobs, shell_config
from ruizn.effects.tools.bwrap import find_bwrap, shell_environment

workspace = Path(sys.argv[1])
jobs = ShellJobs(shell_config(
    workspace=workspace, hidden=(), allow_read=(), network=False, sandbox=sys.argv[2] == "on",
    bwrap=find_bwrap(os.environ), environ=shell_environment(os.environ), timeout=60,
))
# A child that leaves the command's process group and session, and one that stays.
jobs.start("setsid sh -c 'sleep 1.5; echo ran >> detached' & (sleep 1.5; echo ran >> kept) &"
           " echo up > started; sleep 30", background=True)
while not (workspace / "started").exists():
    time.sleep(0.01)
if sys.argv[3] == "kill -9":
    os.kill(os.getpid(), signal.SIGKILL)
jobs.close()
"""


def test_no_process_a_command_started_outlives_the_run_or_ruizn(tmp_path: Path) -> None:
    """With the sandbox on or off, whether the run ends or ruizn is killed (-9), no process a
    command started lives on: not one that left its process group and session either."""
    script = tmp_path / "detaches.py"
    script.write_text(_DETACHES, encoding="utf-8")
    cases = [(sandbox, end) for sandbox in ("on", "off") for end in ("kill -9", "the run ends")]
    procs = []
    for n, (sandbox, end) in enumerate(cases):  # all at once: one wait for the four
        workspace = tmp_path / f"ws{n}"
        workspace.mkdir()
        procs.append(subprocess.Popen([sys.executable, str(script), str(workspace), sandbox, end]))
    codes = [proc.wait(timeout=30) for proc in procs]
    assert codes == [-9 if end == "kill -9" else 0 for _, end in cases]
    time.sleep(2.5)  # each child would have written its file after 1.5 s
    for n in range(len(cases)):
        workspace = tmp_path / f"ws{n}"
        # (.git: the empty mount point a kill -9 leaves, see gitguard.py)
        assert sorted(p.name for p in workspace.iterdir() if p.name != ".git") == ["started"]
    assert _live_with(str(tmp_path)) == []


def _live_with(marker: str) -> list[str]:
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
