"""`--shell-allow-domain` from the command line, in real bubblewrap: the run's commands reach
a listed host through the proxy, and the log records the allowlist. (The proxy itself, and
its failing self-test refusing the shell: tests/effects/tools/test_shell_proxy.py; a
resume of a log not started here withdrawing it: tests/test_trust_core.py.)"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ruizn.effects.runlog.reader import replay_file
from tests.cli.approval_helpers import of_type, turns_model
from tests.cli.conftest import run_cli
from tests.fakeapi import ToolUse

MARK = "the host's page"


class _Host(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(MARK)))
        self.end_headers()
        self.wfile.write(MARK.encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


def _results(log: Path) -> dict[str, str]:
    return {e["id"]: str(e["result"]) for e in of_type(log, "tool_call_finished")}


def test_the_runs_commands_reach_a_listed_host(workspace: Path, server_factory: Any) -> None:
    host = ThreadingHTTPServer(("127.0.0.1", 0), _Host)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    port = host.server_address[1]
    fetch = (
        "NO_PROXY= no_proxy= python3 -c 'import urllib.request as u;"
        f' print(u.urlopen("http://localhost:{port}/", timeout=5).read().decode())\''
    )
    server = server_factory(turns_model([[ToolUse("t1", "bash", {"command": fetch})]]))
    allow = ["--shell", "--shell-allow-domain", "localhost", "--approval", "always"]
    try:
        done = run_cli(["run", *allow, "go"], workspace=workspace, base_url=server.base_url)
    finally:
        host.shutdown()
        host.server_close()
    assert done.code == 0, done.stderr
    assert MARK in _results(done.log_path)["t1"]
    assert replay_file(done.log_path).state.settings.shell_allow_domains == ("localhost",)


def test_tools_shell_shows_the_allowlist_under_bash(workspace: Path) -> None:
    args = ["tools", "--shell", "--shell-allow-domain", "PyPI.org", "--shell-allow-domain"]
    listed = run_cli([*args, "*.github.com"], workspace=workspace)
    assert listed.code == 0, listed.stderr
    bash = listed.stdout.split("\nbash  (builtin)\n", 1)[1].split("\nbash_output", 1)[0]
    assert "  network: only through the run's proxy, to pypi.org, *.github.com" in bash
    bad = run_cli([*args, "not a domain"], workspace=workspace)
    assert bad.code == 2
    assert bad.stderr.startswith("ruizn: error: --shell-allow-domain: 'not a domain' is not")
