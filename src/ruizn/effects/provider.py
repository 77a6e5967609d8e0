"""The model boundary: what a provider yields and how it fails.

A provider turns a request (built by the core) into a stream of text deltas followed by one
`ModelReply`. It never sees the state and never builds events; the runner does both, so a
provider is trivial to fake. SDK types never cross this line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from attrs import frozen

from ruizn.state import ContentBlock, JsonObject, Usage


@frozen(kw_only=True)
class ModelReply:
    content: tuple[ContentBlock, ...]
    stop_reason: str | None
    usage: Usage
    request_id: str | None = None


@frozen(kw_only=True)
class RetryNotice:
    """The SDK is about to send the same request again (it retries before a stream starts)."""

    attempt: int
    reason: str
    status_code: int | None = None
    request_id: str | None = None


class ProviderError(Exception):
    """A model call failed. The core's retry policy (decide.after_failure) decides, from
    `retryable` and `retry_after`, whether the runner tries the call again."""

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
        # Seconds the server asked us to wait (retry-after / retry-after-ms), if it did.
        self.retry_after = retry_after


class Provider(Protocol):
    def stream(self, request: JsonObject) -> AsyncIterator[str | ModelReply]:
        """Yield each text delta as it arrives, then exactly one ModelReply."""
        ...
