"""`ruizn view`'s page: one self-contained HTML file (inline CSS and JS, no outside request).

The run reaches the page only as data: `page_data` turns a `ruizn.view.timeline.Timeline` into
plain JSON values, `render` embeds them in a `<script type="application/json">` with every
`<`, `>`, `&`, U+2028 and U+2029 escaped (so no text from the log can close the element or
open markup), and the page's script builds the view with `textContent` and never parses
log text as HTML. A Content-Security-Policy that admits only the page's own script (by its
hash) and no network is a second wall behind the first.

Texts are cut (`LIMITS`) so a run with huge tool results still makes a page a browser opens
at once; the page says how much of each it holds.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from attrs import frozen

from ruizn.checkpoints import checkpoint_line
from ruizn.media import image_line, images, text_of
from ruizn.state import ImageBlock, RedactedThinkingBlock, TextBlock, ThinkingBlock, Usage
from ruizn.terminal import visible
from ruizn.version import __version__
from ruizn.view.timeline import AgentRun, Attempt, Mark, Sitting, Step, Timeline, ToolRun

__all__ = ["LIMITS", "THUMBNAIL_TYPES", "page_data", "render", "script_json", "thumbnail"]

# Characters of each text the page holds (the log holds all of it).
LIMITS = {"text": 20_000, "goal": 20_000, "system": 20_000, "tool": 4_000, "thinking": 4_000}

# The images the page draws, by the bytes they must begin with: raster formats a browser
# decodes as pictures and nothing else. Never SVG (a document that may hold script), never
# a type the log merely claims: the declared type and the bytes must agree.
THUMBNAIL_TYPES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # and "WEBP" at offset 8, checked below
}
# An image larger than this (base64 characters) is named on the page, not drawn: a page of
# many screenshots must still open at once. The API's own limit is 5 MB an image.
THUMBNAIL_MAX = 2_000_000


def _text(value: str, kind: str) -> dict[str, Any]:
    """A text as the page holds it: `t` the shown part (control characters made visible),
    `n` the length of the whole in the log."""
    limit = LIMITS[kind]
    return {"t": visible(value[:limit]), "n": len(value)}


def _rel(ts: float | None, t0: float) -> float | None:
    return None if ts is None else round(ts - t0, 6)


def _usage(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {
        "in": usage.input_tokens,
        "out": usage.output_tokens,
        "cr": usage.cache_read_input_tokens,
        "cw": usage.cache_creation_input_tokens,
    }


def _attempt(a: Attempt, t0: float) -> dict[str, Any]:
    data: dict[str, Any] = {
        "a": a.attempt,
        "start": _rel(a.start, t0),
        "end": _rel(a.end, t0),
        "outcome": a.outcome,
        "ttft": None if a.first_token is None else round(a.first_token - a.start, 6),
        "usage": _usage(a.usage),
        "cost": a.cost,
        "stop": None if a.stop_reason is None else visible(a.stop_reason),
    }
    if a.outcome == "failed":
        data.update(
            etype=visible(a.error_type or "?"),
            message=_text(a.message or "", "tool"),
            code=a.status_code,
            retry=a.will_retry,
            retry_in=a.retry_in,
        )
    return data


def _child(child: AgentRun, t0: float, nested: _Nested) -> dict[str, Any]:
    """An `agent` call's child run: what the parent's log says of it, and (when its log was
    read, and it is not one of the runs it sits in) its own run, on the parent's clock."""
    inner = nested.runs.get(child.run_id)
    page = None
    if inner is not None and child.run_id not in nested.within:
        page = _page(inner, live=False, t0=t0, nested=nested.inside(child.run_id))
    return {
        "run": visible(child.run_id),
        "agent": visible(child.agent),
        "desc": visible(child.description),
        "status": child.status,
        "steps": child.steps,
        "cost": child.cost,
        "error": None if child.error is None else _text(child.error, "tool"),
        "page": page,
    }


@frozen(kw_only=True)
class _Nested:
    """The children's timelines by run id, and the runs a page being drawn sits in (a log
    that names its own ancestor as its child is drawn once, not forever)."""

    runs: Mapping[str, Timeline]
    within: frozenset[str] = frozenset()

    def inside(self, run_id: str) -> _Nested:
        return _Nested(runs=self.runs, within=self.within | {run_id})


def _tool(tool: ToolRun, t0: float, nested: _Nested) -> dict[str, Any]:
    call_input = json.dumps(tool.input, ensure_ascii=False, indent=2, default=str)
    data: dict[str, Any] = {
        "id": visible(tool.id),
        "name": visible(tool.name),
        "lane": tool.lane,
        "start": _rel(tool.start, t0),
        "end": _rel(tool.end, t0),
        "dur": tool.duration,
        "input": _text(call_input, "tool"),
        "result": None,
    }
    if tool.child is not None:
        data["child"] = _child(tool.child, t0, nested)
    command = tool.input.get("command") if tool.name == "bash" else None
    if isinstance(command, str):  # the shell's command is shown as such, its output folded
        data["cmd"] = _text(command, "tool")
    if tool.result is not None:
        # An image is one line, as the transcript shows it; the page never holds its bytes.
        content = tool.result.content
        lines = [text_of(content), *(f"[image: {image_line(i)}]" for i in images(content))]
        data["result"] = _text("\n".join(line for line in lines if line), "tool")
        shown = [thumbnail(image) for image in images(content)]
        data["images"] = [one for one in shown if one is not None]
        data["err"] = tool.result.is_error
        data["etype"] = None if tool.result.error_type is None else visible(tool.result.error_type)
    if tool.approval is not None:
        approval = tool.approval
        data["approval"] = {
            "req": _rel(approval.requested, t0),
            "dec": _rel(approval.decided, t0),
            "ok": approval.approved,
            "by": approval.by,
            "reason": None if approval.reason is None else _text(approval.reason, "tool"),
            "always": approval.always,
        }
    return data


def thumbnail(block: ImageBlock) -> dict[str, str] | None:
    """The image as the page draws it (`mt`, `b64`, `line`), or None: not a PNG, JPEG, GIF
    or WebP whose bytes say so too, not base64, or too large. The base64 is decoded and
    encoded again, so what reaches the page's data: URL is only the base64 alphabet."""
    media_type = block.source.media_type
    magic = THUMBNAIL_TYPES.get(media_type)
    data = block.source.data
    if magic is None or len(data) > THUMBNAIL_MAX:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(magic):
        return None
    if media_type == "image/webp" and raw[8:12] != b"WEBP":
        return None
    return {
        "mt": media_type,
        "b64": base64.b64encode(raw).decode("ascii"),
        "line": visible(image_line(block)),
    }


def _mark(mark: Mark, t0: float, changed: Mapping[int, Sequence[str]]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kind": mark.kind,
        "at": _rel(mark.ts, t0),
        "after": mark.after_step,
        "limit": mark.limit,
    }
    if mark.checkpoint is not None:
        data["text"] = checkpoint_line(mark.checkpoint)
        # The files the step that begins here changed (given by the caller: a store read).
        data["changed"] = [visible(path) for path in changed.get(mark.seq, ())]
    elif mark.kind == "context_cleared":
        data["cleared"] = [
            {"id": visible(item.tool_use_id), "name": visible(item.name), "size": item.size}
            for item in mark.cleared
        ]
        data["bytes"] = sum(item.size for item in mark.cleared)
    else:
        data["budget"] = visible(mark.budget or "")
        data["spent"] = mark.spent
    return data


def _block(block: TextBlock | ThinkingBlock | RedactedThinkingBlock) -> dict[str, Any]:
    match block:
        case TextBlock():
            return {"k": "text", **_text(block.text, "text")}
        case ThinkingBlock():
            return {"k": "thinking", **_text(block.thinking, "thinking")}
        case RedactedThinkingBlock():
            return {"k": "redacted", "t": "", "n": len(block.data)}


def _step(step: Step, t0: float, nested: _Nested) -> dict[str, Any]:
    return {
        "n": step.number,
        "start": _rel(step.start, t0),
        "end": _rel(step.end, t0),
        "attempts": [_attempt(a, t0) for a in step.attempts],
        "blocks": [_block(b) for b in step.content],
        "tools": [_tool(t, t0, nested) for t in step.tools],
    }


def _session(session: Sitting, t0: float) -> dict[str, Any]:
    return {
        "seq": session.seq,
        "start": _rel(session.start, t0),
        "end": _rel(session.end, t0),
        "resumed": session.resumed,
        "max_steps": session.max_steps,
        "torn": session.torn_bytes,
        "approval": session.approval,
        "status": session.status,
        "error": None if session.error is None else _text(session.error, "tool"),
        "steps": session.steps,
        "elapsed": session.elapsed,
    }


def page_data(
    timeline: Timeline,
    *,
    live: bool = False,
    source: str = "",
    changed: Mapping[int, Sequence[str]] | None = None,
    children: Mapping[str, Timeline] | None = None,
) -> dict[str, Any]:
    """The run as the page's script reads it: times in seconds from the run's start.
    `changed`: per checkpoint's seq, the files the step that begins there changed;
    `children`: the timelines of its child runs (and theirs) by run id, drawn inside the
    `agent` calls that started them."""
    nested = _Nested(runs=children or {}, within=frozenset({timeline.run_id}))
    data = _page(timeline, live=live, t0=timeline.start, nested=nested, changed=changed)
    data["run"]["source"] = visible(source)
    return data


def _page(
    timeline: Timeline,
    *,
    live: bool,
    t0: float,
    nested: _Nested,
    changed: Mapping[int, Sequence[str]] | None = None,
) -> dict[str, Any]:
    answer = timeline.answer
    status = timeline.status
    if status == "running" and not live:
        status = "interrupted"
    return {
        "version": __version__,
        "run": {
            "id": visible(timeline.run_id),
            "goal": _text(timeline.goal, "goal"),
            "model": visible(timeline.model),
            "system": _text(timeline.system, "system"),
            "tools": [visible(name) for name in timeline.tool_names],
            "approval": timeline.approval_mode,
            "status": status,
            "error": None if timeline.error is None else _text(timeline.error, "tool"),
            "start": t0,
            "duration": round(timeline.end - timeline.start, 6),
            "usage": _usage(timeline.usage),
            "cost": timeline.cost,
            "answer": None if answer is None else _text(answer, "text"),
            "events": timeline.events,
            # The run's time as its last run_finished says it (what the "finished" row and
            # `ruizn show` give); for a run that has not finished, the log's span so far.
            "elapsed": _elapsed(timeline),
        },
        "sessions": [_session(s, t0) for s in timeline.sessions],
        "steps": [_step(s, t0, nested) for s in timeline.steps],
        "marks": [_mark(m, t0, changed or {}) for m in timeline.marks],
    }


def _elapsed(timeline: Timeline) -> float:
    last = timeline.sessions[-1] if timeline.sessions else None
    if last is not None and last.elapsed is not None:
        return last.elapsed
    return round(max(0.0, timeline.end - timeline.start), 6)


_SCRIPT_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: pure ASCII, with no `<`, `>` or `&`, so
    neither `</script>` nor `<!--` can appear in it, whatever the data holds."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.translate(_SCRIPT_ESCAPES)


@cache
def _asset(name: str) -> str:
    return resources.files("ruizn.view").joinpath(name).read_text(encoding="utf-8")


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    # Nothing may load from anywhere; only this page's own script runs (not even inline
    # handlers); styles are inline; the page cannot be framed into a form post.
    return (
        "default-src 'none'; "
        f"script-src 'sha256-{digest}'; "
        "style-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


def render(
    timeline: Timeline,
    *,
    live: bool = False,
    source: str = "",
    changed: Mapping[int, Sequence[str]] | None = None,
    children: Mapping[str, Timeline] | None = None,
) -> str:
    """The whole page for a run, as one string (its child runs' drawn inside it)."""
    script = _asset("view.js")
    data = script_json(
        page_data(timeline, live=live, source=source, changed=changed, children=children)
    )
    return _asset("view.html").format(
        csp=_csp(script),
        css=_asset("view.css"),
        data=data,
        script=script,
    )
