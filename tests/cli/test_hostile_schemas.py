"""Output schemas are data (ruizn/schemacheck.py): a planted log's schema, or the person's
own, with a remote `$ref`, a reference to itself, or a pattern that backtracks for ever,
makes no command fetch a URL, print a traceback or hang; the person's own is refused in one
line before any request."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ruizn.rules import schema_error
from tests.cli.conftest import run_cli
from tests.fakeapi import Stream, Text
from tests.paths import REPO

GOLDEN = REPO / "tests" / "golden" / "core" / "structured_output" / "events.jsonl"
# 40 a's and a '!': Python's `re` takes ~2^40 steps on it against ^(a+)+$.
EVIL_TEXT = "a" * 40 + "!"


class _Fetched(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = json.dumps({"type": "string"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A server a remote `$ref` would be fetched from, and the paths it was asked for."""
    seen: list[str] = []
    handler = type("Handler", (_Fetched,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def hostile(kind: str, host: str) -> dict[str, Any]:
    if kind == "remote":
        return {"type": "object", "properties": {"city": {"$ref": f"{host}/city.json"}}}
    if kind == "self":
        return {"anyOf": [{"$ref": "#"}]}
    return {"type": "object", "properties": {"city": {"type": "string", "pattern": "^(a+)+$"}}}


KINDS = ("remote", "self", "backtracking")


def plant(workspace: Path, schema: dict[str, Any]) -> None:
    """The golden structured run's first answer and check, its schema replaced, its answer
    the text that backtracks, its check as ruizn makes it, ended in error."""
    lines = [json.loads(line) for line in GOLDEN.read_text().splitlines()[:4]]
    lines[0]["settings"]["output_schema"] = schema
    answer = {"city": EVIL_TEXT, "population": 1}
    lines[2]["content"][0]["text"] = json.dumps(answer)
    lines[3]["error"] = schema_error(schema, answer)
    lines.append(
        {"v": 3, "type": "run_finished", "seq": 5, "ts": 1767229204.0, "status": "error"}
        | {"steps": 1, "elapsed": 1.0, "error": "stopped", "usage": lines[2]["usage"]}
    )
    log = workspace / ".ruizn" / "runs" / lines[0]["run_id"] / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_logs_schema_makes_no_command_fetch_crash_or_hang(
    workspace: Path, schema_host: tuple[str, list[str]], kind: str
) -> None:
    host, fetched = schema_host
    plant(workspace, hostile(kind, host))
    for command in (
        ["runs"],
        ["show", "last"],
        ["replay", "last"],
        ["view", "last"],
        ["export", "last", "--otlp", "http://127.0.0.1:9"],
    ):
        shown = run_cli(command, workspace=workspace, timeout=30)
        assert shown.code in (0, 1), (command, shown.stderr)
        assert "Traceback" not in shown.stderr, (command, shown.stderr)
        assert "internal error" not in shown.stderr, (command, shown.stderr)
        assert len(shown.stderr.splitlines()) <= 1, (command, shown.stderr)
    assert fetched == []


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("remote", "is remote: ruizn fetches no schema"),
        ("self", "it refers to itself without end"),
        ("lookaround", "is not RE2 syntax"),
    ],
)
def test_the_persons_hostile_schema_is_one_line_exit_2_before_any_request(
    workspace: Path, server_factory: Any, schema_host: tuple[str, list[str]], kind: str, said: str
) -> None:
    host, fetched = schema_host
    server = server_factory([Stream((Text("{}"),))])
    schema = (
        {"type": "string", "pattern": "^(?=a)a+$"} if kind == "lookaround" else hostile(kind, host)
    )
    path = workspace.parent / "schema.json"
    path.write_text(json.dumps(schema))
    done = run_cli(
        ["run", "--output-schema", str(path), "Lyon?"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert done.code == 2, done.stderr
    assert done.stderr.startswith(f"ruizn: error: --output-schema {path}: "), done.stderr
    assert said in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert server.requests == []
    assert fetched == []


def test_the_persons_backtracking_pattern_checks_an_answer_at_once(
    workspace: Path, server_factory: Any, schema_host: tuple[str, list[str]]
) -> None:
    host, _ = schema_host
    answer = json.dumps({"city": EVIL_TEXT})
    server = server_factory([Stream((Text(answer),))])
    path = workspace.parent / "schema.json"
    path.write_text(json.dumps(hostile("backtracking", host)))
    done = run_cli(
        ["run", "--output-retries", "0", "--output-schema", str(path), "Lyon?"],
        workspace=workspace,
        base_url=server.base_url,
        timeout=30,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert len(server.requests) == 1
    assert done.code != 0
    assert "does not match '^(a+)+$'" in done.stderr
