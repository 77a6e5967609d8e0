"""What a run's log would let ruizn do if it were obeyed: its grant.

A log is data, never authority. Before ruizn acts on a run it did not start on this machine
(or whose log changed since), the person is shown this and asked (`--trust`). Pure: the
grant is read from the settings the log carries (run_started, and what each run_resumed
changed) and the decisions its events would apply: calls approved and not run yet, tools
approved "always", and (for a rerun) every recorded approval the re-drive replays.
"""

from __future__ import annotations

import json

from attrs import frozen

from ruizn.defaults import ApprovalMode
from ruizn.settings import HookSpec, JsonObject, RunSettings
from ruizn.state import ExecutionContext
from ruizn.terminal import revealed_line
from ruizn.toolsource import SourceKind


@frozen(kw_only=True)
class Grant:
    workspace: str
    approval: ApprovalMode
    allow_secret_files: bool
    # Code the run would import: `--tool` specs and plug-ins (module or file, attribute).
    tool_modules: tuple[str, ...]
    # Programs it would start and servers it would reach: `NAME: COMMAND ARGS` or `NAME: URL`.
    mcp_servers: tuple[str, ...]
    # The shell it would offer (bash), and how confined: None when it offers none.
    shell: str | None = None
    # Its shell's loosening, asked about on its own (a resume withdraws it unless accepted):
    # bash commands unconfined (--sandbox off), the patterns that approve commands, and the
    # hosts commands may reach through the proxy (--shell-allow-domain).
    unconfined: bool = False
    allow_commands: tuple[str, ...] = ()
    allow_domains: tuple[str, ...] = ()
    # Commands its hooks would run: `EVENT [MATCHER]: COMMAND (from SOURCE)`.
    hooks: tuple[str, ...] = ()
    # Decisions the log would apply: calls it approved that have not run (`NAME ID: input`),
    # tools it approves "always", and approvals a rerun replays.
    preapproved: tuple[str, ...] = ()
    always_tools: tuple[str, ...] = ()
    replayed_approvals: tuple[str, ...] = ()
    # Subagents the model could start (each a run with the log's prompt for it, within the
    # run's own tools): `NAME (SOURCE): TOOLS`.
    agents: tuple[str, ...] = ()

    @property
    def approvals(self) -> int:
        """How many decisions of the log this grant would apply."""
        return len(self.preapproved) + len(self.always_tools) + len(self.replayed_approvals)

    def lines(self) -> tuple[str, ...]:
        """The grant for people, one fact a line (the caller makes them safe to print)."""
        approval = {
            "ask": "ask (a person decides each call that changes things)",
            "always": "always (every tool call is approved without asking)",
            "never": "never (every call that needs approval is denied)",
        }[self.approval]
        out = [f"workspace: {self.workspace}", f"approval: {approval}"]
        if self.allow_secret_files:
            out.append("secret files: the file tools may read .env, keys and tokens")
        out.extend(f"tool module: {ref}" for ref in self.tool_modules)
        out.extend(f"MCP server: {server}" for server in self.mcp_servers)
        if self.shell is not None:
            out.append(f"shell: {self.shell}")
        out.extend(f"hook: {hook}" for hook in self.hooks)
        out.extend(f"subagent: {agent}" for agent in self.agents)
        out.extend(f"approved by the log, not run yet: {call}" for call in self.preapproved)
        out.extend(f"approved always by the log: tool {name}" for name in self.always_tools)
        out.extend(f"approval the rerun replays: {call}" for call in self.replayed_approvals)
        return tuple(out)

    def summary(self) -> str:
        """The grant in one line (for a refusal where nobody can be asked), each fact with
        its invisible characters and line breaks escaped (terminal.revealed_line)."""
        return "; ".join(revealed_line(line) for line in self.lines())


def grant_of(
    settings: RunSettings,
    state: ExecutionContext | None = None,
    *,
    replayed: tuple[str, ...] = (),
) -> Grant:
    """What obeying the log would grant: its settings, and with `state` (the replayed run)
    the decisions it would apply; `replayed`: the approvals a rerun would replay."""
    modules = tuple(
        dict.fromkeys(
            [
                *(
                    f"{source.kind.value} {source.ref}"
                    for source in settings.tool_sources
                    if source.kind in (SourceKind.SPEC, SourceKind.PLUGIN)
                ),
                # A run not started yet (a queued fleet run) has its specs, no sources.
                *(
                    f"{SourceKind.SPEC.value} {spec}"
                    for spec in settings.tool_specs
                    if not settings.tool_sources
                ),
            ]
        )
    )
    return Grant(
        workspace=settings.workspace,
        approval=settings.approval,
        allow_secret_files=settings.allow_secret_files,
        tool_modules=modules,
        mcp_servers=tuple(_server(record) for record in settings.mcp_servers),
        shell=_shell(settings),
        unconfined=bool(settings.shell) and not settings.sandbox,
        allow_commands=settings.allow_commands if settings.shell else (),
        allow_domains=settings.shell_allow_domains if settings.shell else (),
        hooks=tuple(hook_line(spec) for spec in settings.hooks),
        preapproved=_preapproved(state) if state is not None else (),
        always_tools=tuple(state.always_approved) if state is not None else (),
        replayed_approvals=replayed,
        agents=tuple(
            f"{d.name} ({d.source}): "
            + ("the run's tools" if d.tools is None else ", ".join(d.tools) or "no tools")
            for d in settings.subagents
        ),
    )


def hook_line(spec: HookSpec) -> str:
    """A hook for people: `EVENT [MATCHER]: COMMAND (from SOURCE) (passed secrets: NAMES)`
    (the caller shows each field escaped, as one line: terminal.revealed_line)."""
    matcher = "" if spec.matcher in ("", "*") else f" [{spec.matcher}]"
    source = f" (from {spec.source})" if spec.source else ""
    secrets = f" (passed secrets: {', '.join(spec.env)})" if spec.env else ""
    return f"{spec.event}{matcher}: {spec.command}{source}{secrets}"


def call_line(name: str, call_id: str, data: object) -> str:
    """A call for people: its tool, id and input (cut short)."""
    try:
        text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = "?"
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{name} {call_id}: {text}"


def _preapproved(state: ExecutionContext) -> tuple[str, ...]:
    return tuple(
        call_line(call.name, call.id, call.input)
        for call, result, approval in zip(
            state.turn_calls, state.turn_results, state.turn_approvals, strict=True
        )
        if result is None
        and approval is not None
        and approval.approved is True
        and call.id not in state.tools_in_flight
    )


def _shell(settings: RunSettings) -> str | None:
    if not settings.shell:
        return None
    if not settings.sandbox:
        text = "bash commands UNCONFINED (--sandbox off)"
    else:
        network = "with" if settings.shell_network else "without"
        text = f"bash commands in bubblewrap, {network} network"
        if settings.shell_allow_read:
            text += ", also reading " + ", ".join(settings.shell_allow_read)
        if settings.shell_allow_domains:
            text += ", except through a proxy to " + ", ".join(settings.shell_allow_domains)
    if settings.allow_commands:
        text += "; approved without asking: " + ", ".join(settings.allow_commands)
    return text


def _server(record: JsonObject) -> str:
    name = str(record.get("name", "?"))
    if record.get("transport") == "http":
        return f"{name}: {record.get('url', '')}"
    words = [str(record.get("command", "")), *(str(a) for a in record.get("args", ()))]
    return f"{name}: {' '.join(words)}"
