"""The small process between ruizn and each shell command: no process a command starts outlives
the command, the run, or ruizn.

Run as a script (`python -I -S reaper.py PARENT_PID CPU_SECONDS DATA_BYTES PROCESSES
NAMESPACES COMMAND...`), stdlib only, so it starts in
a few milliseconds. It makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every
process the command starts, even one that detaches (`setsid`, a double fork) or whose parent
dies, stays below it; it starts COMMAND (bubblewrap, or with `--sandbox off` the shell) with a
parent-death signal, and then:

- COMMAND and all below it get the limits (RLIMIT_CPU and RLIMIT_DATA, per process);
- as root, where the cgroup v1 `pids` hierarchy is writable, it and all below it go in a
  cgroup of their own holding at most PROCESSES tasks (Linux does not apply RLIMIT_NPROC to
  uid 0; elsewhere the sandbox's `ulimit -u` does it);
- NAMESPACES, unless `-`, is `USER_FD,NET_FD`: COMMAND starts inside that user namespace and
  that network namespace (the run's own, bwrap.shared_netns), so the run's commands share one
  loopback;
- when COMMAND ends, it kills everything still below it, and exits as COMMAND did (its code,
  or the same signal);
- on SIGTERM, SIGHUP or SIGINT (ruizn ending the command, or the parent-death signal ruizn's
  own death sends it), it kills everything below it and then itself with SIGKILL.

Killing: SIGKILL to every process found under it in /proc (`task/*/children`), again until
none is left; a process forked during the sweep is reparented to the reaper and found by the
next one. bubblewrap blocked in its set-up (a kill of ruizn at that moment) is one of them.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from collections.abc import Callable

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_SWEEP_PAUSE = 0.005
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as listing:
                found += [int(child) for child in listing.read().split()]
        except (OSError, ValueError):
            continue
    return found


def _kill_below(root: int) -> None:
    stack = _children(root)
    while stack:
        pid = stack.pop()
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        stack += _children(pid)


def _end_all() -> None:
    """Kill and reap every process below this one, until there is none."""
    while True:
        _kill_below(os.getpid())
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        time.sleep(_SWEEP_PAUSE)


def _lower(which: int, value: int, *, grace: int = 0) -> None:
    """Set the limit to `value` (the hard one `grace` above), or leave a lower one as it is."""
    hard = resource.getrlimit(which)[1]
    top = value + grace
    if hard != resource.RLIM_INFINITY:
        value, top = min(value, hard), min(top, hard)
    resource.setrlimit(which, (value, top))


def _pids_cgroup(limit: int) -> tuple[str, str] | None:
    """As root, where the cgroup v1 `pids` hierarchy is mounted writable: a cgroup of this
    process's own, holding it and all below it, at most `limit` tasks (Linux does not apply
    RLIMIT_NPROC to uid 0). (its folder, the parent's) or None."""
    if os.geteuid() != 0 or limit <= 0:
        return None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
            points = [
                line.split()[4]
                for line in mounts
                if " - cgroup " in line and "pids" in line.split()[-1].split(",")
            ]
        with open("/proc/self/cgroup", encoding="utf-8") as groups:
            where = [
                line.rstrip("\n").split(":", 2)[2]
                for line in groups
                if "pids" in line.split(":", 2)[1].split(",")
            ]
    except (OSError, IndexError):
        return None
    if not points or not where:
        return None
    parent = points[0] + where[0].rstrip("/")
    mine = f"{parent}/ruizn-{os.getpid()}"
    try:
        os.mkdir(mine)
    except OSError:
        return None
    try:
        for name, value in (("pids.max", limit), ("cgroup.procs", os.getpid())):
            _write(f"{mine}/{name}", value)
    except OSError:
        _leave((mine, parent))
        return None
    return mine, parent


def _leave(cgroup: tuple[str, str] | None) -> None:
    """Back to the parent cgroup, and the empty one removed."""
    if cgroup is None:
        return
    mine, parent = cgroup
    _quietly(lambda: _write(f"{parent}/cgroup.procs", os.getpid()))
    _quietly(lambda: os.rmdir(mine))


def _write(path: str, value: int) -> None:
    with open(path, "w", encoding="ascii") as knob:
        knob.write(f"{value}\n")


def _quietly(act: Callable[[], object]) -> None:
    """`act`, an OSError ignored (contextlib would cost this script's start 8 ms)."""
    try:  # noqa: SIM105 (see above)
        act()
    except OSError:
        pass


def _start(
    command: list[str], cpu: int, data: int, namespaces: list[int], libc: ctypes.CDLL
) -> int:
    """Fork COMMAND with its parent-death signal, its limits, in the run's namespaces."""
    child = os.fork()
    if child != 0:
        return child
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # SIGXCPU at the limit (the result says why); SIGKILL a second later if it is caught.
    _lower(resource.RLIMIT_CPU, cpu, grace=1)
    _lower(resource.RLIMIT_DATA, data)
    for fd, kind in zip(namespaces, (_CLONE_NEWUSER, _CLONE_NEWNET), strict=False):
        if libc.setns(fd, kind) != 0:
            why = os.strerror(ctypes.get_errno())
            os.write(2, f"ruizn: cannot enter the run's namespace: {why}\n".encode())
            os._exit(126)
        os.close(fd)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    finally:
        os._exit(127)


def main(argv: list[str]) -> int:
    parent, cpu, data, procs = (int(arg) for arg in argv[1:5])
    namespaces = [int(fd) for fd in argv[5].split(",")] if argv[5] != "-" else []
    command = argv[6:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    cgroup = None

    def stop(signum: int, frame: object) -> None:
        _end_all()
        _leave(cgroup)
        os.kill(os.getpid(), signal.SIGKILL)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    # ruizn set SIGKILL as this process's parent-death signal; from here on it can clean up.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        return 137  # ruizn is gone already
    # Signals wait while the cgroup is made: `stop` must know it to remove it.
    held = {signal.SIGTERM, signal.SIGHUP, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    cgroup = _pids_cgroup(procs)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
    child = _start(command, cpu, data, namespaces, libc)
    # The descriptors passed for COMMAND are COMMAND's: ruizn waits for their end of file.
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd > 2:
            os.closerange(fd, fd + 1)  # (closerange ignores an fd already gone)
    while True:  # reaping orphans as they end, until COMMAND does
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 127
        if pid == child:
            break
    _end_all()
    _leave(cgroup)
    if os.WIFSIGNALED(status):
        ended = os.WTERMSIG(status)
        if ended not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(ended, signal.SIG_DFL)
        os.kill(os.getpid(), ended)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128


if __name__ == "__main__":
    sys.exit(main(sys.argv))
