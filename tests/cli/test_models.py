"""Current Claude over the real CLI and the fake API's Models API (#27): the default model, a
retired or unknown model, a deprecated one, adaptive thinking and effort, each checked
against the Models API before the first request, and what the requests carry.

SDK behaviour ruizn depends on here (tested over HTTP, on 2.16.0 and 2.17.0): `client.models
.retrieve(id)` and `client.models.list()` (auto-paging) parse the API's JSON into `ModelInfo`
with `lifecycle`, `retires_at`, `max_input_tokens`, `max_tokens` and `capabilities.thinking
.types` / `capabilities.effort`; a field an SDK lacks is read as "not said"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import RECORDINGS, cli_env, run_cli
from tests.fakeapi import FakeAnthropic, HttpError, Recording, Stream, Text, Thinking


def answer(body: dict[str, Any], index: int) -> Stream:
    return Stream((Text("ok"),))


def test_the_default_model_exists_and_thinks_adaptively_with_room_to_answer(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    result = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    body = server.requests[0].body
    assert body["model"] == "claude-sonnet-5-5"
    # Thinking counts against max_tokens: 32,000 leaves room for an answer (4,096 did not).
    assert body["max_tokens"] == 32_000
    # Adaptive, as the Models API says the model takes it; its text is not asked for.
    assert body["thinking"] == {"type": "adaptive", "display": "omitted"}
    assert "output_config" not in body  # no --effort: the model's own
    for knob in ("temperature", "top_p", "top_k"):
        assert knob not in body
    settings = result.events()[0]["settings"]
    assert settings["model"] == "claude-sonnet-5-5"
    assert settings["thinking"] == "adaptive"
    assert settings["context_window"] == 1_000_000
    assert server.model_gets == ["/v1/models/claude-sonnet-5-5"]


def test_a_retired_model_ends_before_any_request_listing_the_keys_models(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    result = run_cli(
        ["run", "--model", "claude-sonnet-4-5", "hi"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 2
    assert result.stderr.count("\n") == 1, result.stderr
    line = result.stderr.strip()
    assert line.startswith("ruizn: error: model retired on 2026-05-01: 'claude-sonnet-4-5';")
    # Closest first; the retired model itself is not offered.
    assert "this key can use: claude-sonnet-5-5, " in line
    assert line.count("claude-sonnet-4-5") == 1
    assert server.requests == []  # no Messages API request was sent
    assert result.new_logs == ()


def test_a_model_the_models_api_does_not_know_is_refused_before_any_request(
    workspace: Path, server_factory: Any
) -> None:
    # GET /v1/models/claude-sonet-5-5 is a 404: the run is refused with the key's models
    # (GET /v1/models), closest first, and no Messages request is sent.
    server = server_factory([Stream((Text("never sent"),))])
    result = run_cli(
        ["run", "--model", "claude-sonet-5-5", "hi"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "ruizn: error: model not found: 'claude-sonet-5-5'; this key can use: claude-sonnet-5-5,"
    )
    assert "claude-sonnet-4-5" not in error  # retired: not one the key can use
    assert server.requests == []
    assert any(path.startswith("/v1/models?") for path in server.model_gets)


def test_a_deprecated_model_warns_once_with_its_retirement_date(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    result = run_cli(
        ["run", "--model", "claude-opus-4-8", "hi"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "deprecated" in line]
    assert warnings == [
        "ruizn: warning: claude-opus-4-8 is deprecated and retires on 2027-05-01; choose"
        " another with --model (`ruizn models` lists them)"
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--model", "claude-sonnet-4-6", "--effort", "xhigh"],
            "claude-sonnet-4-6 does not support --effort xhigh (it takes: low, medium, high)",
        ),
        (
            ["--model", "claude-sonnet-4-6", "--max-tokens", "100000"],
            "--max-tokens 100,000 is more than claude-sonnet-4-6 can write (64,000 tokens)",
        ),
    ],
)
def test_a_choice_the_model_refuses_is_one_line_before_the_first_request(
    workspace: Path, server_factory: Any, args: list[str], says: str
) -> None:
    server = server_factory(answer)
    result = run_cli(["run", *args, "hi"], workspace=workspace, base_url=server.base_url)
    assert result.code == 2
    assert result.stderr == f"ruizn: error: {says}\n"
    assert server.requests == []


def test_thinking_off_and_effort_are_sent_as_the_api_expects_and_recorded(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    result = run_cli(
        ["run", "--thinking", "off", "--effort", "low", "hi"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    body = server.requests[0].body
    assert body["thinking"] == {"type": "disabled"}
    assert body["output_config"] == {"effort": "low"}
    settings = result.events()[0]["settings"]
    assert (settings["thinking"], settings["effort"]) == ("off", "low")
    shown = run_cli(["show", "last"], workspace=workspace)
    assert "model:     claude-sonnet-5-5 · thinking off · effort low\n" in shown.stdout


def test_show_thinking_asks_for_summaries_and_prints_them(
    workspace: Path, server_factory: Any
) -> None:
    reply = Stream((Thinking("Two short names will do.", "sig-Ab3="), Text("Pip and Gus.")))
    server = server_factory([reply])
    result = run_cli(
        ["run", "--show-thinking", "hi"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 0, result.stderr
    assert server.requests[0].body["thinking"] == {"type": "adaptive", "display": "summarized"}
    # Printed where it came: the thinking, then the text it preceded.
    assert result.stdout.startswith("[thinking] Two short names will do.\nPip and Gus.")
    replay = run_cli(["replay", "last"], workspace=workspace)
    assert replay.stdout == result.stdout  # the same transcript from the log
    shown = run_cli(["show", "last"], workspace=workspace)
    assert "model:     claude-sonnet-5-5 · thinking adaptive (shown)\n" in shown.stdout
    assert "thinking:  1 summarized · counted in out tokens and cost" in shown.stdout


def test_without_show_thinking_no_thinking_is_printed(workspace: Path, server_factory: Any) -> None:
    reply = Stream((Thinking("secret plan", "sig-Ab3="), Text("Done.")))
    server = server_factory([reply])
    result = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert "secret plan" not in result.stdout
    # The block is kept whole in the log (it goes back to the API byte for byte).
    blocks = next(e for e in result.events() if e["type"] == "llm_response")["content"]
    assert blocks[0] == {"type": "thinking", "thinking": "secret plan", "signature": "sig-Ab3="}


def test_max_tokens_spent_thinking_says_so(workspace: Path, server_factory: Any) -> None:
    cut = Stream(
        (Thinking("Let me consider every option in turn", "sig"),), stop_reason="max_tokens"
    )
    server = server_factory([cut])
    result = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert result.code == 1
    error = result.events()[-1]["error"]
    assert error.startswith("max_tokens (32000) ran out while the model was thinking")
    assert "--max-tokens" in error


def test_an_unknown_model_without_a_models_api_passes_through(workspace: Path) -> None:
    # A proxy without GET /v1/models: nothing is known, nothing is guessed or sent extra.
    server = FakeAnthropic(answer, models=None).start()
    try:
        result = run_cli(
            ["run", "--model", "claude-next", "hi"], workspace=workspace, base_url=server.base_url
        )
    finally:
        server.stop()
    assert result.code == 0, result.stderr
    body = server.requests[0].body
    assert "thinking" not in body
    assert "thinking" not in result.events()[0]["settings"]


@pytest.mark.skipif(not RECORDINGS.is_dir(), reason=f"{RECORDINGS} is not present")
def test_the_recorded_adaptive_thinking_reply_shows_its_thinking(
    workspace: Path, server_factory: Any
) -> None:
    # Recording 13: text "\n\n", a thinking block with its signature, then the answer.
    server = server_factory([Recording(RECORDINGS / "13_adaptive_thinking_opus46")])
    result = run_cli(
        ["run", "--model", "claude-opus-5-5", "--show-thinking", "Two names for a pelican"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert "[thinking] Brief answer with two pet" in result.stdout
    response = next(e for e in result.events() if e["type"] == "llm_response")
    thinking = [b for b in response["content"] if b["type"] == "thinking"]
    assert len(thinking) == 1
    assert thinking[0]["signature"]
    assert json.loads(json.dumps(response["usage"]))["output_tokens"] > 0


def test_models_lists_what_the_models_api_says_with_prices(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    result = run_cli(["models", "--json"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    rows = {row["id"]: row for row in json.loads(result.stdout)}
    sonnet = rows["claude-sonnet-5-5"]
    assert sonnet["name"] == "Claude Sonnet 5.5"
    assert (sonnet["lifecycle"], sonnet["context_window"], sonnet["max_output"]) == (
        "active",
        1_000_000,
        128_000,
    )
    assert sonnet["thinking"] == ["adaptive", "disabled"]
    assert sonnet["effort"] == ["low", "medium", "high", "xhigh", "max"]
    assert sonnet["structured_outputs"] is True
    # Prices from genai-prices 0.2.3 (never a table of ours).
    assert (sonnet["input_usd_per_mtok"], sonnet["output_usd_per_mtok"]) == (2.0, 10.0)
    assert rows["claude-opus-4-8"]["retires_at"] == "2027-05-01"
    table = run_cli(["models"], workspace=workspace, base_url=server.base_url)
    line = next(x for x in table.stdout.splitlines() if x.startswith("claude-opus-4-8 "))
    assert "deprecated (retires 2027-05-01)" in line
    assert "$" in line


def test_models_without_a_key_lists_only_the_current_claude_models_and_says_why(
    workspace: Path,
) -> None:
    env = cli_env(None)
    del env["ANTHROPIC_API_KEY"]
    result = run_cli(["models"], workspace=workspace, env=env)
    assert result.code == 0
    assert result.stderr == (
        "ruizn: ANTHROPIC_API_KEY is not set: the Models API was not asked; the current"
        " generation of Claude models genai-prices 0.2.3 knows (older and retired ones left"
        " out; only the Models API says which this key can use and which are deprecated):\n"
    )
    ids = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert "claude-sonnet-5-5" in ids
    assert "claude-opus-5-5" in ids
    for old in ("claude-2", "claude-v1", "claude-3-opus-latest", "claude-sonnet-4-5"):
        assert old not in ids


def test_models_with_no_network_says_so(workspace: Path) -> None:
    result = run_cli(["models"], workspace=workspace, base_url="http://127.0.0.1:9")
    assert result.code == 0
    assert result.stderr.startswith("ruizn: the Models API cannot be reached;")
    assert "claude-opus-5-5" in result.stdout


def test_a_models_api_that_pages_for_ever_ends_listing_and_run(workspace: Path) -> None:
    """`has_more` with the same cursor on every page: `ruizn models` lists the page once and
    says why it stopped; a run whose model the Models API does not know is refused with the list."""
    server = FakeAnthropic(
        [HttpError(404, "not_found_error", "model: claude-sonet-5-5")], endless_models="same"
    ).start()
    try:
        listed = run_cli(["models", "--json"], workspace=workspace, base_url=server.base_url)
        run = run_cli(
            ["run", "--model", "claude-sonet-5-5", "hi"],
            workspace=workspace,
            base_url=server.base_url,
        )
    finally:
        server.stop()
    assert listed.code == 0, listed.stderr
    ids = [row["id"] for row in json.loads(listed.stdout)]
    assert len(ids) == len(set(ids))
    assert "claude-sonnet-5-5" in ids
    assert listed.stderr == "ruizn: the Models API gave the same page twice: the listing stops\n"
    # The Models API does not know the model: refused before any request, with the list.
    assert run.code == 2
    assert run.stderr.startswith("ruizn: error: model not found: 'claude-sonet-5-5'; this key")
    assert server.requests == []
    # Two pages per listing (the second is the first again), two listings.
    assert sum(path.startswith("/v1/models?") for path in server.model_gets) == 4


def test_a_models_api_with_a_new_cursor_on_every_page_stops_at_the_page_cap(
    workspace: Path,
) -> None:
    server = FakeAnthropic(answer, endless_models="new").start()
    try:
        listed = run_cli(["models", "--json"], workspace=workspace, base_url=server.base_url)
    finally:
        server.stop()
    assert listed.code == 0, listed.stderr
    assert listed.stderr == "ruizn: the Models API has more than 20 pages: the listing stops\n"
    assert len(server.model_gets) == 20
    ids = [row["id"] for row in json.loads(listed.stdout)]
    assert len(ids) == len(set(ids))
