"""Which MCP servers a run uses: settings records, the CLI syntax, and how a run records them.

This module does not import the `mcp` SDK (a second of start-up): a CLI that only parses its
options, or a library user who only builds an `MCPServer`, does not pay for it. The servers
are started by `ruizn.effects.mcp.toolset.McpToolset`.

Secrets: header values, the values of `env`, a command word `NAME=VALUE` whose NAME looks
secret (`GH_TOKEN=...`, see `ruizn.redact.secret_name`), and a URL's query values,
user:password and fragment are never recorded, shown or repr'd. A run records header and
`env` names, such a word as `NAME=***`, and the URL with those parts as `***`
(`ruizn.redact.redact_url`); resume takes the values again from the CLI or the environment:
`RUIZN_MCP_HEADER_<SERVER>_<HEADER>` for a header, `RUIZN_MCP_ENV_<SERVER>_<NAME>` or the
variable of the same name for `env` and for such a word, and `RUIZN_MCP_URL_<SERVER>` for the
whole URL.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal
from urllib.parse import urlsplit

from attrs import field, frozen

from ruizn.redact import redact_url, secret_name, url_secrets
from ruizn.state import JsonObject

# The server name becomes part of every tool name (`mcp__NAME__TOOL`), which the API limits to
# [a-zA-Z0-9_-]{1,64}. "__" is refused so a tool name splits back into server and tool.
_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
# An HTTP header name is an RFC 9110 token.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A command word that sets a variable (`env GH_TOKEN=... cmd`, `-e API_KEY=...`).
_ASSIGNMENT = re.compile(r"(?:--?[A-Za-z][A-Za-z-]*=)?([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
HIDDEN = "***"

Pairs = tuple[tuple[str, str], ...]


class McpConfigError(ValueError):
    """A bad MCP server setting; the message is one line naming the server or option."""


def _pairs(value: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> Pairs:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), str(v)) for k, v in items)


def _names_only(pairs: Pairs) -> str:
    # repr() of a setting must never show a token; the names are enough to debug with.
    return "{" + ", ".join(f"{k!r}: '***'" for k, _ in pairs) + "}"


def _secret_word(word: str) -> tuple[str, str] | None:
    """(its head up to `=`, its value) of a command word that sets a secret-looking
    variable (`GH_TOKEN=ghp-...`, `--env=API_KEY=...`), or None."""
    found = _ASSIGNMENT.fullmatch(word)
    if found is None or not secret_name(found.group(1)):
        return None
    return word[: found.start(2)], found.group(2)


def hidden_args(args: Sequence[str]) -> tuple[str, ...]:
    """`args` as recorded and shown: each secret-looking `NAME=VALUE` word as `NAME=***`."""
    return tuple(
        word if (secret := _secret_word(word)) is None else secret[0] + HIDDEN for word in args
    )


@frozen(kw_only=True)
class MCPServer:
    """One MCP server: a command ruizn starts (stdio) or a URL it connects to (Streamable HTTP).

    Build it with `MCPServer.stdio(...)` or `MCPServer.http(...)`. `timeout` is the limit of
    each tool call on this server, in seconds (None: the run's tool timeout).
    """

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = field(default=(), repr=lambda args: repr(hidden_args(args)))
    env: Pairs = field(default=(), repr=_names_only)
    url: str = field(default="", repr=lambda url: repr(redact_url(url)))
    headers: Pairs = field(default=(), repr=_names_only)
    timeout: float | None = None

    def __attrs_post_init__(self) -> None:
        if not _SERVER_NAME.fullmatch(self.name) or "__" in self.name:
            raise McpConfigError(
                f"bad MCP server name {self.name!r}: use 1-32 letters, digits, '_' or '-',"
                " starting with a letter or digit, without '__'"
            )
        if self.timeout is not None and not self.timeout > 0:
            raise McpConfigError(f"MCP server {self.name}: timeout must be > 0, not {self.timeout}")
        if self.transport == "stdio":
            if not self.command.strip():
                raise McpConfigError(f"MCP server {self.name}: the command is empty")
            for key, _ in self.env:
                if not _ENV_NAME.fullmatch(key):
                    raise McpConfigError(f"MCP server {self.name}: bad environment name {key!r}")
        elif self.transport == "http":
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise McpConfigError(
                    f"MCP server {self.name}: {redact_url(self.url)!r} is not an http(s) URL"
                )
            for key, value in self.headers:
                if not _HEADER_NAME.fullmatch(key):
                    raise McpConfigError(f"MCP server {self.name}: bad header name {key!r}")
                if "\n" in value or "\r" in value:
                    raise McpConfigError(f"MCP server {self.name}: header {key} has a line break")
        else:
            raise McpConfigError(f"MCP server {self.name}: unknown transport {self.transport!r}")

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> MCPServer:
        """A server ruizn starts as `command args...` and talks to over its stdin/stdout.

        `env` is added to the small safe environment the SDK passes on (PATH, HOME, ...);
        nothing else of ruizn's environment (such as ANTHROPIC_API_KEY) reaches the server.
        """
        return cls(
            name=name,
            transport="stdio",
            command=command,
            args=tuple(args),
            env=_pairs(env),
            timeout=timeout,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> MCPServer:
        """A Streamable HTTP server at `url`; `headers` go with every request."""
        return cls(name=name, transport="http", url=url, headers=_pairs(headers), timeout=timeout)

    def describe(self) -> JsonObject:
        """What a run records (RunStarted): enough to reconnect, never a secret value."""
        record: JsonObject = {"name": self.name, "transport": self.transport}
        if self.transport == "stdio":
            record.update(
                command=self.command,
                args=list(hidden_args(self.args)),
                env=[k for k, _ in self.env],
            )
        else:
            record.update(url=redact_url(self.url), headers=[k for k, _ in self.headers])
        if self.timeout is not None:
            record["timeout"] = self.timeout
        return record

    def secret_values(self) -> tuple[str, ...]:
        """Every value this server's settings hide, for a redactor to scrub from what the
        server's stderr and errors show: header and `env` values, the URL's secret parts."""
        values = [v for _, v in self.headers] + [v for _, v in self.env]
        words = [secret[1] for word in self.args if (secret := _secret_word(word)) is not None]
        return (*values, *words, *url_secrets(self.url))

    @classmethod
    def from_record(
        cls,
        record: JsonObject,
        *,
        headers: Mapping[str, str] | None = None,
        url: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> MCPServer:
        """Rebuild a server from `describe()`'s record, to reconnect on resume.

        Header values come from `headers` (the CLI's `--mcp-header` given again), else from
        `RUIZN_MCP_HEADER_<SERVER>_<HEADER>`; `env` values from the variables of the same
        name. A URL recorded with hidden parts comes from `url`, else `RUIZN_MCP_URL_<SERVER>`,
        and must be the recorded one once its secrets are hidden again. A missing value is an
        error that says where to put it.
        """
        environ = os.environ if environ is None else environ
        given = dict(headers or {})
        try:
            name = str(record["name"])
            timeout = record.get("timeout")
            if record["transport"] == "stdio":
                env = {}
                for key in record.get("env", ()):
                    # `--mcp-env NAME:KEY`'s variable first, else the one of the same name.
                    value = environ.get(env_env_name(name, key), environ.get(key))
                    if value is None:
                        raise McpConfigError(
                            f"MCP server {name}: the run passed ${key} to it; set"
                            f" ${env_env_name(name, key)} (or {key}) to resume"
                        )
                    env[key] = value
                args = [_word_again(name, str(a), environ) for a in record.get("args", ())]
                return cls.stdio(name, str(record["command"]), args, env, timeout)
            if record["transport"] == "http":
                values = {}
                for key in record.get("headers", ()):
                    value = given.get(key, environ.get(header_env_name(name, key)))
                    if value is None:
                        raise McpConfigError(
                            f"MCP server {name}: header {key} needs its value again:"
                            f" --mcp-header {name}:{key}=VALUE or ${header_env_name(name, key)}"
                        )
                    values[key] = value
                real_url = _url_again(name, str(record["url"]), url, environ)
                return cls.http(name, real_url, values, timeout)
        except (KeyError, TypeError) as exc:
            raise McpConfigError(f"a recorded MCP server is incomplete: {exc}") from None
        raise McpConfigError(f"MCP server {name}: unknown transport {record['transport']!r}")


def _word_again(server: str, word: str, environ: Mapping[str, str]) -> str:
    """A recorded command word, with the value of a hidden `NAME=***` asked for again, as a
    header's is: from `RUIZN_MCP_ENV_<SERVER>_<NAME>`, else the variable NAME."""
    secret = _secret_word(word)
    if secret is None or secret[1] != HIDDEN:
        return word
    head = secret[0]
    key = _ASSIGNMENT.fullmatch(word).group(1)  # type: ignore[union-attr]  # matched above
    value = environ.get(env_env_name(server, key), environ.get(key))
    if value is None:
        raise McpConfigError(
            f"MCP server {server}: its command word {head}{HIDDEN} needs its value again:"
            f" set ${env_env_name(server, key)} (or {key}) to resume"
        )
    return head + value


def header_env_name(server: str, header: str) -> str:
    """`RUIZN_MCP_HEADER_<SERVER>_<HEADER>`, upper case, other characters as '_'."""
    return "RUIZN_MCP_HEADER_" + _env_part(f"{server}_{header}")


def env_env_name(server: str, key: str) -> str:
    """`RUIZN_MCP_ENV_<SERVER>_<KEY>`: where `--mcp-env SERVER:KEY` reads the value a stdio
    server gets as its environment variable KEY."""
    return "RUIZN_MCP_ENV_" + _env_part(f"{server}_{key}")


def url_env_name(server: str) -> str:
    """`RUIZN_MCP_URL_<SERVER>`, upper case, other characters as '_': a URL with a secret in
    it, kept out of `ps` and out of the log, given this way at the start and on resume."""
    return "RUIZN_MCP_URL_" + _env_part(server)


def _env_part(text: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", text.upper())


def _url_again(name: str, recorded: str, given: str | None, environ: Mapping[str, str]) -> str:
    """The URL to reconnect to: the recorded one, unless parts of it were hidden (`***`);
    then the URL given again, which must hide to exactly the recorded one (the same host,
    path and query names), so a value given for one server cannot send it elsewhere."""
    variable = url_env_name(name)
    if given is None:
        given = environ.get(variable)
    if given is None:
        if redact_url(recorded) == recorded and url_secrets(recorded):
            raise McpConfigError(
                f"MCP server {name}: its URL {recorded} had secret parts: give it again"
                f" as ${variable}"
            )
        # Nothing was hidden (or the log is from a ruizn that hid no query value).
        return recorded
    if redact_url(given) != redact_url(recorded):
        raise McpConfigError(
            f"MCP server {name}: the URL given again ({redact_url(given)}) is not the one the"
            f" run used ({redact_url(recorded)})"
        )
    return given


def parse_cli(
    specs: Sequence[str],
    header_specs: Sequence[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    env_specs: Sequence[str] = (),
) -> tuple[MCPServer, ...]:
    """`--mcp NAME='COMMAND ARGS...'` / `--mcp NAME=https://...` / `--mcp NAME` (the URL then
    from `RUIZN_MCP_URL_<NAME>`) and `--mcp-header NAME:KEY=VALUE` (or `NAME:KEY`, the value
    then from `RUIZN_MCP_HEADER_<NAME>_<KEY>`); `--mcp-env NAME:KEY`, the stdio server's
    variable KEY, its value from `RUIZN_MCP_ENV_<NAME>_<KEY>`. The environment keeps a token
    out of `ps`, and the run records only the names."""
    environ = os.environ if environ is None else environ
    parsed: dict[str, tuple[str, str | list[str]]] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        name = name.strip()
        if not sep and name and url_env_name(name) in environ:
            value = environ[url_env_name(name)]
            if not value.strip().startswith(("http://", "https://")):
                raise McpConfigError(f"--mcp {name}: ${url_env_name(name)} is not an http(s) URL")
        elif not sep or not name:
            raise McpConfigError(
                f"--mcp {spec!r}: expected NAME=COMMAND or NAME=URL"
                + (f" (or NAME alone, with the URL in ${url_env_name(name)})" if name else "")
            )
        if name in parsed:
            raise McpConfigError(f"--mcp: two servers are named {name!r}")
        value = value.strip()
        if value.startswith(("http://", "https://")):
            parsed[name] = ("http", value)
            continue
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise McpConfigError(f"--mcp {name}: cannot split the command: {exc}") from None
        if not words:
            raise McpConfigError(f"--mcp {name}: the command is empty")
        parsed[name] = ("stdio", words)
    headers: dict[str, dict[str, str]] = {}
    for spec in header_specs:
        server, colon, rest = spec.partition(":")
        key, eq, value = rest.partition("=")
        server, key = server.strip(), key.strip()
        if not colon or not server or not key:
            raise McpConfigError(f"--mcp-header {_shown_header(spec)!r}: expected NAME:KEY=VALUE")
        kind = parsed.get(server, ("", ""))[0]
        if kind != "http":
            what = "a stdio server" if kind == "stdio" else "not a --mcp server"
            raise McpConfigError(f"--mcp-header {server}:{key}: {server!r} is {what}")
        if not eq:
            env_name = header_env_name(server, key)
            if env_name not in environ:
                raise McpConfigError(f"--mcp-header {server}:{key}: ${env_name} is not set")
            value = environ[env_name]
        headers.setdefault(server, {})[key] = value
    envs: dict[str, dict[str, str]] = {}
    for spec in env_specs:
        server, colon, key = spec.partition(":")
        server, key = server.strip(), key.strip()
        if "=" in key:
            raise McpConfigError(
                f"--mcp-env {server}:{key.partition('=')[0]}: give NAME:KEY, with the value in"
                f" ${env_env_name(server, key.partition('=')[0])} (never on the command line)"
            )
        if not colon or not server or not key:
            raise McpConfigError(f"--mcp-env {spec.partition('=')[0]!r}: expected NAME:KEY")
        kind = parsed.get(server, ("", ""))[0]
        if kind != "stdio":
            what = "an HTTP server (use --mcp-header)" if kind == "http" else "not a --mcp server"
            raise McpConfigError(f"--mcp-env {server}:{key}: {server!r} is {what}")
        variable = env_env_name(server, key)
        if variable not in environ:
            raise McpConfigError(f"--mcp-env {server}:{key}: ${variable} is not set")
        envs.setdefault(server, {})[key] = environ[variable]
    servers = []
    for name, (kind, target) in parsed.items():
        if kind == "http":
            assert isinstance(target, str)
            servers.append(MCPServer.http(name, target, headers.get(name)))
        else:
            assert isinstance(target, list)
            servers.append(MCPServer.stdio(name, target[0], target[1:], envs.get(name)))
    return tuple(servers)


def servers_from_records(
    records: Sequence[JsonObject],
    header_specs: Sequence[str] = (),
    *,
    urls: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[MCPServer, ...]:
    """For resume: the recorded servers again, with header values from `--mcp-header
    NAME:KEY=VALUE` given to resume and each URL with secret parts from `urls` (NAME: URL),
    else from the environment (see `from_record`)."""
    names = {str(r.get("name")) for r in records}
    urls = dict(urls or {})
    for server in urls:
        if server not in names:
            raise McpConfigError(f"--mcp {server}: the run has no MCP server {server!r}")
    given: dict[str, dict[str, str]] = {}
    for spec in header_specs:
        server, colon, rest = spec.partition(":")
        key, eq, value = rest.partition("=")
        if not colon or not eq or not key.strip():
            raise McpConfigError(f"--mcp-header {_shown_header(spec)!r}: expected NAME:KEY=VALUE")
        if server.strip() not in names:
            raise McpConfigError(
                f"--mcp-header {server}:{key}: the run has no MCP server {server!r}"
            )
        given.setdefault(server.strip(), {})[key.strip()] = value
    return tuple(
        MCPServer.from_record(
            r,
            headers=given.get(str(r.get("name"))),
            url=urls.get(str(r.get("name"))),
            environ=environ,
        )
        for r in records
    )


def _shown_header(spec: str) -> str:
    # An error message must not echo the secret back: keep NAME:KEY, hide the value.
    head, eq, _ = spec.partition("=")
    return f"{head}=***" if eq else head
