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
from ruizn.state import Status, TextBlock, ThinkingBlock, ToolResult, ToolUseBlock

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
        LlmResponse(seq=6, ts=0.0, content=(TextBlock(text="clean"),), stop_reason="end_turn"),
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


def test_the_models_own_text_and_tool_input_are_redacted_but_never_its_thinking() -> None:
    redactor = Redactor(secrets=(KEY,))
    reply = LlmResponse(
        seq=6,
        ts=0.0,
        content=(
            ThinkingBlock(thinking=f"the key is {KEY}", signature="sig"),
            TextBlock(text=f"Your key is {KEY}."),
            ToolUseBlock(id="t", name="bash", input={"command": f"echo {KEY}"}),
        ),
        stop_reason="tool_use",
    )
    scrubbed = redactor.redact_event(reply)
    assert isinstance(scrubbed, LlmResponse)
    thinking, text, call = scrubbed.content
    assert thinking is reply.content[0]  # goes back to the API byte for byte
    assert text == TextBlock(text=f"Your key is {REDACTED}.")
    assert isinstance(call, ToolUseBlock)
    assert call.input == {"command": f"echo {REDACTED}"}


def _streamed(redactor: Redactor, chunks: list[str]) -> str:
    shown, held = [], ""
    for chunk in chunks:
        now, held = redactor.stream_text(held, chunk)
        shown.append(now)
    return "".join(shown) + held


@given(st.text(max_size=40), st.text(max_size=40), st.lists(st.integers(0, 120), max_size=6))
def test_a_secret_split_across_streamed_deltas_is_redacted(
    before: str, after: str, cuts: list[int]
) -> None:
    redactor = Redactor(secrets=(KEY,))
    whole = before + KEY + after
    points = sorted({min(c, len(whole)) for c in cuts})
    chunks = [whole[a:b] for a, b in zip([0, *points], [*points, len(whole)], strict=True)]
    shown = _streamed(redactor, chunks)
    assert KEY not in shown
    assert shown == redactor.redact(whole)  # nothing lost, nothing added


def test_only_a_tail_that_could_begin_a_secret_is_held_back() -> None:
    redactor = Redactor(secrets=(KEY,))
    assert redactor.stream_text("", "plain text") == ("plain text", "")
    assert redactor.stream_text("", "the key: sk-ant") == ("the key: ", "sk-ant")
    assert redactor.stream_text("sk-ant", "-api03-abcdefghijklmnop!") == (f"{REDACTED}!", "")
    assert redactor.stream_text("sk-ant", "ic dreams") == ("sk-antic dream", "s")
