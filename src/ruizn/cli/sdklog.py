"""The MCP SDK's own log lines, redacted and inert, from before the SDK is first imported.

The SDK logs with `logger.exception` (a server that writes non-JSON to stdout, a transport
that fails): unconfigured, Python prints those records and their tracebacks raw on stderr,
with whatever text they quote (a server's line, a header, a token). ruizn loads the SDK
lazily, inside a run or a fleet worker's thread, so the handler cannot wait for the SDK:
`install` puts it on the "mcp" and "client" loggers (the names the SDK logs under) when the
CLI starts. Each record becomes one line `ruizn: mcp: NAME: MESSAGE`, never a traceback,
with every secret ruizn knows replaced (`ruizn.redact`: the API key, *_TOKEN, *_KEY,
*_SECRET values, and the --mcp-header/--mcp-env values given), then made inert.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator

from ruizn.redact import Redactor
from ruizn.terminal import visible

SDK_LOGGERS = ("mcp", "client")
_LIMIT = 300


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _Redacting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.redactor = Redactor.from_env(os.environ)
        self.sink: Callable[[str], None] = _stderr

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            # The message only: exc_info (the traceback) is never formatted.
            text = " ".join(self.redactor.redact(record.getMessage()).split())
            if len(text) > _LIMIT:
                text = text[: _LIMIT - 3] + "..."
            self.sink("ruizn: " + visible(f"mcp: {record.name}: {text}"))


class _Installed:
    handler: _Redacting | None = None


def install(secrets: Iterable[str] = ()) -> _Redacting:
    """Route the SDK's log records through the redacting handler (idempotent); `secrets`
    are more values to redact (header and env values given on the command line)."""
    handler = _Installed.handler
    if handler is None:
        handler = _Installed.handler = _Redacting()
        for name in SDK_LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            logger.propagate = False
    extra = tuple(secrets)
    if extra:
        handler.redactor = Redactor(secrets=(*handler.redactor.secrets, *extra))
    return handler


@contextlib.contextmanager
def lines_to(sink: Callable[[str], None]) -> Iterator[None]:
    """While open, the SDK's lines go to `sink` (a live run's notices) instead of stderr."""
    handler = install()
    saved = handler.sink
    handler.sink = sink
    try:
        yield
    finally:
        handler.sink = saved
