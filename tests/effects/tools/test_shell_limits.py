"""Each command's limits (CPU time, memory, processes), in the real sandbox: a bomb ends alone,
and the model reads why."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import anyio
import attrs

from ruizn.effects.tools.bash import Limits, ShellJobs, _guarded, shell_config, shell_tools
from ruizn.effects.tools.bwrap import bwrap_argv, find_bwrap, shell_environment


def _run(workspace: Path, command: str, limits: Limits) -> str:
    config = shell_config(
        workspace=workspace,
        hidden=(),
        allow_read=(),
        network=False,
        sandbox=True,
        bwrap=find_bwrap(os.environ),
        environ=shell_environment(os.environ),
        timeout=30,
    )
    jobs = ShellJobs(attrs.evolve(config, limits=limits))
    bash = shell_tools(jobs)[0]
    try:
        result = anyio.run(lambda: bash.invoke({"command": command}))
    finally:
        jobs.close()
    return result if isinstance(result, str) else str(getattr(result, "content", result))


def test_a_command_that_spins_is_stopped_at_its_cpu_time_and_the_model_reads_why(
    tmp_path: Path,
) -> None:
    said = _run(tmp_path, "while :; do :; done", Limits(cpu_seconds=1))
    assert said.endswith("stopped at its CPU time limit (1 s)]"), said


def test_a_memory_bomb_fails_its_allocation_and_the_next_command_runs(tmp_path: Path) -> None:
    limits = Limits(memory_bytes=200 << 20)
    said = _run(tmp_path, "python3 -c 'x = bytearray(1 << 30)'; echo after", limits)
    assert "MemoryError" in said
    assert "after\n[exit code 0" in said
    assert "small\n[exit code 0" in _run(
        tmp_path, "python3 -c 'x = bytearray(50 << 20); print(\"small\")'", limits
    )


def test_a_fork_bomb_stays_within_its_process_limit_as_a_user() -> None:
    """As an ordinary user (Linux does not apply the process limit to uid 0: see
    docs/shell.md), the bomb is held at the limit inside its sandbox, and ends with it."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to run as an ordinary user"
    workspace = Path(tempfile.mkdtemp(prefix="ruizn-bomb-", dir="/var/tmp"))
    os.chown(workspace, 65534, 65534)
    config = shell_config(
        workspace=workspace,
        hidden=(),
        allow_read=(),
        network=False,
        sandbox=True,
        bwrap=find_bwrap(os.environ),
        environ={"PATH": os.environ.get("PATH", os.defpath), "HOME": str(workspace)},
        timeout=30,
    )
    assert config.bwrap is not None
    assert config.confinement is not None
    alive, keep = os.pipe()
    os.set_inheritable(alive, True)
    # The shell waits 2 s (a builtin read, which needs no fork) while the bomb grows.
    bomb_line = "b() { b | b & }; b; read -t 2; echo waited"
    guarded = _guarded("/bin/bash", bomb_line, alive, "", processes=40)
    prlimit = shutil.which("prlimit")
    assert prlimit is not None, "prlimit (util-linux) is needed"
    # A net for the host, should the sandbox's limit fail: nobody's processes in all, 1000.
    user = [prlimit, "--nproc=1000:1000", setpriv, "--reuid=65534", "--regid=65534"]
    user += ["--clear-groups"]
    bomb = subprocess.Popen(
        [*user, *bwrap_argv(config.bwrap, config.confinement, guarded)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(alive,),
        env=dict(config.environ),
        start_new_session=True,
    )
    most = 0
    try:
        # The bomb is held at the limit, its forks fail, and it ends with its command.
        while bomb.poll() is None:
            most = max(most, len(_processes_of(65534)))
        said = bomb.communicate(timeout=30)[0].decode(errors="replace")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bomb.pid, signal.SIGKILL)
        os.close(alive)
        os.close(keep)
        shutil.rmtree(workspace, ignore_errors=True)
    assert "fork: retry: Resource temporarily unavailable" in said
    assert 10 < most <= 40 + 2, most  # +2: bubblewrap's own, outside the sandbox's count
    assert _processes_of(65534) == []


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)] and "Z" not in fields["State"]:
            found.append(int(entry.name))
    return found


def test_a_fork_bomb_of_a_root_ruizn_is_held_by_a_pids_cgroup_of_its_own(
    tmp_path: Path,
) -> None:
    """Linux does not apply RLIMIT_NPROC to uid 0: as root, each command's reaper puts it in
    a pids cgroup of its own (cgroup v1, as on this machine and CI), removed when it ends."""
    assert os.geteuid() == 0, "this test runs ruizn as root, as CI does"
    config = shell_config(
        workspace=tmp_path,
        hidden=(),
        allow_read=(),
        network=False,
        sandbox=True,
        bwrap=find_bwrap(os.environ),
        environ=shell_environment(os.environ),
        timeout=30,
    )
    jobs = ShellJobs(attrs.evolve(config, limits=Limits(processes=40)))
    bash, output, kill = shell_tools(jobs)

    async def cgroup_of(command: str) -> tuple[str, str]:
        started = await bash.invoke({"command": command, "background": True})
        job = jobs.jobs[str(started).split()[5]]
        for _ in range(500):  # until the reaper has moved in
            lines = _text(f"/proc/{job.pid}/cgroup").splitlines()
            where = next(line.split(":", 2)[2] for line in lines if ":pids:" in line)
            if "/ruizn-" in where:
                break
            await anyio.sleep(0.01)
        return job.id, "/sys/fs/cgroup/pids" + where

    async def session() -> tuple[str, int, str]:
        # First a harmless command: the bomb runs only once the limit is seen in place.
        job_id, path = await cgroup_of("sleep 30")
        assert "/ruizn-" in path
        assert _text(f"{path}/pids.max").strip() == "40"
        await kill.invoke({"id": job_id})
        assert not _exists(path)  # removed when the command ended
        job_id, path = await cgroup_of("sleep 3 & b() { b | b & }; b; wait")
        most = 0
        for _ in range(100):
            most = max(most, int(_text(f"{path}/pids.current")))
            await anyio.sleep(0.02)
        await kill.invoke({"id": job_id})
        return str(await output.invoke({"id": job_id})), most, path

    try:
        said, most, path = anyio.run(session)
    finally:
        jobs.close()
    assert "fork: retry: Resource temporarily unavailable" in said
    assert 10 < most <= 40
    assert not Path(path).exists()


def _text(path: str) -> str:
    return Path(path).read_text()


def _exists(path: str) -> bool:
    return Path(path).exists()
