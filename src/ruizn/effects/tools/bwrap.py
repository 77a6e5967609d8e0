"""Bubblewrap: the command line that confines a shell command, and the check that it works.

What a sandboxed command gets (see docs/shell.md):
- the whole file system read-only (`--ro-bind / /`), a fresh /dev and /proc, a private
  /tmp (tmpfs), /run hidden (the host's Unix sockets), the home folder hidden (a tmpfs
  over it) except the folders the user lets it read (`--shell-allow-read`, bound read-only
  again on top);
- the workspace read-write, bound last so it is writable even inside /tmp or the home
  folder; the run-log folder under it hidden again (a tmpfs), so a command can neither read
  nor rewrite the log that is the run's truth; every git directory of the workspace's
  repository and submodules read-only, each `.git` entry held in place (gitguard.py);
- every namespace of its own (`--unshare-all`, `--unshare-user`: user, pid, ipc, uts,
  cgroup), but the network namespace, which is the run's (`shared_netns`, entered by the
  reaper before bubblewrap starts; `--share-net` keeps it), or the host's when the user asks
  (`--shell-network on`);
- no capability (`--cap-drop ALL`) and no further user namespace (`--disable-userns`): a
  command of a ruizn running as root can no more unmount or remount what hides the home
  folder, the run logs, /run or git, nor write through `/`, than a user's command can;
- a session of its own (`--new-session`: no TIOCSTI into ruizn's terminal), and
  `--die-with-parent`: bubblewrap's parent is ruizn itself, which lives as long as the run,
  so a background server outlives the call that started it but never ruizn (a kill -9 of
  ruizn takes the sandbox's pid 1, and with it every process in it).

Fail closed: `probe` runs `true` with exactly these flags; a run that offers bash does not
start when it fails, and the error quotes bubblewrap's own words. No silent fallback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from attrs import field, frozen

from ruizn.effects.tools.gitguard import GitGuard

PROBE_TIMEOUT = 10.0
# Variables whose values are secrets by their name: never passed to a command.
_SECRET_NAME = re.compile(
    r"(^ANTHROPIC_)|(^RUIZN_MCP_)|(_(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$)",
    re.IGNORECASE,
)


class SandboxUnavailable(Exception):
    """Bubblewrap cannot confine commands here; the message is one line: why, and what to do."""


@frozen(kw_only=True)
class Confinement:
    """Where a sandboxed command may read and write."""

    workspace: Path
    # Folders hidden under a tmpfs even inside the workspace (the run logs).
    hidden: tuple[Path, ...] = ()
    # Folders under the hidden home that stay readable (--shell-allow-read).
    allow_read: tuple[Path, ...] = ()
    network: bool = False
    # With the network off: the command joins the run's own network namespace (shared_netns;
    # the reaper enters it before bubblewrap starts), so commands of a run reach each other.
    shared_net: bool = False
    home: Path | None = None
    git: GitGuard = field(factory=GitGuard)


def find_bwrap(environ: Mapping[str, str]) -> str | None:
    return shutil.which("bwrap", path=environ.get("PATH", os.defpath))


def bwrap_argv(
    bwrap: str, box: Confinement, argv: Sequence[str], *, info_fd: int | None = None
) -> list[str]:
    """`argv` run inside bubblewrap as `box` says (see the module docstring). `info_fd`:
    where bubblewrap writes the sandbox's pid 1 (`--info-fd`), so its end can be awaited."""
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # /run holds the host's Unix sockets (docker, dbus, postgres, ssh and gpg agents): a
    # read-only mount does not stop connect(), and --unshare-net does not cover them.
    args += ["--tmpfs", "/run"]
    resolv = Path("/etc/resolv.conf")
    if resolv.is_symlink() and Path("/run") in resolv.resolve().parents:
        target = str(resolv.resolve())  # systemd-resolved's file: DNS for --shell-network on
        args += ["--ro-bind-try", target, target]
    home = box.home
    if home is not None and home != Path("/") and home.is_dir():
        args += ["--tmpfs", str(home)]
    for path in box.allow_read:
        args += ["--ro-bind-try", str(path), str(path)]
    args += ["--bind", str(box.workspace), str(box.workspace)]
    # git would run a command's code outside the sandbox at the person's next `git status`.
    for path in box.git.protect:
        args += ["--ro-bind", str(path), str(path)]
    for path in box.git.mask:
        args += ["--tmpfs", str(path), "--remount-ro", str(path)]
    for path in box.hidden:
        if path.is_dir():
            args += ["--tmpfs", str(path)]
    args += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    if box.network or box.shared_net:
        args += ["--share-net"]
    if box.shared_net:
        # Entered through a user namespace of the run's: say who the command is, as it is
        # without it (bubblewrap would make it uid 0 of its new namespace).
        args += ["--uid", str(os.getuid()), "--gid", str(os.getgid())]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    args += ["--new-session", "--die-with-parent", "--chdir", str(box.workspace), "--", *argv]
    return args


def shared_netns(bwrap: str, environ: Mapping[str, str]) -> tuple[int, int]:
    """A network namespace of the run's own (only a loopback), and the user namespace that
    owns it, as two open descriptors (user, net): every sandboxed command of the run joins
    them, so a server one command starts in the background answers the next ones, while the
    network stays off. bubblewrap makes them (and brings the loopback up); its process ends
    at once, and the namespaces live as long as the descriptors and the processes in them:
    ruizn closes the descriptors when the run ends, and its death closes them too."""
    info_read, info_write = os.pipe()
    argv = [bwrap, "--ro-bind", "/", "/", "--unshare-user", "--unshare-net", "--die-with-parent"]
    argv += ["--info-fd", str(info_write), "--", "/bin/sh", "-c", "read -r line"]
    try:
        holder = subprocess.Popen(
            argv,
            env=dict(environ),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(info_write,),
        )
    except OSError as exc:
        os.close(info_read)
        raise SandboxUnavailable(f"the shell's network namespace cannot start: {exc}") from None
    finally:
        os.close(info_write)
    try:
        with os.fdopen(info_read, "rb") as info:
            pid = json.loads(info.read() or b"{}").get("child-pid")
        if not isinstance(pid, int):
            said = holder.stderr.read().decode("utf-8", "replace") if holder.stderr else ""
            raise SandboxUnavailable(
                "the shell's network namespace cannot start: bubblewrap says:"
                f" {' '.join(said.split())[:300] or 'nothing'}"
            )
        user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(user)
            raise
    except (OSError, ValueError) as exc:
        raise SandboxUnavailable(f"the shell's network namespace cannot start: {exc}") from None
    finally:
        try:
            holder.communicate(timeout=PROBE_TIMEOUT)  # closes its stdin: `read` ends, and it
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
    return user, net


def probe(bwrap: str | None, box: Confinement, environ: Mapping[str, str]) -> None:
    """Raise SandboxUnavailable unless `true` runs inside bubblewrap with `box`'s flags."""
    fix = "install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces"
    off = "or pass --sandbox off to run commands unconfined"
    if bwrap is None:
        raise SandboxUnavailable(
            f"the shell's sandbox cannot start: bwrap is not on PATH; {fix}, {off}"
        )
    try:
        done = subprocess.run(
            bwrap_argv(bwrap, box, ["true"]),
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(
            f"the shell's sandbox cannot start: {bwrap}: {exc}; {fix}, {off}"
        ) from None
    if done.returncode != 0:
        said = " ".join(done.stderr.decode("utf-8", "replace").split()) or (
            f"exit status {done.returncode}"
        )
        raise SandboxUnavailable(
            f"the shell's sandbox cannot start: bubblewrap says: {said[:300]}; {fix}, {off}"
        )


def shell_environment(environ: Mapping[str, str], drop: Iterable[str] = ()) -> dict[str, str]:
    """ruizn's environment without its secrets: the API key, every *_TOKEN/*_KEY/*_SECRET
    variable, the MCP header and URL variables, and the names in `drop` (MCP `env`)."""
    dropped = set(drop)
    return {
        name: value
        for name, value in environ.items()
        if name not in dropped and not _SECRET_NAME.search(name)
    }
