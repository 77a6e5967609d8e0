"""Profile ruizn's tool loop with pyinstrument: where a step's client time goes.

    pip install pyinstrument            (or: pip install -e '.[bench]')
    python bench/profile_loop.py [--steps 200] [--interval 0.0005]

Starts bench/fake_server.py --bench-loop STEPS in its own process (so the server's time is
not in the profile) and runs the `ruizn` console script's entry point in this process,
exactly as `ruizn run --goal loop --max-steps STEPS+1 --system <bench prompt>` with
ANTHROPIC_BASE_URL pointing at the server. A 2-step run goes first, unprofiled: the imports
and first-call set-up it pays (seconds on a busy machine) are start-up, not a step.

It samples wall time: what a step is made of, waits included (fsync, the socket, the tool
thread, and the time the OS gives other processes: profile on a quiet machine). A CPU-time
clock (time.thread_time) was tried and dropped: it costs a system call per Python call and
event, which quadrupled the run and doubled the share of call-heavy code such as copy_tree.
Writes to bench/results/ (git-ignored): profile-STEPS.txt (three summaries in ms per model
call, then the call tree, library frames included), .html, and .pyisession
(`pyinstrument --load=FILE -r html` re-renders it).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from common import PY, SYSTEM_TEXT, Server, base_env  # noqa: E402  # after the path set-up

try:
    from pyinstrument import Profiler
    from pyinstrument.renderers import ConsoleRenderer, HTMLRenderer
except ImportError:  # pragma: no cover
    raise SystemExit("bench/profile_loop.py needs pyinstrument: pip install pyinstrument") from None


# Named costs, each the inclusive time of the outermost frames that match (a part of the
# file's path, a prefix of the bare function name): the suspects, measured.
HOTSPOTS = (
    ("SDK: deep-copy the request (_prepare.copy_tree)", "anthropic/_utils/_prepare", "copy_tree"),
    ("SDK: JSON-encode the request body (json.encoder)", "json/encoder", "encode"),
    ("SDK: build the stream helper's generic models", "pydantic/_internal/_generics", ""),
    ("SDK: accumulate the message from events", "anthropic/lib/streaming", "accumulate_event"),
    ("SDK: decode SSE lines", "anthropic/_streaming", "decode"),
    ("ruizn: build_request", "ruizn/request", "build_request"),
    ("ruizn: event writer (encode, write, fsync)", "ruizn/effects/runlog/writer", "__call__"),
    ("ruizn:   of which fsync", "<built-in>", "fsync"),
    ("ruizn: serde encode (all callers)", "ruizn/serde", "encode"),
    ("ruizn: reducers", "ruizn/reducers", ""),
    ("ruizn: printer", "ruizn/cli/printer", ""),
    ("ruizn: run a tool (invoke_tool)", "ruizn/effects/tools/base", "invoke_tool"),
    ("waiting in the event loop (epoll: the server, the tool thread)", "<built-in>", "epoll.poll"),
)


def _key(frame: Any) -> tuple[str, str]:
    return (frame.function, frame.file_path_short or "")


def _package(path: str) -> str:
    if path.startswith("<"):
        return path
    head = path.split("/", maxsplit=1)[0]
    return head.removesuffix(".py")


def summary(root: Any, calls: int) -> str:
    """Three tables in ms per model call: by package (own time; a built-in's time goes to the
    package that called it), the named costs, and the functions with the most own time."""
    own: dict[tuple[str, str], float] = {}
    by_package: dict[str, float] = {}
    named = dict.fromkeys((name for name, _, _ in HOTSPOTS), 0.0)

    def walk(frame: Any, package: str, active: frozenset[str]) -> None:
        if frame.identifier == "[self]":
            return
        path = frame.file_path_short or ""
        if not path.startswith("<"):
            package = _package(path)
        mine = frame.time - sum(c.time for c in frame.children if c.identifier != "[self]")
        own[_key(frame)] = own.get(_key(frame), 0.0) + mine
        by_package[package] = by_package.get(package, 0.0) + mine
        for name, part, prefix in HOTSPOTS:
            if name not in active and part in path and frame.function.startswith(prefix):
                named[name] += frame.time
                active |= {name}
        for child in frame.children:
            walk(child, package, active)

    walk(root, "", frozenset())
    total = root.time
    per = 1000 / calls

    def table(title: str, items: list[tuple[str, float]]) -> str:
        lines = [f"{title}", f"{'ms/call':>8} {'share':>6}  what"]
        lines += [f"{t * per:8.3f} {t / total:6.1%}  {what}" for what, t in items]
        return "\n".join(lines) + "\n"

    packages = sorted(by_package.items(), key=lambda kv: -kv[1])
    functions = sorted(own.items(), key=lambda kv: -kv[1])[:30]
    return (
        f"total {total * per:.3f} ms per model call ({calls} calls)\n\n"
        + table("== by package (own time) ==", packages)
        + "\n"
        + table("== named costs (inclusive) ==", list(named.items()))
        + "\n"
        + table("== functions by own time ==", [(f"{f}  {p}", t) for (f, p), t in functions])
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.0005, help="seconds per sample")
    args = parser.parse_args()
    env = base_env()
    if os.environ.get("PYTHONPYCACHEPREFIX") != env["PYTHONPYCACHEPREFIX"]:
        # As run.py's children: compiled bytecode whatever PYTHONDONTWRITEBYTECODE says, so
        # that no import compiles a module inside the profile.
        os.execve(PY, [PY, __file__, *sys.argv[1:]], env)
    results = BENCH / "results"
    results.mkdir(exist_ok=True)
    ws = Path(tempfile.mkdtemp(prefix="ruizn-profile-"))
    (ws / "README.md").write_text("# Bench\n\nA small file, read every step.\n")
    (entry,) = entry_points(group="console_scripts", name="ruizn")
    cli = entry.load()

    def run(steps: int, profiler: Profiler | None) -> object:
        sys.argv = ["ruizn", "run", "--goal", "loop", "--max-steps", str(steps)]
        sys.argv += ["--system", SYSTEM_TEXT, "--workspace", str(ws)]
        sys.argv += ["--log-dir", str(ws / "logs")]
        stdout, sys.stdout = sys.stdout, open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        code: object = 0
        if profiler is not None:
            profiler.start()
        try:
            cli()
        except SystemExit as exc:
            code = exc.code
        finally:
            if profiler is not None:
                profiler.stop()
            sys.stdout.close()
            sys.stdout = stdout
        return code

    with Server("--bench-loop", str(args.steps)) as server:
        os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-bench")
        os.environ["NO_COLOR"] = "1"
        warm = run(2, None)
        if warm != 3:  # max_steps reached, as a 2-step run of a longer loop must
            print(f"warm-up: ruizn exited {warm}", file=sys.stderr)
            return 1
        gc.collect()
        # Async mode off: the samples say what the main thread runs, whichever task it is.
        profiler = Profiler(interval=args.interval, async_mode="disabled")
        began = time.perf_counter()
        code = run(args.steps + 1, profiler)
        seconds = time.perf_counter() - began
    if code != 0:
        print(f"ruizn exited {code}", file=sys.stderr)
        return 1
    session = profiler.last_session
    assert session is not None
    stem = results / f"profile-{args.steps}"
    session.save(str(stem) + ".pyisession")
    tree = ConsoleRenderer(show_all=True, unicode=True, color=False, short_mode=True)
    root = session.root_frame()
    assert root is not None
    top = summary(root, args.steps + 1)
    header = (
        f"ruizn run, {args.steps} tool steps against bench/fake_server.py, profiled in-process"
        f" with pyinstrument (wall clock, interval {args.interval} s); {seconds:.2f} s"
        f" wall, {seconds / (args.steps + 1) * 1000:.1f} ms per model call, CPU"
        f" {session.cpu_time:.2f} s; load average {os.getloadavg()[0]:.1f}; Python {PY}\n\n"
    )
    text = header + top + "\n== call tree ==\n" + tree.render(session)
    Path(str(stem) + ".txt").write_text(text, encoding="utf-8")
    Path(str(stem) + ".html").write_text(HTMLRenderer().render(session), encoding="utf-8")
    print(header + top)
    print(f"written: {stem}.txt, .html, .pyisession")
    return 0


if __name__ == "__main__":
    sys.exit(main())
