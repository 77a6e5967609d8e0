"""Secrets out of every text ruizn writes: the API key leaves the process only in its header.

The key can reach text by many roads: an HTTP client quoting the header it refused, a file a
tool read (`.env`, a config), an error that echoes a request. Rather than guard each road,
every event is passed through `Redactor.redact_event` once, where it is made, before it is
logged, shown or folded into the state (so before it can be sent back to the model either).

Only exact values are scrubbed: the configured ANTHROPIC_API_KEY and the value of every
`*_API_KEY` / `*_TOKEN` variable ruizn was started with. Values shorter than 8 characters
are ignored: scrubbing `1` or `true` would mangle ordinary text and protects nothing.

The normal path (no secret in the text) allocates nothing: `redact` returns the very string
it was given and `redact_event` the very event, so the token hot path stays a few substring
scans per delta. A secret split across streamed deltas is caught by `stream_text`, which
holds back only a tail that could begin a secret.

Pure: the environment comes in as a mapping.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from attrs import evolve, field, frozen

from ruizn.events import (
    Event,
    LlmCallFailed,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.state import ContentBlock, ResultBlock, TextBlock, ToolUseBlock

REDACTED = "[redacted]"
# What stands for a secret part of a URL: short, and legal where it stands (`?token=***`).
URL_MASK = "***"
MIN_SECRET_LENGTH = 8
API_KEY_VAR = "ANTHROPIC_API_KEY"
_SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD")


def _usable(secrets: Iterable[str]) -> tuple[str, ...]:
    # Longest first: when one secret contains another, the whole of the longer one goes.
    kept = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
    return tuple(sorted(kept, key=lambda s: (-len(s), s)))


@frozen(kw_only=True)
class Redactor:
    secrets: tuple[str, ...] = field(default=(), converter=_usable)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Redactor:
        return cls(secrets=secrets_from_env(env))

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def redact(self, text: str) -> str:
        """`text` with every secret replaced by `[redacted]`; `text` itself if none occurs."""
        for secret in self.secrets:
            if secret in text:
                break
        else:
            return text
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def stream_text(self, held: str, delta: str) -> tuple[str, str]:
        """A streamed delta, after the tail `held` back from the one before: (the text that
        may be shown and logged now, the tail to hold back). Secrets whole in the two are
        redacted; a tail that could be the start of a secret waits for the next delta (at
        most the longest secret less one character), so a secret split across deltas is
        redacted too. The caller shows what is still held when the stream ends."""
        text = held + delta if held else delta
        text = self.redact(text)
        keep = self._partial_tail(text)
        return (text[:-keep], text[-keep:]) if keep else (text, "")

    def _partial_tail(self, text: str) -> int:
        """The length of the longest end of `text` that begins a secret (and is shorter).
        Candidates are found by the secret's first two characters (one C-level scan, rare
        in prose), the one-character tail apart."""
        size = len(text)
        best = 0
        for secret in self.secrets:  # longest first
            head = secret[:2]
            i = text.find(head, max(0, size - len(secret) + 1))
            while i != -1 and size - i > best:
                if secret.startswith(text[i:]):
                    best = size - i
                    break
                i = text.find(head, i + 1)
            if not best and text[-1:] == secret[0]:
                best = 1
        return best

    def redact_event(self, event: Event) -> Event:
        """`event` with secrets scrubbed from its free-text fields; `event` itself if clean.

        The fields are those outside text can reach: a token, an error message, a tool's
        result and the string values of a tool's input, and the model's own text and tool
        inputs in its finished reply (`llm_response`; a model may repeat a key it read or
        was told). Its thinking is left as the API sent it: it must go back byte for byte.
        """
        if not self.secrets:
            return event
        if type(event) is LlmToken:  # the hot path: one per streamed delta, before `match`
            text = event.text
            new = self.redact(text)
            return event if new is text else evolve(event, text=new)
        match event:
            case LlmCallFailed(message=message):
                new = self.redact(message)
                return event if new is message else evolve(event, message=new)
            case LlmResponse(content=reply):
                said = [self._redact_reply_block(block) for block in reply]
                if all(map(operator.is_, said, reply)):
                    return event
                return evolve(event, content=tuple(said))
            case RunFinished(error=str() as error):
                new = self.redact(error)
                return event if new is error else evolve(event, error=new)
            case ToolCallFinished(result=result):
                content = result.content
                if isinstance(content, str):
                    new = self.redact(content)
                    if new is content:
                        return event
                    return evolve(event, result=evolve(result, content=new))
                # Text blocks only: an image's base64 is its bytes, and a "secret" found in
                # them by chance would corrupt the image, not protect a secret.
                blocks = [self._redact_block(block) for block in content]
                if all(map(operator.is_, blocks, content)):
                    return event
                return evolve(event, result=evolve(result, content=tuple(blocks)))
            case ToolCallStarted(input=tool_input):
                new_input = self._redact_json(tool_input)
                return event if new_input is tool_input else evolve(event, input=new_input)
            case RunStarted(goal=goal, settings=settings):
                # What a person typed: the goal, the system prompt, an MCP command's words.
                # Only the log's copy: the live run's state keeps what it was given.
                new_goal = self.redact(goal)
                system = self.redact(settings.system)
                servers = self._redact_json(list(settings.mcp_servers))
                if (
                    new_goal is goal
                    and system is settings.system
                    and all(map(operator.is_, servers, settings.mcp_servers))
                ):
                    return event
                return evolve(
                    event,
                    goal=new_goal,
                    settings=evolve(settings, system=system, mcp_servers=tuple(servers)),
                )
            case _:
                return event

    def _redact_reply_block(self, block: ContentBlock) -> ContentBlock:
        if isinstance(block, TextBlock):
            text = self.redact(block.text)
            return block if text is block.text else evolve(block, text=text)
        if isinstance(block, ToolUseBlock):
            tool_input = self._redact_json(block.input)
            return block if tool_input is block.input else evolve(block, input=tool_input)
        return block  # thinking goes back to the API byte for byte

    def _redact_block(self, block: ResultBlock) -> ResultBlock:
        if not isinstance(block, TextBlock):
            return block
        text = self.redact(block.text)
        return block if text is block.text else evolve(block, text=text)

    def _redact_json(self, value: Any) -> Any:
        """`value` (decoded JSON) with secrets scrubbed from its strings, keys included; the
        same object when nothing changed, so a clean input is never copied."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            items = [(self._redact_json(k), self._redact_json(v)) for k, v in value.items()]
            if all(
                nk is k and nv is v for (nk, nv), (k, v) in zip(items, value.items(), strict=True)
            ):
                return value
            return dict(items)
        if isinstance(value, list):
            values = [self._redact_json(v) for v in value]
            if all(nv is v for nv, v in zip(values, value, strict=True)):
                return value
            return values
        return value


def secret_name(name: str) -> bool:
    """Whether a variable named so holds a secret: `*_KEY`, `*_TOKEN`, `*_SECRET`,
    `*_PASSWORD` (any case), and ANTHROPIC_API_KEY."""
    return name == API_KEY_VAR or name.upper().endswith(_SECRET_SUFFIXES)


def secrets_from_env(env: Mapping[str, str]) -> tuple[str, ...]:
    """The values to scrub: ANTHROPIC_API_KEY and every `*_KEY` (`*_API_KEY` too),
    `*_TOKEN`, `*_SECRET` and `*_PASSWORD` variable.

    Values are stripped: a key read from a CRLF file is `sk-...\\r\\n`, and the text that
    leaks it (`Illegal header value b'Bearer sk-...\\r\\n'`) spells the whitespace as
    escapes, so it is the bare value that must be found.
    """
    found = []
    for name, value in env.items():
        if secret_name(name):
            found.append(value.strip())
    return _usable(found)


def api_key_problem(env: Mapping[str, str]) -> str | None:
    """Why the configured API key cannot be used as it is, or None. Never quotes the key."""
    key = env.get(API_KEY_VAR)
    if key is None or key == key.strip():
        return None
    return (
        f"{API_KEY_VAR} has whitespace at its start or end (a CR or LF from a CRLF file?):"
        " remove it and try again"
    )


def redact_url(url: str) -> str:
    """`url` as it may be recorded and shown: every query value, the user:password before the
    host, and the fragment become `***`; the scheme, host, port, path and query *names* stay.

    `https://u:p@host/mcp?token=abc&v=2#x` -> `https://***@host/mcp?token=***&v=***#***`.
    A query part without `=` is all value (`?abc123` -> `?***`). The path is kept: a secret
    in it cannot be told from a route, so secrets belong in the query, userinfo or headers.
    """
    parts = _split(url)
    if parts is None:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{URL_MASK}@{netloc.rpartition('@')[2]}"
    query = "&".join(_mask_query_part(part) for part in parts.query.split("&"))
    fragment = URL_MASK if parts.fragment else ""
    return urlunsplit(parts._replace(netloc=netloc, query=query, fragment=fragment))


def url_secrets(url: str) -> tuple[str, ...]:
    """The parts of `url` that `redact_url` hides, as written and percent-decoded, for a
    `Redactor` to find wherever else they turn up (a library quoting the URL it failed on)."""
    parts = _split(url)
    if parts is None:
        return ()
    found: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        found += [userinfo, *userinfo.split(":", 1)]
    for part in parts.query.split("&"):
        name, eq, value = part.partition("=")
        found.append(value if eq else name)
    found.append(parts.fragment)
    return tuple(dict.fromkeys(s for raw in found if raw for s in (raw, unquote(raw))))


def _split(url: str) -> SplitResult | None:
    try:
        return urlsplit(url)
    except ValueError:
        return None


def _mask_query_part(part: str) -> str:
    name, eq, value = part.partition("=")
    if not eq:
        return URL_MASK if name else ""
    return f"{name}={URL_MASK}" if value else f"{name}="
