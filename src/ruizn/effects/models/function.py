"""An in-process model: a function gets each request and returns the reply.

Like pydantic-ai's FunctionModel: users unit-test their tools and prompts without a server,
and ruizn's own laws drive the real runner with it. The function may return

- a `str`: a text answer that ends the turn (`end_turn`), streamed as one delta;
- a `ModelReply`: its text blocks are streamed as deltas, then the reply;
- an async iterator of `str` deltas and one final `ModelReply`, for full control
  (it may raise `ProviderError` part-way, as a broken stream does);

or an awaitable of the first two. Raising `ProviderError` is a failed model call.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Union

from ruizn.effects.models.provider import ModelReply
from ruizn.request import MessagesRequest
from ruizn.state import JsonObject, TextBlock, Usage

Reply = Union[str, ModelReply]  # noqa: UP007 - a runtime alias used in isinstance-free code
ReplyFunction = Callable[[JsonObject], Reply | Awaitable[Reply] | AsyncIterator[str | ModelReply]]


class FunctionModel:
    def __init__(self, function: ReplyFunction) -> None:
        self._function = function

    async def aclose(self) -> None:
        """Nothing to release: the model is a function in this process."""

    async def stream(self, request: MessagesRequest) -> AsyncIterator[str | ModelReply]:
        outcome = self._function(request.to_json())
        if isinstance(outcome, AsyncIterator):
            async for item in outcome:
                yield item
            return
        if inspect.isawaitable(outcome):
            outcome = await outcome
        reply = outcome if isinstance(outcome, ModelReply) else text_reply(outcome)
        for block in reply.content:
            if isinstance(block, TextBlock) and block.text:
                yield block.text
        yield reply


def text_reply(text: str, *, stop_reason: str = "end_turn") -> ModelReply:
    return ModelReply(content=(TextBlock(text=text),), stop_reason=stop_reason, usage=Usage())
