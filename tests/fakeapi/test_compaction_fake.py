"""The fake's compaction through the real SDK (`client.beta.messages`, 2.17's types): the
compaction request's answer, and the 400s a block sent back wrong gets."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.fakeapi import FakeAnthropic, Stream, Text
from tests.fakeapi.compaction import BETA, summarizing

HISTORY: list[Any] = [
    {"role": "user", "content": "read the readme"},
    {"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]},
    {"role": "user", "content": "thanks"},
]


@pytest.fixture
def client() -> Iterator[anthropic.Anthropic]:
    server = FakeAnthropic(summarizing(lambda body, index: Stream((Text("Sure."),)))).start()
    try:
        yield anthropic.Anthropic(api_key="sk-ant-test", base_url=server.base_url, max_retries=0)
    finally:
        server.stop()


def _compact(client: anthropic.Anthropic, model: str = "claude-sonnet-5-5") -> Any:
    return client.beta.messages.create(
        model=model,
        max_tokens=1024,
        messages=HISTORY,
        compaction={"type": "summarize", "instructions": "keep the file names"},
        betas=[BETA],
    )


def _send_back(client: anthropic.Anthropic, block: dict[str, Any], *, first: bool = True) -> Any:
    summary = {"role": "assistant", "content": [block]}
    after = {"role": "user", "content": "go on"}
    messages = [summary, after] if first else [*HISTORY, summary, after]
    return client.beta.messages.create(
        model="claude-sonnet-5-5", max_tokens=1024, messages=messages, betas=[BETA]
    )


def test_a_compaction_request_answers_one_signed_block_billed_in_iterations(
    client: anthropic.Anthropic,
) -> None:
    reply = _compact(client)
    assert reply.stop_reason == "compaction"
    (block,) = reply.content
    assert block.type == "compaction"
    assert block.signature
    assert block.content is not None
    assert "keep the file names" in block.content
    # The compaction's own tokens are not in the top-level usage.
    assert reply.usage.input_tokens == 0
    assert reply.usage.iterations is not None
    (iteration,) = reply.usage.iterations
    assert iteration.type == "compaction"
    assert iteration.input_tokens > 0
    # Sent back verbatim, first: accepted.
    assert _send_back(client, block.to_dict()).content[0].type == "text"


@pytest.mark.parametrize("change", ["tampered", "reordered", "re-typed", "unsigned"])
def test_a_block_not_sent_back_verbatim_first_is_a_400(
    client: anthropic.Anthropic, change: str
) -> None:
    block = _compact(client).content[0].to_dict()
    wrong = copy.deepcopy(block)
    if change == "tampered":
        wrong["content"] = wrong["content"] + " (and something the model never said)"
    elif change == "re-typed":
        wrong["type"] = "text"
        wrong["text"] = wrong.pop("content")
    elif change == "unsigned":
        del wrong["signature"]
    with pytest.raises(anthropic.BadRequestError):
        _send_back(client, wrong, first=change != "reordered")


def test_a_model_without_compaction_refuses_the_request_and_the_block(
    client: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="not supported"):
        _compact(client, model="claude-sonnet-4-6")
    block = _compact(client).content[0].to_dict()
    with pytest.raises(anthropic.BadRequestError, match="not supported"):
        client.beta.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=1024,
            messages=[{"role": "assistant", "content": [block]}, {"role": "user", "content": "go"}],
            betas=[BETA],
        )


def test_compaction_cannot_be_combined_with_context_management(
    client: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="context_management"):
        client.beta.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=1024,
            messages=HISTORY,
            compaction={"type": "summarize"},
            context_management={"edits": [{"type": "clear_thinking_20251015"}]},
            betas=[BETA],
        )
