"""The sandbox holds against a command that tries to undo it: the escapes a red team found as
root (unmounting what hides the home folder, the run logs, /run and git; remounting `/`
read-write) and the ways around git's protection it found as an ordinary user, each run in
real bubblewrap as root (as this machine and CI run) and as an ordinary user (`setpriv` to
nobody), against a real git."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ruizn.effects.tools.bash import ShellConfig, ShellJobs, shell_config
from ruizn.effects.tools.bwrap import bwrap_argv, find_bwrap

NOBODY = 65534
SECRET = "ssh-private-key-material"
ROLES = ["root", "user"]


def _as(role: str) -> list[str]:
    if role == "root":
        assert os.geteuid() == 0, "this test runs the sandbox as root, as CI does"
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to run as an ordinary user"
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def base() -> Iterator[Path]:
    # Not under pytest's tmp_path: its root folder is private to root, and nobody must reach
    # this; not under /tmp either, which the sandbox replaces.
    path = Path(tempfile.mkdtemp(prefix="ruizn-holds-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _own(path: Path, role: str) -> None:
    if role == "user":
        for folder, dirs, files in os.walk(path):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.lchown(name, NOBODY, NOBODY)


def _git(role: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(
        [*_as(role), "git", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _config(workspace: Path, home: Path, hidden: tuple[Path, ...] = ()) -> ShellConfig:
    environ = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home)}
    return shell_config(
        workspace=workspace,
        hidden=hidden,
        allow_read=(),
        network=False,
        sandbox=True,
        bwrap=find_bwrap(os.environ),
        environ=environ,
        timeout=30,
    )


def _inside(role: str, config: ShellConfig, command: str) -> str:
    """What `command` printed, run in the real sandbox as `role`."""
    assert config.bwrap is not None, "bubblewrap is needed (apt-get install bubblewrap)"
    assert config.confinement is not None
    argv = bwrap_argv(config.bwrap, config.confinement, ["bash", "-c", command])
    done = subprocess.run(
        [*_as(role), *argv],
        cwd=config.workspace,
        env=dict(config.environ),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.stdout + done.stderr


_ESCAPES = {
    "home": 'umount "$HOME"; umount -l "$HOME"; cat "$HOME/.ssh/id_ed25519"',
    "remount": (
        "mount -o remount,rw /; mount -o remount,bind,rw /; mount -o remount,rw /var/tmp;"
        ' echo planted > "$OUTSIDE/planted"'
    ),
    "git-hooks": (
        "umount .git/hooks; umount .git; umount -l .git;"
        " printf '#!/bin/sh\\ntouch \"$OUTSIDE/planted\"\\n' > .git/hooks/pre-commit"
    ),
    "run-logs": "umount .ruizn/runs; umount -l .ruizn/runs; cat .ruizn/runs/*/events.jsonl",
    "run": "umount /run; umount -l /run; ls /run",
    "nested-userns": 'unshare -Urm sh -c \'umount -l "$HOME"; cat "$HOME/.ssh/id_ed25519"\'',
}


@pytest.mark.parametrize("role", ROLES)
def test_a_command_cannot_unmount_or_remount_its_way_out(base: Path, role: str) -> None:
    home = base / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET)
    workspace = base / "ws"
    runs = workspace / ".ruizn" / "runs" / "r1"
    runs.mkdir(parents=True)
    (runs / "events.jsonl").write_text(f'{{"secret": "{SECRET}"}}\n')
    outside = base / "outside"
    outside.mkdir()
    _own(base, role)
    assert _git(role, "init", "-q", str(workspace), cwd=base).returncode == 0
    run_marker = Path(f"/run/ruizn-holds-{os.getpid()}")
    run_marker.write_text("")
    try:
        config = _config(workspace, home, hidden=(workspace / ".ruizn" / "runs",))
        # Each escape in a subshell of its own, one sandbox for all (they are cheap to try).
        tries = "".join(f"( {line} ); " for line in _ESCAPES.values())
        command = f"export OUTSIDE={outside}; {tries} grep CapEff /proc/self/status"
        said = _inside(role, config, command)
    finally:
        run_marker.unlink()
    assert "CapEff:\t0000000000000000" in said  # the command ran, with no capability
    assert SECRET not in said
    assert run_marker.name not in said
    assert not (outside / "planted").exists()
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert (home / ".ssh" / "id_ed25519").read_text() == SECRET


def _repo_with_submodule(base: Path, role: str) -> Path:
    upstream = base / "upstream"
    workspace = base / "ws"
    base.joinpath("outside").mkdir()
    _own(base, role)
    for args, cwd in [
        (("init", "-q", str(upstream)), base),
        (("commit", "-q", "--allow-empty", "-m", "s"), upstream),
        (("init", "-q", str(workspace)), base),
        (
            ("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "sub"),
            workspace,
        ),
        (("commit", "-q", "-m", "init"), workspace),
    ]:
        done = _git(role, *args, cwd=cwd)
        assert done.returncode == 0, done.stderr
    return workspace


_PLANT = "printf '[core]\\n\\tfsmonitor = touch {marker}\\n'"
_BYPASSES = {
    # Move .git away, and copy it back with a new core.fsmonitor.
    "moved": "mv .git .git-old && cp -a .git-old .git && {plant} >> .git/config",
    # Point .git/commondir at a folder of the workspace holding its own config and hooks.
    "commondir": (
        "mkdir -p evil && cp -a .git/. evil/ && {plant} >> evil/config"
        " && echo ../evil > .git/commondir"
    ),
    # Create .git/hooks where the repository had none.
    "new-hooks": (
        "mkdir .git/hooks && printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit"
        " && chmod +x .git/hooks/pre-commit"
    ),
    # Write a submodule's config and hooks, or repoint its .git file.
    "submodule": (
        "{plant} >> .git/modules/sub/config; mkdir -p .git/modules/sub/hooks;"
        " git init -q ev && {plant} >> ev/.git/config; echo 'gitdir: ../ev/.git' > sub/.git"
    ),
}


@pytest.mark.parametrize("role", ROLES)
def test_a_command_cannot_change_what_git_runs_for_the_person(base: Path, role: str) -> None:
    workspace = _repo_with_submodule(base, role)
    shutil.rmtree(workspace / ".git" / "hooks")  # for the one that creates it
    marker = base / "outside" / "planted-code-ran"
    plant = _PLANT.format(marker=marker)
    tries = [f"( {line.format(plant=plant, marker=marker)} ) 2>&1" for line in _BYPASSES.values()]
    said = _inside(role, _config(workspace, base / "outside"), "; echo :; ".join(tries))
    refusals = said.split(":\n")
    assert len(refusals) == len(_BYPASSES), said
    for refusal in refusals:
        assert "Read-only file system" in refusal or "busy" in refusal, said
    # The person's git afterwards, outside the sandbox: it runs nothing the command planted.
    for args in (
        ("status",),
        ("-C", "sub", "status"),
        ("commit", "-q", "--allow-empty", "-m", "x"),
    ):
        done = _git(role, *args, cwd=workspace)
        assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert not (workspace / ".git" / "commondir").exists()
    assert not (workspace / ".git" / "hooks").exists()
    assert not (workspace / ".git-old").exists()


@pytest.mark.parametrize("role", ROLES)
def test_a_workspace_that_is_no_repository_cannot_become_one_and_keeps_no_trace(
    base: Path, role: str
) -> None:
    workspace = base / "ws"
    workspace.mkdir()
    _own(base, role)
    config = _config(workspace, base)
    said = _inside(role, config, "git init -q .; mkdir -p .git/hooks; echo made > file; echo end")
    assert "end" in said
    assert "Read-only file system" in said
    ShellJobs(config).close()  # the run ends: the empty mount point bubblewrap made goes
    assert sorted(p.name for p in workspace.iterdir()) == ["file"]


def test_git_reads_inside_the_sandbox_and_refuses_to_write(base: Path) -> None:
    workspace = _repo_with_submodule(base, "root")
    said = _inside(
        "root",
        _config(workspace, base / "outside"),
        "git status --short && git log --oneline | wc -l; git commit -q --allow-empty -m y",
    )
    assert said.splitlines()[0].strip() == "1"
    assert "Read-only file system" in said or "Unable to create" in said


def test_a_linked_worktree_keeps_its_git_file_and_git_dirs(base: Path) -> None:
    """A workspace that is a linked worktree: its `.git` file cannot be repointed, and the
    git dirs it names (its own and the common one) cannot be written."""
    main = base / "main"
    workspace = base / "ws"
    base.joinpath("outside").mkdir()
    for args, cwd in [
        (("init", "-q", str(main)), base),
        (("commit", "-q", "--allow-empty", "-m", "m"), main),
        (("worktree", "add", "-q", str(workspace)), main),
    ]:
        done = _git("root", *args, cwd=cwd)
        assert done.returncode == 0, done.stderr
    marker = base / "outside" / "planted-code-ran"
    plant = _PLANT.format(marker=marker)
    tries = [
        f"git init -q ev && {plant} >> ev/.git/config && echo 'gitdir: ev/.git' > .git",
        f"{plant} >> {main}/.git/config",
        f"{plant} >> {main}/.git/worktrees/ws/config.worktree",
        f"echo ../../evil > {main}/.git/worktrees/ws/commondir",
    ]
    said = _inside("root", _config(workspace, base / "outside"), "; ".join(tries))
    assert said.count("Read-only file system") == len(tries), said
    for args in (("status",), ("commit", "-q", "--allow-empty", "-m", "x")):
        done = _git("root", *args, cwd=workspace)
        assert done.returncode == 0, done.stderr
    assert not marker.exists()
