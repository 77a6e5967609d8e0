"""`ruizn view` shows the whole log: context clearing between steps, a tool's images as
thumbnails (PNG, JPEG, GIF, WebP only, checked by type and bytes, never SVG), one time scale
across steps with each step's own a click away, times that agree, thinking folded.

A real run (the real CLI, the real SDK, the fake Messages API), drawn by headless Chromium;
a screenshot is kept as an artifact (RUIZN_TEST_ARTIFACTS, else the test's tmp folder)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ruizn.state import ImageBlock, ImageSource
from ruizn.view.page import thumbnail
from tests.cli.conftest import Result, run_cli
from tests.fakeapi import Stream, Text, ToolUse
from tests.fakeapi.replies import Thinking
from tests.mcp_servers.media import png
from tests.view.chromium import dump_dom, screenshot
from tests.view.conftest import Dom, artifacts, view_page

TOOLS_PY = '''
import struct
import zlib

import ruizn


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\\0" + bytes(v for x in range(width) for v in ((x * 5) % 256, (y * 4) % 256, 160))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\\x89PNG\\r\\n\\x1a\\n" + body


@ruizn.tool(read_only=True)
def snap(page: str) -> list[object]:
    """Take a screenshot of a page.

    Args:
        page: Which page.
    """
    return [f"screenshot of {page}", ruizn.Image(_png(48, 32), "image/png")]


@ruizn.tool(read_only=True)
def dump(part: str) -> str:
    """Dump a part of the data.

    Args:
        part: Which part.
    """
    return f"{part}: " + "lorem ipsum dolor sit amet " * 300
'''

THOUGHT = "The user wants a screenshot first; then the two dumps."
ANSWER = "Done: one screenshot and two dumps."


def _script() -> list[Any]:
    return [
        Stream(
            (
                Thinking(THOUGHT, "sig-1"),
                Text("Taking a screenshot."),
                ToolUse("toolu_snap", "snap", {"page": "home"}),
            ),
            stop_reason="tool_use",
        ),
        Stream((ToolUse("toolu_dump_a", "dump", {"part": "a"}),), stop_reason="tool_use"),
        Stream((ToolUse("toolu_dump_b", "dump", {"part": "b"}),), stop_reason="tool_use"),
        Stream((Text(ANSWER, chunk=3),), token_delay=0.02),  # the longest step
    ]


@pytest.fixture
def run_and_page(tmp_path: Path, server_factory: Any) -> tuple[Result, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "my_tools.py").write_text(TOOLS_PY, encoding="utf-8")
    server = server_factory(_script())
    run = run_cli(
        [
            "run",
            "--goal",
            "screenshot the home page, then dump parts a and b",
            "--tool",
            "my_tools.py:snap",
            "--tool",
            "my_tools.py:dump",
            "--max-context",
            "6000",
        ],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert run.code == 0, run.stderr
    return run, view_page(workspace)


def _style_pct(style: str, key: str) -> float:
    found = re.search(rf"{key}: ([\d.]+)%", style)
    assert found, style
    return float(found.group(1))


def test_the_page_shows_clearing_images_one_scale_agreeing_times_and_folded_thinking(
    run_and_page: tuple[Result, Path], tmp_path: Path
) -> None:
    run, page = run_and_page
    events = run.events()
    cleared = [e for e in events if e["type"] == "context_cleared"]
    assert cleared, "the run was meant to clear its context"
    html = dump_dom(page)
    dom = Dom(html)
    assert dom.tags("html")[0].get("data-ready") == "1"
    text = dom.text

    # Context clearing, in the timeline and the transcript, as the terminal says it.
    count = len(cleared[0]["results"])
    noun = "old tool result" if count == 1 else "old tool results"
    limit = f"{cleared[0]['limit']:,}"
    assert f"context: cleared {count} {noun} (" in text
    assert f") to stay under {limit} tokens" in text
    assert len(dom.by_class("mark")) == 2 * len(cleared)  # a timeline row, a transcript box

    # The screenshot, drawn from the log's base64 as a data: URL.
    images = dom.tags("img")
    assert len(images) == 1
    src = images[0].get("src") or ""
    assert src.startswith("data:image/png;base64,")
    logged = next(
        block["source"]["data"]
        for e in events
        if e["type"] == "tool_call_finished"
        for block in e["result"]["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    )
    assert src == "data:image/png;base64," + logged
    assert "image/png · " in text
    assert "48x32 px" in text

    # Thinking is folded: a closed <details>, its summary says what it holds.
    thinking = [a for tag, a in dom.elements if tag == "details"]
    assert f"thinking · {len(THOUGHT)} chars" in text
    assert all("open" not in a for a in thinking)

    # The header's time is the finished row's.
    finished = next(e for e in events if e["type"] == "run_finished")
    shown = re.search(r"finished: success · 4 steps · ([^·<]+?)(?: ·|$)", text, re.M)
    assert shown, text
    header_stats = html.split('class="stats"', 1)[1].split("</div>", 1)[0]
    assert f"<span>{shown.group(1).strip()}</span>" in header_stats
    assert finished["elapsed"] > 0

    # One time scale: the longest step fills its track; a short one ends well before.
    ends = []
    for step in range(1, 5):
        row = html.split(f'data-step="{step}"', 1)[1].split('class="row', 1)[0]
        styles = re.findall(r'<div class="bar [^"]*"[^>]*style="([^"]*)"', row)
        ends.append(max(_style_pct(s, "left") + _style_pct(s, "width") for s in styles))
    assert max(ends) > 99
    assert min(ends) < 60, ends
    assert "time scale: one for all steps (click: each step its own)" in text

    # Words: one tool call per step.
    assert "1 tool call" in text
    assert not re.search(r"\b1 tool calls\b", text)

    shot = screenshot(page, artifacts(tmp_path) / "view-whole-log.png", size=(1400, 900))
    assert shot.stat().st_size > 10_000


def test_a_planted_svg_or_a_lying_image_is_never_drawn(
    run_and_page: tuple[Result, Path],
) -> None:
    """A log is data: one edited to hold an SVG with script (declared as SVG, or as a PNG)
    is refused as a log, in one line, and no page is drawn from it. (The page's own check,
    type and bytes, is the wall behind: the test below.)"""
    run, page = run_and_page
    drawn = page.read_text(encoding="utf-8")
    svg = (
        b'<svg xmlns="http://www.w3.org/2000/svg"'
        b" onload=\"document.documentElement.setAttribute('data-pwned','svg')\"/>"
    )
    lines = run.log_path.read_text(encoding="utf-8").splitlines()
    for media_type in ("image/svg+xml", "image/png"):
        edited = []
        for line in lines:
            event = json.loads(line)
            if event["type"] == "tool_call_finished":
                for block in event["result"]["content"]:
                    if isinstance(block, dict) and block.get("type") == "image":
                        block["source"] = {
                            "type": "base64",
                            "media_type": media_type,
                            "data": base64.b64encode(svg).decode(),
                        }
            edited.append(json.dumps(event))
        run.log_path.write_text("\n".join(edited) + "\n", encoding="utf-8")
        refused = run_cli(["view", "last"], workspace=run.workspace)
        assert refused.code == 2, refused.stderr
        assert refused.stderr.count("\n") == 1
        assert "image" in refused.stderr
        assert page.read_text(encoding="utf-8") == drawn  # the old page, untouched


def _image(media_type: str, raw: bytes) -> ImageBlock:
    return ImageBlock(
        source=ImageSource(media_type=media_type, data=base64.b64encode(raw).decode())
    )


def test_only_a_raster_image_whose_bytes_match_its_type_becomes_a_thumbnail() -> None:
    picture = png(8, 8)
    assert thumbnail(_image("image/png", picture)) is not None
    assert thumbnail(_image("image/jpeg", picture)) is None  # declared one thing, is another
    assert thumbnail(_image("image/svg+xml", b"<svg/>")) is None
    assert thumbnail(_image("image/png", b"<svg/>")) is None
    assert thumbnail(_image("text/html", picture)) is None
    gif = b"GIF89a" + bytes(20)
    assert thumbnail(_image("image/gif", gif)) is not None
    webp = b"RIFF" + bytes(4) + b"WEBP" + bytes(10)
    assert thumbnail(_image("image/webp", webp)) is not None
    assert thumbnail(_image("image/webp", b"RIFF" + bytes(4) + b"WAVE" + bytes(10))) is None
    jpeg = b"\xff\xd8\xff\xe0" + bytes(20)
    assert thumbnail(_image("image/jpeg", jpeg)) is not None
    # Not base64 (a quote, markup): never a URL.
    hostile = ImageBlock(source=ImageSource(media_type="image/png", data='iVBOR"><script>'))
    assert thumbnail(hostile) is None
    shown = thumbnail(_image("image/png", picture))
    assert shown is not None
    assert re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", shown["b64"])
