"""A warm `python -m ruizn` for the CLI tests: a process that has imported ruizn, the SDK
and DBOS once, and forks a fresh child for each command a test runs (tests/warm_client.py).

Why: `import anthropic` costs about a CPU-second a process, DBOS another, and the suite
runs hundreds of commands against the fake API: most of its time was imports. A forked
child is still a real process of its own (its own folder, environment, descriptors, exit
code, signals and threads) running ruizn/__main__.py as `python -m ruizn` does; only the
imports are shared.

A command is run cold (a fresh `python -m ruizn`, the caller's fallback) whenever a fork
could differ from a fresh interpreter: an environment that differs in a variable read at
start-up (PYTHON*, LANG, LC_*) or in one the imports read (recorded while importing), or a
PYTHONPATH folder holding a module named like one imported from elsewhere. (The working
folder cannot shadow one: ruizn/__main__.py puts it last on sys.path.)

Run as a script by path (`python tests/warm_cli.py SOCKET`), so no `tests` package is
imported into the children. One connection per command, each message one JSON line: the
client sends {argv, cwd, env} with its stdin, stdout and stderr attached (SCM_RIGHTS); the
server answers {"cold": why}, or {"pid": N} and then {"code": C} (C as subprocess has it:
negative for a signal). The server ends when its stdin closes (its pytest process is gone).
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import select
import signal
import socket
import sys
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

STARTUP = ("PYTHON", "LANG", "LC_")  # read by the interpreter before any import


class _Recorder(MutableMapping[str, str]):
    """os.environ while the imports run: which variables they read. Reading them all
    (iteration, copy) records "*": then any difference sends a command cold."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self.real[key]  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return key in self.real

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def __iter__(self) -> Iterator[str]:
        self.read.add("*")
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        self.read.add("*")
        return dict(self.real)


def _import_everything() -> set[str]:
    real = os.environ
    recorder = _Recorder(real)
    os.environ = recorder  # type: ignore[assignment]  # noqa: B003 - swapped back below
    try:
        import anthropic  # noqa: F401

        import ruizn.cli.main
        import ruizn.effects.models.anthropic
        import ruizn.shell.agent
        import ruizn.shell.runner

        try:  # `ruizn eval`, with PyYAML (its extra) for YAML datasets
            import yaml  # noqa: F401

            import ruizn.cli.eval_cmd
            import ruizn.evals.api
            import ruizn.evals.rescore
        except ImportError:
            pass
        try:  # the fleet's commands, when its extra is installed
            import ruizn.fleet.batch
            import ruizn.fleet.worker  # noqa: F401
        except ImportError:
            pass
    finally:
        os.environ = real  # noqa: B003 - the real mapping, as it was
    return recorder.read


def _entries(env: dict[str, str]) -> list[str]:
    """PYTHONPATH's folders, as the interpreter puts them on sys.path."""
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _shadow(folder: str) -> str | None:
    """A module or package in `folder` named like one already imported from elsewhere:
    ahead of site-packages, a fresh interpreter would import the folder's instead."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return None
    for entry in entries:
        found = os.path.join(folder, entry)
        if entry.endswith(".py"):
            name = entry[:-3]
        elif os.path.isdir(found):
            name = entry
        else:
            continue
        module = sys.modules.get(name)
        if module is None:
            continue
        origin = os.path.abspath(getattr(module, "__file__", None) or "")
        if origin != found and not origin.startswith(os.path.join(found, "")):
            return found
    return None


def _why_cold(env: dict[str, str], read: set[str]) -> str | None:
    mine = dict(os.environ)
    for key in set(env) | set(mine):
        if key == "PYTHONPATH":
            continue  # its folders are checked below
        matters = key.startswith(STARTUP) or key in read or "*" in read
        if matters and env.get(key) != mine.get(key):
            return f"{key} differs"
    for folder in _entries(env):
        shadow = _shadow(folder)
        if shadow is not None:
            return f"PYTHONPATH holds {shadow}, imported from elsewhere"
    return None


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _command(conn: socket.socket, read: set[str], path: list[str]) -> int:
    """In the forked child of one connection: run the command in a grandchild, report."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(data)
    why = _why_cold(request["env"], read)
    if why is not None or len(fds) != 3:
        _send(conn, {"cold": why or "descriptors missing"})
        return 0
    pid = os.fork()
    if pid == 0:
        conn.close()
        _become(request, fds, path)  # never returns: the command ends with SystemExit
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    _, status = os.waitpid(pid, 0)
    _send(conn, {"code": os.waitstatus_to_exitcode(status)})
    return 0


def _become(request: dict[str, Any], fds: list[int], path: list[str]) -> None:
    """Be `python -m ruizn ARGV` in this process: its descriptors, folder, environment,
    signal handlers and sys.path, then ruizn/__main__.py run as `__main__` (it ends by
    raising SystemExit, which ends this process as it ends a fresh one)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # As `-m` has it: the folder, PYTHONPATH, the rest; __main__.py moves the folder last.
    sys.path[:] = [os.getcwd(), *_entries(request["env"]), *path]
    sys.argv = ["-m", *request["argv"]]
    runpy.run_module("ruizn", run_name="__main__", alter_sys=True)
    sys.exit(0)


def serve(socket_path: str) -> int:
    # Neither this script's folder nor this process's PYTHONPATH: a command brings its own.
    own = set(_entries(dict(os.environ)))
    path = [p for p in sys.path[1:] if p not in own]
    read = _import_everything()
    # What the imports made is never collected in a child: its collector need not walk
    # (and so copy, page by page) the whole inherited heap. (The gc module's advice for
    # forking servers.)
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # each connection's child is reaped at once
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    sys.stdout.write(json.dumps({"ready": sorted(read)}) + "\n")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            return 0
        if listener in ready:
            conn, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                return _command(conn, read, path)
            conn.close()


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1]))
