"""The fleet takes every option `ruizn run` takes: given to `ruizn batch` (SQLite) or `ruizn
submit` (a real Postgres, a real worker), or in a goals-file line, each one reaches the run:
its `run_started` settings, and what the run does (the real CLI, the real SDK against the
fake API, real MCP servers over stdio and HTTP)."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOSClient

from ruizn.fleet.database import EventStore
from tests.cli.conftest import cli_env, run_cli
from tests.fakeapi import HttpError, Reply, Stream, Text, ToolUse
from tests.fleet.conftest import (
    SUBPROCESS_PATH,
    batch_db,
    env,
    first_text,
    of_type,
    ruizn,
    start_worker,
    statuses,
    wait_for,
)
from tests.mcp_servers import DEMO

pytestmark = pytest.mark.slow

DEMO_COMMAND = shlex.join([sys.executable, str(DEMO)])
ENV_TEXT = "DB_PASSWORD=hunter2\n"
# Named so the redactor leaves its value in the log (a $..._TOKEN value is scrubbed there),
# where the test reads what the server got.
HEADER = "X-Fleet-Site"
HEADER_ENV = "RUIZN_MCP_HEADER_WEB_X_FLEET_SITE"
# A variable a stdio server gets from the environment of whoever runs the run (not named
# *_TOKEN: the redactor would scrub such a value from the log, as it should).
TOKEN_ENV = "FLEET_SITE"
STALL = 5.0  # seconds a "slow" reply stays silent on its first attempt


def cli_options(web_url: str, header: str) -> list[str]:
    """Every run option, given on the command line (batch and submit take the same)."""
    return [
        "--model",
        "claude-sonnet-5-5",
        "--approval",
        "always",
        "--tool-concurrency",
        "1",
        "--allow-secret-files",
        "--max-retries",
        "2",
        "--read-timeout",
        "2",
        "--tool",
        "tests.fleet.tools:NapTool",
        "--mcp",
        f"demo={DEMO_COMMAND}",
        "--mcp",
        f"web={web_url}",
        "--mcp-header",
        header,
    ]


# Each line's goal says what the fake model does ("KIND ID"); the id names the run.
LINES: list[dict[str, Any]] = [
    {"id": "write-always"},
    {"id": "write-never", "approval": "never"},
    {"id": "write-ask", "approval": "ask"},
    {"id": "secret-allowed"},
    {"id": "secret-refused", "allow_secret_files": False},
    {"id": "naps-one"},
    {"id": "naps-two", "tool_concurrency": 2},
    {"id": "flaky-retried"},
    {"id": "flaky-once", "max_retries": 0},
    {"id": "slow-cut"},
    {"id": "slow-waited", "read_timeout": 30},
    {"id": "mcp-cli"},
    {"id": "mcp-web"},
    {
        "id": "mcp-line",
        "mcp_servers": [
            {
                "name": "other",
                "transport": "stdio",
                "command": sys.executable,
                "args": [str(DEMO)],
                "env": [TOKEN_ENV],
            }
        ],
    },
    {"id": "shout-line", "tool_specs": ["tests.fleet.tools:ShoutTool"]},
]

EXPECTED = {line["id"]: "success" for line in LINES} | {
    "write-ask": "awaiting_approval",
    "flaky-once": "error",
}


def write_goals(folder: Path) -> Path:
    path = folder / "goals.jsonl"
    lines = [{"goal": f"{line['id'].split('-')[0]} {line['id']}", **line} for line in LINES]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def tool_turn(*calls: ToolUse) -> Stream:
    return Stream((Text("On it.", chunk=3), *calls), stop_reason="tool_use")


def script() -> Any:
    """The fake model: one tool turn a goal, then "Done."; `flaky` fails its first two
    requests, `slow` stalls its first past the command line's read timeout."""
    first_calls: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(body: dict[str, Any], index: int) -> Reply:
        goal = first_text(body)
        kind, run_id = goal.split()
        if any(m["role"] == "assistant" for m in body["messages"]):
            return Stream((Text("Done.", chunk=3),))
        with lock:
            first_calls[goal] += 1
            attempt = first_calls[goal]
        match kind:
            case "write":
                return tool_turn(
                    ToolUse(
                        "toolu_write",
                        "write_file",
                        {"path": f"out/{run_id}.txt", "content": run_id},
                    )
                )
            case "secret":
                return tool_turn(ToolUse("toolu_secret", "read_file", {"path": ".env"}))
            case "naps":
                return tool_turn(
                    ToolUse("toolu_nap_a", "nap", {}), ToolUse("toolu_nap_b", "nap", {})
                )
            case "flaky" if attempt <= 2:
                return HttpError(500, "api_error", "the fake API fails twice")
            case "slow" if attempt == 1:
                return Stream(
                    (Text("Done after a pause.", chunk=3),), stall_after=3, stall_seconds=STALL
                )
            case "mcp":
                server, tool, arguments = {
                    "mcp-cli": ("demo", "echo", {"text": run_id}),
                    "mcp-web": ("web", "header", {"name": HEADER}),
                    "mcp-line": ("other", "getenv", {"name": TOKEN_ENV}),
                }[run_id]
                return tool_turn(ToolUse("toolu_mcp", f"mcp__{server}__{tool}", arguments))
            case "shout":
                return tool_turn(ToolUse("toolu_shout", "shout", {"text": run_id}))
        return Stream((Text("Done.", chunk=3),))

    return reply


def stored_events(db: str) -> dict[str, list[dict[str, Any]]]:
    store = EventStore(db)
    try:
        return {
            line["id"]: [json.loads(text) for text in store.lines(line["id"])] for line in LINES
        }
    finally:
        store.close()


def results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e["result"] for e in of_type(events, "tool_call_finished")}


def check_runs(
    runs: dict[str, list[dict[str, Any]]],
    workspace: Path,
    requests: list[Any],
    *,
    web_url: str,
    header_value: str,
    token: str,
) -> None:
    """What every option did to its run, whichever command ran it."""
    assert {run_id: events[-1]["status"] for run_id, events in runs.items()} == EXPECTED
    settings = {run_id: events[0]["settings"] for run_id, events in runs.items()}

    # The command line's options, in every run that no line overrode.
    given = settings["write-always"]
    assert (given["approval"], given["tool_concurrency"], given["allow_secret_files"]) == (
        "always",
        1,
        True,
    )
    assert (given["max_retries"], given["read_timeout"]) == (2, 2.0)
    assert given["tool_specs"] == ["tests.fleet.tools:NapTool"]
    assert [(s["name"], s["transport"]) for s in given["mcp_servers"]] == [
        ("demo", "stdio"),
        ("web", "http"),
    ]
    assert given["mcp_servers"][0]["args"] == [str(DEMO)]
    assert given["mcp_servers"][1] == {
        "name": "web",
        "transport": "http",
        "url": web_url,
        "headers": [HEADER],  # the name only: the value never reaches the settings
    }
    assert {t["name"] for t in given["tools"]} >= {"nap", "mcp__demo__echo", "mcp__web__header"}

    # --approval always: the write is approved by the policy and done.
    always = runs["write-always"]
    assert [(d["approved"], d["by"]) for d in of_type(always, "tool_approval_decided")] == [
        (True, "policy")
    ]
    assert (workspace / "out" / "write-always.txt").read_text() == "write-always"
    # "approval": "never" in the line: denied by the policy, the model told, nothing written.
    never = runs["write-never"]
    assert settings["write-never"]["approval"] == "never"
    assert [(d["approved"], d["by"]) for d in of_type(never, "tool_approval_decided")] == [
        (False, "policy")
    ]
    assert results(never)["toolu_write"]["error_type"] == "denied"
    assert not (workspace / "out" / "write-never.txt").exists()
    # "approval": "ask": nobody to ask on the fleet, so the run waits for a decision.
    ask = runs["write-ask"]
    assert settings["write-ask"]["approval"] == "ask"
    assert [e["id"] for e in of_type(ask, "tool_approval_requested")] == ["toolu_write"]
    assert not of_type(ask, "tool_approval_decided")
    assert not (workspace / "out" / "write-ask.txt").exists()

    # --allow-secret-files, and a line that turns it off again.
    assert results(runs["secret-allowed"])["toolu_secret"] == {
        "content": ENV_TEXT,
        "is_error": False,
        "error_type": None,
    }
    assert settings["secret-refused"]["allow_secret_files"] is False
    refused = results(runs["secret-refused"])["toolu_secret"]
    assert refused["is_error"]
    assert "hunter2" not in refused["content"]

    # --tool-concurrency 1: one nap after the other; the line's 2: both at once.
    def order(run_id: str) -> list[str]:
        return [
            e["type"].removeprefix("tool_call_")
            for e in runs[run_id]
            if e["type"] in ("tool_call_started", "tool_call_finished")
        ]

    assert order("naps-one") == ["started", "finished", "started", "finished"]
    assert settings["naps-two"]["tool_concurrency"] == 2
    assert order("naps-two") == ["started", "started", "finished", "finished"]
    assert results(runs["naps-two"])["toolu_nap_b"]["content"] == "rested"

    # --max-retries 2: two failures, then the answer; the line's 0: the first failure ends it.
    asked = Counter(first_text(r.body) for r in requests if len(r.body["messages"]) == 1)
    assert [e["will_retry"] for e in of_type(runs["flaky-retried"], "llm_call_failed")] == [
        True,
        True,
    ]
    assert asked["flaky flaky-retried"] == 3
    assert settings["flaky-once"]["max_retries"] == 0
    assert [e["will_retry"] for e in of_type(runs["flaky-once"], "llm_call_failed")] == [False]
    assert asked["flaky flaky-once"] == 1

    # --read-timeout 2: the stalled stream is cut and asked again; the line's 30 waits it out.
    cut = of_type(runs["slow-cut"], "llm_call_failed")
    kinds = [(e["error_type"], e["will_retry"]) for e in cut]
    # On a loaded machine the request asked again may pass 2 s too: each cut is asked again.
    assert kinds[0] == ("stream_timeout", True)
    assert all(retry for _, retry in kinds), kinds
    assert asked["slow slow-cut"] == len(cut) + 1
    assert settings["slow-waited"]["read_timeout"] == 30.0
    assert not of_type(runs["slow-waited"], "llm_call_failed")
    assert asked["slow slow-waited"] == 1

    # --mcp: the stdio server's tool and the HTTP server's, with the header's value from the
    # command line (batch) or the worker's environment (submit).
    assert results(runs["mcp-cli"])["toolu_mcp"]["content"] == "mcp-cli"
    # The server answered with exactly the header's value, which the log never holds: a
    # value given for a server is a secret ruizn knows (#28), so it reads "[redacted]"
    # ("(none)" had the header not arrived).
    assert results(runs["mcp-web"])["toolu_mcp"]["content"] == "[redacted]"
    assert header_value not in json.dumps(runs["mcp-web"])
    # A line's own server, whose $FLEET_SITE comes from the environment that runs it.
    line_servers = settings["mcp-line"]["mcp_servers"]
    assert [(s["name"], s["env"]) for s in line_servers] == [("other", [TOKEN_ENV])]
    # The server's env value arrived (its tool answers exactly it), and, a value given for a
    # server, it is redacted in the log like a header's.
    assert results(runs["mcp-line"])["toolu_mcp"]["content"] == "[redacted]"
    assert token not in json.dumps(runs["mcp-line"])
    # A line's own tool spec.
    assert settings["shout-line"]["tool_specs"] == ["tests.fleet.tools:ShoutTool"]
    assert results(runs["shout-line"])["toolu_shout"]["content"] == "SHOUT-LINE"

    # No secret value is in any run's settings.
    for events in runs.values():
        started = json.dumps(events[0])
        assert header_value not in started
        assert token not in started


def no_secret_in_queue(db: str, *secrets: str) -> None:
    """DBOS keeps every workflow's input: none holds a header's or env variable's value."""
    client = DBOSClient(system_database_url=db)
    try:
        inputs = json.dumps([w.input for w in client.list_workflows(load_output=False)])
    finally:
        client.destroy()
    assert "write-always" in inputs  # the inputs are there to be searched
    for secret in secrets:
        assert secret not in inputs


def test_batch_honours_every_run_option(
    workspace: Path, server_factory: Any, http_demo: str
) -> None:
    server = server_factory(script())
    (workspace / ".env").write_text(ENV_TEXT)
    goals = write_goals(workspace)
    header_value = value = "batch-header-9"
    token = "batch-site-7"
    proc = run_cli(
        [
            "batch",
            str(goals),
            "--concurrency",
            "4",
            *cli_options(http_demo, f"web:{HEADER}={value}"),
        ],
        workspace=workspace,
        env=cli_env(server.base_url, PYTHONPATH=SUBPROCESS_PATH, **{TOKEN_ENV: token}),
        timeout=180,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.code == 1, proc.stdout + proc.stderr  # flaky-once ends with error
    assert f"batch: {len(LINES)} runs: 1 awaiting_approval, 1 error, 13 success" in proc.stdout
    db = batch_db(workspace)
    check_runs(
        stored_events(db),
        workspace,
        server.requests,
        web_url=http_demo,
        header_value=header_value,
        token=token,
    )
    no_secret_in_queue(db, header_value, token)


def test_submit_and_worker_honour_every_run_option(
    fresh_db: str, workspace: Path, server_factory: Any, http_demo: str
) -> None:
    server = server_factory(script())
    (workspace / ".env").write_text(ENV_TEXT)
    goals = write_goals(workspace)
    header_value = "worker-header-9"
    token = "worker-site-7"
    environ = env(server.base_url, fresh_db)
    # A header's value is never stored in the database: submit takes its name only.
    valued = ruizn(
        ["submit", str(goals), *cli_options(http_demo, f"web:{HEADER}=oops")], workspace, environ
    )
    assert (valued.returncode, valued.stdout) == (2, "")
    assert valued.stderr == (
        f"ruizn: error: --mcp-header web:{HEADER}=***: submit never stores a header's value in"
        f" the fleet's database; give --mcp-header web:{HEADER} and set ${HEADER_ENV} on the"
        " workers\n"
    )
    # The submitting machine needs no value: only the workers do.
    submitted = ruizn(
        ["submit", str(goals), *cli_options(http_demo, f"web:{HEADER}")], workspace, environ
    )
    assert submitted.returncode == 0, submitted.stderr
    run_ids = submitted.stdout.split()
    assert run_ids == [line["id"] for line in LINES]
    worker = start_worker(
        "w1", workspace, {**environ, HEADER_ENV: header_value, TOKEN_ENV: token}, concurrency=4
    )
    try:
        wait_for(
            lambda: all(
                statuses(fresh_db).get(run_id, ("",))[0] == status
                for run_id, status in EXPECTED.items()
            ),
            120,
            "every run to end",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=20)
    assert "Traceback" not in err, err
    assert "[worker w1] write-ask awaiting_approval · 1 step" in out
    check_runs(
        stored_events(fresh_db),
        workspace,
        server.requests,
        web_url=http_demo,
        header_value=header_value,
        token=token,
    )
    no_secret_in_queue(fresh_db, header_value, token)
    listed = ruizn(["runs", "--db", fresh_db], workspace, environ)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("write-ask "))
    assert row.split()[1] == "awaiting_approval"
