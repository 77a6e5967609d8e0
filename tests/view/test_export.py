"""`ruizn export RUN --otlp URL` and `ruizn run --otlp URL`: the spans a real OTLP/HTTP
receiver gets (decoded with opentelemetry-proto), span by span, against the run's log.

The live export must never slow or break a run: with a closed port and with a collector
that accepts and never answers, the run's exit code, output and log are what they are
without --otlp.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import ruizn
from ruizn.spans import span_id, trace_id
from tests.cli.conftest import cli_env, normalise_log, normalise_stdout, read_events, run_cli
from tests.conftest import run_python
from tests.fakeapi import Stream, Text, ToolUse, Usage
from tests.view.demo import demo_run, demo_script, make_workspace
from tests.view.receiver import HangingPort, OtlpReceiver, attributes, closed_port_url

pytest.importorskip(
    "opentelemetry.proto",
    reason="the otel extra is missing: pip install -e '.[test]' in the checkout brings it",
)

CLIENT, INTERNAL = 3, 1  # opentelemetry.proto.trace.v1.Span.SpanKind
STATUS_ERROR = 2


def _ns(ts: float) -> int:
    return round(ts * 1e9)


def test_export_sends_every_span_of_the_run_with_the_logs_times_and_ids(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = make_workspace(tmp_path / "ws")
    run = demo_run(workspace, server_factory(demo_script()))
    events = read_events(run.log_path)
    run_id = events[0]["run_id"]
    with OtlpReceiver() as receiver:
        result = run_cli(["export", "last", "--otlp", receiver.url], workspace=workspace)
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    trace = trace_id(run_id)
    assert result.stdout == (
        f"sent 9 spans of run {run_id} to {receiver.url}/v1/traces (trace {trace:032x})\n"
    )
    assert set(receiver.paths) == {"/v1/traces"}
    assert set(receiver.content_types) == {"application/x-protobuf"}
    received = receiver.spans()
    resource, scope, _ = received[0]
    assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"] == "ruizn"
    assert scope.name == "ruizn"
    spans = {span.span_id: span for _, _, span in received}
    assert len(spans) == len(received) == 9
    for span in spans.values():
        assert int.from_bytes(span.trace_id, "big") == trace

    def by_seq(seq: int) -> Any:
        return spans[span_id(run_id, seq).to_bytes(8, "big")]

    started, finished = events[0], events[-1]
    root = by_seq(1)
    assert root.name == "invoke_agent ruizn"
    assert root.kind == INTERNAL
    assert root.parent_span_id == b""
    assert (root.start_time_unix_nano, root.end_time_unix_nano) == (
        _ns(started["ts"]),
        _ns(finished["ts"]),
    )
    root_attrs = attributes(root)
    assert root_attrs["gen_ai.operation.name"] == "invoke_agent"
    assert root_attrs["gen_ai.agent.name"] == "ruizn"
    assert root_attrs["gen_ai.conversation.id"] == run_id
    assert root_attrs["ruizn.run.status"] == "success"
    assert root_attrs["ruizn.run.steps"] == 3
    total = finished["usage"]
    assert root_attrs["gen_ai.usage.output_tokens"] == total["output_tokens"]
    assert root_attrs["gen_ai.usage.input_tokens"] == (
        total["input_tokens"]
        + total["cache_read_input_tokens"]
        + total["cache_creation_input_tokens"]
    )

    # span by span against the log: one chat span per attempt, one execute_tool per call
    ends = {e["id"]: e for e in events if e["type"] == "tool_call_finished"}
    replies = iter(e for e in events if e["type"] in ("llm_response", "llm_call_failed"))
    chat, tools = 0, 0
    for event in events:
        if event["type"] == "llm_call_started":
            chat += 1
            span, reply = by_seq(event["seq"]), next(replies)
            attrs = attributes(span)
            assert span.name == "chat claude-sonnet-5-5"
            assert span.kind == CLIENT
            assert span.parent_span_id == root.span_id
            assert span.start_time_unix_nano == _ns(event["ts"])
            assert span.end_time_unix_nano == _ns(reply["ts"])
            assert attrs["gen_ai.operation.name"] == "chat"
            assert attrs["gen_ai.provider.name"] == "anthropic"
            assert attrs["gen_ai.request.model"] == "claude-sonnet-5-5"
            assert attrs["ruizn.step"] == event["step"]
            assert attrs["ruizn.attempt"] == event["attempt"]
            if reply["type"] == "llm_call_failed":
                assert attrs["error.type"] == "overloaded_error"
                assert attrs["http.response.status_code"] == 529
                assert span.status.code == STATUS_ERROR
                assert "gen_ai.usage.input_tokens" not in attrs
                continue
            usage = reply["usage"]
            assert attrs["gen_ai.usage.output_tokens"] == usage["output_tokens"]
            assert attrs["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read_input_tokens"]
            assert (
                attrs["gen_ai.usage.cache_creation.input_tokens"]
                == usage["cache_creation_input_tokens"]
            )
            assert attrs["gen_ai.usage.input_tokens"] == (
                usage["input_tokens"]
                + usage["cache_read_input_tokens"]
                + usage["cache_creation_input_tokens"]
            )
            assert attrs["gen_ai.response.finish_reasons"] == (reply["stop_reason"],)
            assert span.status.code != STATUS_ERROR
        elif event["type"] == "tool_call_started":
            tools += 1
            span, end = by_seq(event["seq"]), ends.pop(event["id"])
            attrs = attributes(span)
            assert span.name == f"execute_tool {event['name']}"
            assert span.kind == INTERNAL
            assert span.parent_span_id == root.span_id
            assert (span.start_time_unix_nano, span.end_time_unix_nano) == (
                _ns(event["ts"]),
                _ns(end["ts"]),
            )
            assert attrs["gen_ai.tool.name"] == event["name"]
            assert attrs["gen_ai.tool.call.id"] == event["id"]
            if end["result"]["is_error"]:
                assert attrs["error.type"] == end["result"]["error_type"] == "not_found"
                assert span.status.code == STATUS_ERROR
            else:
                assert "error.type" not in attrs
    assert (chat, tools) == (4, 3)
    # the call the policy denied never started: its span is the answer, with the decision
    (denied,) = ends.values()
    span = by_seq(denied["seq"])
    attrs = attributes(span)
    assert span.name == "execute_tool write_file"
    assert attrs["error.type"] == "denied"
    assert attrs["ruizn.approval.approved"] is False
    assert attrs["ruizn.approval.by"] == "policy"
    # no content leaves the log: not the goal, not a tool's input or result
    everything = b"".join(r.SerializeToString() for r in receiver.requests)
    for secret in (b"What does the demo project do", b"BM25", b"README.md"):
        assert secret not in everything


def test_exporting_twice_sends_the_same_trace_and_the_env_names_the_collector(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = make_workspace(tmp_path / "ws")
    demo_run(workspace, server_factory(demo_script()))
    with OtlpReceiver() as first, OtlpReceiver() as second:
        one = run_cli(["export", "last", "--otlp", first.url + "/"], workspace=workspace)
        env = cli_env(None, OTEL_EXPORTER_OTLP_ENDPOINT=second.url)
        two = run_cli(["export", "last"], workspace=workspace, env=env)
    assert one.code == two.code == 0, (one.stderr, two.stderr)
    assert first.paths == second.paths == ["/v1/traces"]

    def spans(receiver: OtlpReceiver) -> list[bytes]:
        return [span.SerializeToString() for _, _, span in receiver.spans()]

    assert spans(first) == spans(second)
    assert len(spans(first)) == 9


def test_export_refuses_bad_input_in_one_line(tmp_path: Path, server_factory: Any) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = server_factory([Stream((Text("hi"),))])
    assert run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url).code == 0
    cases = {
        ("export", "last"): "no collector: give --otlp URL or set OTEL_EXPORTER_OTLP_ENDPOINT",
        ("export", "last", "--otlp", "ftp://x"): "must be an http:// or https:// URL",
        ("export", "last", "--otlp", "http://h:99999"): "is not a URL",
        ("export", "nope", "--otlp", "http://127.0.0.1:4318"): "no run 'nope'",
    }
    for args, message in cases.items():
        result = run_cli(list(args), workspace=workspace)
        assert result.code == 2, (args, result.stderr)
        assert message in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stdout == ""
    # a collector that is not there: the export failed (1), in one line, naming it
    url = closed_port_url()
    down = run_cli(["export", "last", "--otlp", url], workspace=workspace)
    assert down.code == 1
    assert down.stdout == ""
    assert down.stderr.startswith(f"ruizn: error: the collector at {url}/v1/traces did not take")
    assert down.stderr.count("\n") == 1


def test_without_the_otel_extra_export_names_the_pip_command(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = server_factory([Stream((Text("hi"),))])
    assert run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url).code == 0
    # A regular package named opentelemetry, first on the path, hides the installed
    # namespace package: to ruizn the OpenTelemetry exporter is simply not installed.
    shadow = tmp_path / "shadow" / "opentelemetry"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    env = cli_env(None, PYTHONPATH=str(shadow.parent))
    for args in (
        ["export", "last", "--otlp", "http://127.0.0.1:4318"],
        ["run", "--otlp", "http://127.0.0.1:4318", "hi"],
    ):
        result = run_cli(args, workspace=workspace, env=env)
        assert result.code == 2, result.stderr
        assert result.stderr == (
            f"ruizn: error: OpenTelemetry export needs the otel extra: {_otel_command()}\n"
        )


def _otel_command() -> str:
    """What brings the otel extra to the ruizn these tests run: installed from this checkout
    (`pip install -e '.[test]'`, as the README sets up), it is that checkout's, with the
    extra, into the interpreter that runs ruizn."""
    checkout = Path(ruizn.__file__).resolve().parents[2]
    assert (checkout / "pyproject.toml").is_file(), "the tests run ruizn from its checkout"
    return f"{shlex.quote(sys.executable)} -m pip install -e {shlex.quote(f'{checkout}[otel]')}"


def _tool_script() -> Any:
    return [
        Stream(
            (Text("Reading."), ToolUse("toolu_live_1", "read_file", {"path": "README.md"})),
            stop_reason="tool_use",
            usage=Usage(input_tokens=100, output_tokens=10),
        ),
        Stream((Text("Done."),), usage=Usage(input_tokens=150, output_tokens=5)),
    ]


def test_a_live_export_sends_the_spans_export_would_send(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = make_workspace(tmp_path / "ws")
    with OtlpReceiver() as live:
        server = server_factory(_tool_script())
        run = run_cli(
            ["run", "--otlp", live.url, "read the README"],
            workspace=workspace,
            base_url=server.base_url,
        )
        assert run.code == 0, run.stderr
    assert "otlp" not in run.stderr
    with OtlpReceiver() as later:
        assert run_cli(["export", "last", "--otlp", later.url], workspace=workspace).code == 0

    def spans(receiver: OtlpReceiver) -> set[bytes]:
        return {span.SerializeToString() for _, _, span in receiver.spans()}

    assert len(spans(live)) == 4  # the run, two calls, one tool
    assert spans(live) == spans(later)


@pytest.mark.parametrize("collector", ["closed", "hanging"])
def test_a_collector_that_is_down_or_hangs_never_changes_the_run(
    tmp_path: Path, server_factory: Any, collector: str
) -> None:
    def one_run(name: str, *otlp: str) -> tuple[Any, float]:
        workspace = make_workspace(tmp_path / name)
        server = server_factory(_tool_script())
        began = time.monotonic()
        result = run_cli(
            ["run", *otlp, "read the README"], workspace=workspace, base_url=server.base_url
        )
        return result, time.monotonic() - began

    plain, _ = one_run("plain")
    if collector == "closed":
        url = closed_port_url()
        exported, took = one_run("exported", "--otlp", url)
        connections = None
    else:
        with HangingPort() as port:
            url = port.url
            exported, took = one_run("exported", "--otlp", url)
            connections = port.connections
    assert exported.code == plain.code == 0, exported.stderr
    assert normalise_stdout(exported.stdout) == normalise_stdout(plain.stdout)
    assert normalise_log(exported.log_path.read_text(), exported.workspace) == normalise_log(
        plain.log_path.read_text(), plain.workspace
    )
    # the loop was never held up: the run's own time is what a run takes, and the process
    # waited at most the 2 s flush for a collector that had not failed yet
    finished = read_events(exported.log_path)[-1]
    assert finished["type"] == "run_finished"
    assert finished["elapsed"] < 2.0
    assert took < 15
    if connections is not None:
        assert connections >= 1, "the exporter never tried the hanging collector"
    # one warning, with the command that sends the run again
    warning = [line for line in exported.stderr.splitlines() if "otlp" in line]
    run_id = exported.log_path.parent.name
    assert len(warning) == 1, exported.stderr
    assert warning[0].startswith("ruizn: warning: otlp: not every span of the run reached")
    assert warning[0].endswith(f"send the run again with: ruizn export {run_id} --otlp {url}")


def test_help_and_view_never_import_opentelemetry(tmp_path: Path, server_factory: Any) -> None:
    """`ruizn --help` (the bench's start-up figure) loads none of view's or export's
    modules, and `ruizn view` neither OpenTelemetry nor the SDK of the model."""

    def imported(args: list[str], cwd: Path) -> set[str]:
        proc = run_python("-X", "importtime", "-m", "ruizn", *args, cwd=cwd, check=True)
        assert "view" in proc.stdout
        return {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}

    on_help = imported(["--help"], tmp_path)
    assert "click" in on_help  # the import log was read
    for module in ("opentelemetry", "ruizn.view.page", "ruizn.view.timeline", "ruizn.spans"):
        assert module not in on_help
    assert "ruizn.effects.telemetry.otlp" not in on_help
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = server_factory([Stream((Text("hi"),))])
    assert run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url).code == 0
    on_view = imported(["view", "last"], workspace)
    assert "ruizn.view.page" in on_view
    assert not {m for m in on_view if m.split(".")[0] in ("opentelemetry", "anthropic", "anyio")}
