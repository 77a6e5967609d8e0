"""Where a run's tool came from, recorded so a resumed run can load the same tool again.

A pure record (no I/O here): it belongs in `RunStarted`, and the loader that turns it back
into a tool lives in `ruizn.effects.tools.loader`.
"""

from __future__ import annotations

import enum

from attrs import frozen


class SourceKind(enum.StrEnum):
    BUILTIN = "builtin"  # shipped with ruizn; `ref` is its name (read_file)
    SPEC = "spec"  # `--tool MODULE:ATTR`; `ref` is the spec (a file path made absolute)
    PLUGIN = "plugin"  # an entry point in the group `ruizn.tools`; `ref` is its name
    MCP = "mcp"  # a tool of an MCP server; `ref` is `SERVER/TOOL`, the server's own name


@frozen(kw_only=True)
class ToolSource:
    tool: str  # the tool's name, as the model calls it
    kind: SourceKind
    ref: str
    # What the tool said of itself when the run started. A resume decides from the log, not
    # from the tool, whether an interrupted call may run again (resuming.interrupted_calls).
    read_only: bool = False  # or it resumes what it started (BaseTool.resumes): runs again

    def describe(self) -> str:
        """One line for people: `builtin`, `spec tools.py:add`, `plugin weather`."""
        return self.kind.value if self.kind is SourceKind.BUILTIN else f"{self.kind} {self.ref}"
