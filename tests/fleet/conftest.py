"""Fleet fixtures: a scripted fake API keyed by goal, a real Postgres server, and the CLI
and workers as subprocesses against both."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ruizn.fleet.database import EventStore
from tests.cli.approval_helpers import write
from tests.cli.conftest import cli_env, ruizn_command
from tests.fakeapi import Reply, Stream, Text, ToolUse
from tests.fleet.pg import NoPostgres, postgres_server
from tests.paths import REPO
from tests.warm_client import run_ruizn

# For the CLI and workers run as subprocesses: ruizn from this tree's src, whichever
# checkout an editable install points at, and the tests package (--tools-from) from its root.
SUBPROCESS_PATH = os.pathsep.join([str(REPO / "src"), str(REPO)])


def first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return str(content if isinstance(content, str) else content[0]["text"])


def note_loop(tool_turns: int = 2, token_delay: float = 0.0) -> Any:
    """Each run asks `tool_turns` times for the `note` tool (input: its goal and turn), then
    answers. Stateless, like tests.fakeapi.tool_loop, so retries and resumes get the reply
    their history calls for."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        goal = first_text(body)
        if turns < tool_turns:
            return Stream(
                (
                    Text("Noting it.", chunk=2),
                    ToolUse(f"toolu_{turns:04d}_note", "note", {"text": f"{goal} #{turns}"}),
                ),
                stop_reason="tool_use",
                token_delay=token_delay,
            )
        return Stream((Text("All noted.", chunk=2),), token_delay=token_delay)

    return reply


def requests_per_goal(requests: list[Any]) -> Counter[tuple[str, int]]:
    """(goal, assistant turns in the request) -> how many times the server got it."""
    seen: Counter[tuple[str, int]] = Counter()
    for request in requests:
        turns = sum(1 for m in request.body["messages"] if m["role"] == "assistant")
        seen[(first_text(request.body), turns)] += 1
    return seen


# What the model asks for in its first turn, by goal.
WRITES = {
    "approve": [write("toolu_w1", "approved.txt", "yes")],
    "deny": [write("toolu_d1", "d1.txt", "no"), write("toolu_d2", "d2.txt", "no")],
}


def writes_model(body: dict[str, Any], index: int) -> Reply:
    """Asks for the writes of WRITES[goal] in its first turn, then answers."""
    if any(m["role"] == "assistant" for m in body["messages"]):
        return Stream((Text("Done."),))
    return Stream((Text("Writing."), *WRITES[first_text(body)]), stop_reason="tool_use")


def log_of(db: str, run_id: str) -> list[dict[str, Any]]:
    """The events of `run_id` as the fleet's database holds them."""
    store = EventStore(db)
    try:
        return [json.loads(line) for line in store.lines(run_id)]
    finally:
        store.close()


def of_type(log: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in log if e["type"] == kind]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    try:
        with postgres_server() as url:
            yield url
    except NoPostgres as exc:
        # In CI (.ci/run installs Postgres) a missing server fails: a fleet test must never
        # pass unrun there.
        if os.environ.get("CI"):
            pytest.fail(f"{exc}; CI must run the Postgres tests (.ci/run)")
        pytest.skip(str(exc))


def wait_for(check: Any, timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def env(base_url: str | None, db: str) -> dict[str, str]:
    """The CLI's environment against the fake API, with RUIZN_DB set."""
    return cli_env(base_url, PYTHONPATH=SUBPROCESS_PATH, RUIZN_DB=db)


def ruizn(args: list[str], cwd: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One `ruizn` command to its end (a forked child of a warm ruizn, tests/warm_cli.py)."""
    return run_ruizn(args, cwd=cwd, env=environ, timeout=60)


@pytest.fixture
def fresh_db(postgres_url: str) -> Iterator[str]:
    """An empty database per test on the session's server."""
    name = f"t{os.getpid()}_{abs(hash(os.urandom(4))) % 10**8}"
    admin = sa.create_engine(
        postgres_url.replace("postgresql://", "postgresql+psycopg://"),
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    yield url
    admin.dispose()


def start_worker(
    name: str,
    folder: Path,
    environ: dict[str, str],
    concurrency: int = 2,
    tools: str = "tests.fleet.tools:make_tools",
) -> subprocess.Popen[str]:
    """`ruizn worker` in `folder`, its logs under logs/NAME, with the `note` tool (or the
    tools of `tools`, a --tools-from)."""
    return subprocess.Popen(
        [
            *ruizn_command(),
            "worker",
            "--id",
            name,
            "--concurrency",
            str(concurrency),
            "--dead-after",
            "3",
            "--log-dir",
            str(folder / "logs" / name),
            "--tools-from",
            tools,
        ],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_workers(workers: Iterable[subprocess.Popen[str]], timeout: float = 20) -> None:
    """SIGTERM to each worker still running (as an operator stops one), then wait for all."""
    procs = list(workers)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout)


def statuses(db: str) -> dict[str, tuple[str, str | None]]:
    """run id -> (status, worker) as `ruizn runs --db` shows them."""
    store = EventStore(db)
    try:
        return {row.run_id: (row.status, row.worker) for row in store.runs()}
    finally:
        store.close()


def batch_db(folder: Path) -> str:
    """The URL of the database `ruizn batch` keeps for `workspace` (in the user's state
    directory, never in the workspace)."""
    from ruizn.fleet.batch import database_of

    return f"sqlite:///{database_of(folder / '.ruizn' / 'runs', os.environ)}"
