"""Hostile replies through the real CLI: each ends as a named outcome and a replayable log.

A malformed reply is a failed model call (`llm_call_failed`, error_type invalid_response,
retried); it never becomes an `llm_response` line the log reader would later refuse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import API_KEY, Result, cli_env, run_cli
from tests.fakeapi import Raw, Stream, Text
from tests.fakeapi import Usage as WireUsage
from tests.fakeapi.sse import encode, stream_events

OK = Stream((Text("Recovered answer."),))


def _events() -> list[tuple[str, Any]]:
    reply = Stream((Text("poisoned"),))
    return [(n, d) for n, d, _ in stream_events(reply, WireUsage(10, 5), "msg_h")]


def _body(events: list[tuple[str, Any]]) -> bytes:
    return b"".join(d if isinstance(d, bytes) else encode(n, d) for n, d in events)


def _hostile(shape: str) -> Raw:
    events = _events()
    match shape:
        case "float usage":
            events[0][1]["message"]["usage"]["input_tokens"] = 1.5
        case "negative usage":
            events[-2][1]["usage"]["output_tokens"] = -4
        case "huge usage":
            events[-2][1]["usage"]["output_tokens"] = 10**30
        case "text not a string":
            delta = next(d for n, d in events if n == "content_block_delta")
            delta["delta"]["text"] = {"evil": True}
        case "only pings":
            events = [("ping", {"type": "ping"})] * 3
        case "invalid utf-8":
            events.insert(2, ("", b'event: content_block_delta\ndata: {"t": "\xc3\x28"}\n\n'))
        case "html 200":
            return Raw(
                b"<html><body>Welcome to the captive portal</body></html>", content_type="text/html"
            )
    return Raw(_body(events))


def _replayable(result: Result) -> None:
    replay = run_cli(["replay", "--json", str(result.log_path)], workspace=result.workspace)
    assert replay.code == 0, replay.stderr
    assert json.loads(replay.stdout)["status"] == "success"


@pytest.mark.parametrize(
    "shape",
    [
        "float usage",
        "negative usage",
        "huge usage",
        "text not a string",
        "only pings",
        "invalid utf-8",
        "html 200",
    ],
)
def test_a_malformed_reply_is_retried_and_the_log_replays(
    shape: str, workspace: Path, server_factory: Any
) -> None:
    server = server_factory([_hostile(shape), OK])
    result = run_cli(["run", "--goal", "go"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    events = result.events()
    failed = [e for e in events if e["type"] == "llm_call_failed"]
    assert [(e["error_type"], e["will_retry"]) for e in failed] == [("invalid_response", True)]
    responses = [e for e in events if e["type"] == "llm_response"]
    assert [r["content"] for r in responses] == [[{"type": "text", "text": "Recovered answer."}]]
    _replayable(result)


def test_null_usage_in_message_delta_is_zero_not_a_crash(
    workspace: Path, server_factory: Any
) -> None:
    events = _events()
    events[-2][1]["usage"] = None
    server = server_factory([Raw(_body(events))])
    result = run_cli(["run", "--goal", "go"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    (response,) = [e for e in result.events() if e["type"] == "llm_response"]
    assert response["usage"]["output_tokens"] == 1  # message_start's count stands
    _replayable(result)


def test_a_redirect_names_the_status_and_the_base_url(workspace: Path, server_factory: Any) -> None:
    moved = Raw(
        b"", status=301, content_type="text/plain", headers={"location": "https://x.example/"}
    )
    server = server_factory([moved])
    result = run_cli(["run", "--goal", "go"], workspace=workspace, base_url=server.base_url)
    assert result.code == 1
    assert "HTTP 301 redirect to https://x.example/" in result.stdout + result.stderr
    assert "check ANTHROPIC_BASE_URL" in result.stdout + result.stderr
    assert "connection error" not in result.stdout + result.stderr
    assert len(server.requests) == 1


@pytest.mark.parametrize("url", ["ftp://example.com", "localhost:8080", "http://"])
def test_a_malformed_base_url_is_one_line(url: str, workspace: Path) -> None:
    result = run_cli(["run", "--goal", "go"], workspace=workspace, env=cli_env(url))
    assert result.code == 2
    assert result.stderr.strip().startswith("ruizn: error: invalid ANTHROPIC_BASE_URL")
    assert len(result.stderr.strip().splitlines()) == 1
    assert API_KEY not in result.stderr
