"""`Redactor`: the exact value of every secret ruizn was given is scrubbed from what it writes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ruizn.events import (
    LlmCallFailed,
    LlmResponse,
    LlmToken,
    RunFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.redact import REDACTED, Redactor, api_key_problem, secrets_from_env
from ruizn.state import Status, TextBlock, ToolResult

KEY = "sk-ant-api03-abcdefghijklmnop"
GH = "ghp_0123456789abcdef"


def test_each_secret_is_replaced_wherever_it_occurs() -> None:
    redactor = Redactor(secrets=(KEY, GH))
    text = f"Illegal header value b'Bearer {KEY}\\n' and {GH}{GH}"
    assert (
        redactor.redact(text)
        == f"Illegal header value b'Bearer {REDACTED}\\n' and {REDACTED}{REDACTED}"
    )


def test_clean_text_is_returned_as_the_same_object() -> None:
    text = "nothing to see here " * 10
    assert Redactor(secrets=(KEY,)).redact(text) is text


def test_short_values_are_not_secrets_and_the_longer_secret_wins() -> None:
    redactor = Redactor(secrets=("true", "1234567", KEY, KEY[:10]))
    assert redactor.secrets == (KEY, KEY[:10])
    assert (
        redactor.redact(f"true 1234567 {KEY} {KEY[:10]}") == f"true 1234567 {REDACTED} {REDACTED}"
    )
    assert not Redactor(secrets=("short",))


def test_the_secrets_come_from_the_key_and_every_api_key_or_token_variable() -> None:
    env = {
        "ANTHROPIC_API_KEY": KEY + "\r\n",  # stripped: the leak spells the CRLF as escapes
        "GITHUB_TOKEN": GH,
        "openai_api_key": "sk-openai-0123456789",
        "ANTHROPIC_AUTH_TOKEN": "tok-0123456789",
        "HOME": "/home/someone-long-enough",
        "TOKENIZER": "not-a-secret-variable",
        "SOME_TOKEN": "short",
    }
    assert set(secrets_from_env(env)) == {
        KEY,
        GH,
        "sk-openai-0123456789",
        "tok-0123456789",
    }


def test_a_key_with_surrounding_whitespace_is_refused_without_quoting_it() -> None:
    for bad in (KEY + "\n", KEY + "\r\n", " " + KEY, "\t"):
        problem = api_key_problem({"ANTHROPIC_API_KEY": bad})
        assert problem is not None
        assert KEY not in problem
        assert "ANTHROPIC_API_KEY" in problem
    assert api_key_problem({"ANTHROPIC_API_KEY": KEY}) is None
    assert api_key_problem({}) is None


def test_every_free_text_field_of_an_event_is_scrubbed() -> None:
    redactor = Redactor(secrets=(KEY,))
    leak = f"key={KEY}"
    cases = [
        (LlmToken(seq=2, ts=0.0, text=leak), lambda e: e.text),
        (LlmCallFailed(seq=2, ts=0.0, error_type="x", message=leak), lambda e: e.message),
        (
            RunFinished(seq=2, ts=0.0, status=Status.ERROR, steps=1, elapsed=0.0, error=leak),
            lambda e: e.error,
        ),
        (
            ToolCallFinished(seq=2, ts=0.0, id="t", result=ToolResult.ok(leak)),
            lambda e: e.result.content,
        ),
        (
            ToolCallStarted(
                seq=2, ts=0.0, id="t", name="w", input={"a": [1, {"b": leak}], leak: "x"}
            ),
            lambda e: repr(e.input),
        ),
    ]
    for event, text_of in cases:
        scrubbed = redactor.redact_event(event)  # type: ignore[arg-type]
        assert KEY not in text_of(scrubbed)
        assert REDACTED in text_of(scrubbed)
        assert type(scrubbed) is type(event)
        assert scrubbed.seq == event.seq


def test_a_clean_event_is_the_same_object_and_so_is_a_clean_tool_input() -> None:
    redactor = Redactor(secrets=(KEY,))
    tool_input = {"path": "README.md", "n": [1, 2, {"deep": "x"}]}
    events = [
        LlmToken(seq=2, ts=0.0, text="hello"),
        ToolCallStarted(seq=3, ts=0.0, id="t", name="r", input=tool_input),
        ToolCallFinished(seq=4, ts=0.0, id="t", result=ToolResult.ok("fine")),
        RunFinished(seq=5, ts=0.0, status=Status.SUCCESS, steps=1, elapsed=0.0),
        LlmResponse(
            seq=6, ts=0.0, content=(TextBlock(text=KEY),), stop_reason="end_turn"
        ),  # left as the API sent it (see redact_event)
    ]
    for event in events:
        assert redactor.redact_event(event) is event  # type: ignore[arg-type]
    assert Redactor().redact_event(LlmToken(seq=2, ts=0.0, text=KEY)).text == KEY  # type: ignore[union-attr]


@given(st.text(), st.text())
def test_no_secret_survives_around_any_text(before: str, after: str) -> None:
    redactor = Redactor(secrets=(KEY, GH))
    shown = redactor.redact(before + KEY + after + GH)
    assert KEY not in shown
    assert GH not in shown
