"""The model boundary: what a provider yields and how it fails.

A provider turns a request (built by the core) into a stream of text deltas followed by one
`ModelReply`. It never sees the state and never builds events; the runner does both, so a
provider is trivial to fake. SDK types never cross this line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from attrs import frozen

from ruizn.modelfacts import ModelFacts
from ruizn.request import MessagesRequest
from ruizn.settings import ConfigError
from ruizn.state import ContentBlock, Usage

if TYPE_CHECKING:
    from ruizn.recording import Divergence


@frozen(kw_only=True)
class ModelReply:
    content: tuple[ContentBlock, ...]
    stop_reason: str | None
    usage: Usage
    request_id: str | None = None
    # Content block types the reply held that ruizn does not keep (server tools such as
    # web_search): dropped from `content`, named here so the caller can say so.
    dropped_blocks: tuple[str, ...] = ()


class ProviderError(Exception):
    """A model call failed; the core decides whether and when to try again.

    `retryable`: the same request may succeed later (429, 5xx, 529, connection refused or
    reset, an `error` event mid-stream, a dropped or stalled stream, a malformed reply).
    `retry_after`: seconds the server asked us to wait (retry-after-ms / retry-after), if any.
    """

    def __init__(
        self,
        message: str,
        *,
        error_type: str,
        retryable: bool = False,
        status_code: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.retryable = retryable
        self.status_code = status_code
        self.request_id = request_id
        self.retry_after = retry_after


class ReplayDiverged(Exception):
    """A model that replays a recording (`ruizn.Cassette`) was sent a request the recording
    does not hold: the run has left it. Not a failed call (nothing would be retried): the
    runner finishes the run with status error and raises this to its caller.
    `divergence` says where (`ruizn.recording.Divergence`: the seq, the call, the
    tool, a diff)."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(f"the run left its recording at {divergence.where}: {divergence.what}")
        self.divergence = divergence


class ProviderConfigError(ConfigError):
    """The provider cannot be built as configured (no ANTHROPIC_API_KEY, a malformed
    ANTHROPIC_BASE_URL): a bad setting like any other (`ruizn.ConfigError`). The message is
    one line, fit to print as is."""


class Provider(Protocol):
    """A model behind the Messages API's shape. It lives as long as the runs it serves:
    whoever builds one (`ruizn.Agent`) closes it with `aclose` when they are done."""

    # The request is made of the state's own immutable records (request.plan_request), so a
    # provider may encode each message once; `request.to_json()` is the plain body.
    def stream(self, request: MessagesRequest) -> AsyncIterator[str | ModelReply]:
        """Yield each text delta as it arrives, then exactly one ModelReply."""
        ...

    async def aclose(self) -> None:
        """Release what the provider holds (an HTTP client's connections)."""
        ...


@runtime_checkable
class ModelCatalog(Protocol):
    """The Models API: what a model is and can take (a provider for a real API has one)."""

    async def describe(self, model: str) -> ModelFacts | None:
        """The model's facts; None: the API does not describe it (or cannot be asked)."""
        ...

    async def models(self) -> tuple[ModelFacts, ...]:
        """Every model the key can see, newest first; () if the API cannot be asked."""
        ...
