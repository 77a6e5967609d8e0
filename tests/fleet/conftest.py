"""Fleet fixtures: a scripted fake API keyed by goal, and a real Postgres server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import server_factory, workspace  # noqa: F401 (shared fixtures)
from tests.fakeapi import Reply, Stream, Text, ToolUse, free_port

PG_BIN = Path("/usr/lib/postgresql")


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


def _pg_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(PG_BIN.glob("*/bin/pg_ctl")) if PG_BIN.is_dir() else []
    return versions[-1].parent if versions else None


def _as_postgres() -> list[str]:
    # Postgres refuses to run as root: the server runs as the distribution's user.
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) are absent: apt-get install postgresql")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot start Postgres as another user")
    tmp = Path(tempfile.mkdtemp(prefix="ruizn-pg-"))
    data = tmp / "data"
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres")
    port = free_port()
    run = _as_postgres()
    subprocess.run(
        [
            *run,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "ruizn",
            "--auth=trust",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *run,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(tmp / "server.log"),
            "-o",
            f"-h 127.0.0.1 -p {port} -k {tmp} -c fsync=off",
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "ruizn", "fleet"],
            check=True,
            capture_output=True,
        )
        yield f"postgresql://ruizn@127.0.0.1:{port}/fleet"
    finally:
        subprocess.run(
            [*run, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
