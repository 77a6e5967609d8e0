"""The core's rules for images in tool results and for a changed tool list (in-process, pure):
what `ruizn.media` lets into a run is always inside the Messages API's limits, the reducer
refuses what it would not let in, and a tools_changed may change only its servers' tools."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.decide import AnswerStale, next_action
from ruizn.events import (
    Event,
    LlmCallStarted,
    LlmResponse,
    RunStarted,
    ToolCallFinished,
    ToolsChanged,
)
from ruizn.media import (
    MANY_IMAGES,
    MAX_IMAGE_BASE64,
    MAX_IMAGES,
    MAX_REQUEST_IMAGE_BASE64,
    MAX_SIDE,
    MAX_SIDE_MANY,
    ImageInfo,
    fit,
    inspect,
    problem,
)
from ruizn.reducers import InvalidTransition, rebuild, reduce
from ruizn.request import plan_request
from ruizn.settings import RunSettings
from ruizn.state import (
    ErrorType,
    ImageBlock,
    ImageSource,
    MediaTally,
    ResultContent,
    TextBlock,
    ToolResult,
    ToolUseBlock,
    Usage,
)
from ruizn.toolsource import SourceKind, ToolSource


def png_header(width: int, height: int, padding: int = 0) -> bytes:
    """A PNG's signature and IHDR (all ruizn reads of it), then `padding` bytes."""
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + ihdr
        + struct.pack(">I", zlib.crc32(ihdr))
        + bytes(padding)
    )


def image(data: bytes, media_type: str = "image/png") -> ImageBlock:
    return ImageBlock(
        source=ImageSource(media_type=media_type, data=base64.b64encode(data).decode())
    )


# Sizes around the API's limits: a few bytes, and just under and over 5 MiB of base64.
PADDING = st.sampled_from([0, 10, 3_900_000, 3_932_100, 3_932_200])
SIDES = st.sampled_from([1, 64, MAX_SIDE_MANY, MAX_SIDE_MANY + 1, MAX_SIDE, MAX_SIDE + 1])
BLOCKS = st.one_of(
    st.builds(lambda w, h, p: image(png_header(w, h, p)), SIDES, SIDES, PADDING),
    # Declared as one type but another (the API refuses a mismatch: ruizn corrects it).
    st.builds(lambda w: image(png_header(w, 3), "image/jpeg"), SIDES),
    st.just(image(b"BM" + bytes(60), "image/bmp")),
    st.just(ImageBlock(source=ImageSource(media_type="image/png", data="not base64!"))),
    st.builds(lambda text: TextBlock(text=text), st.text(min_size=1, max_size=5)),
)


@st.composite
def tallies(draw: Any) -> MediaTally:
    """What a run's requests may hold already: any count and size, and large images only
    while the request holds at most MANY_IMAGES (the rule every earlier image passed)."""
    images = draw(st.integers(0, MAX_IMAGES))
    encoded = draw(st.integers(0, MAX_REQUEST_IMAGE_BASE64))
    large = draw(st.integers(0, images)) if images <= MANY_IMAGES else 0
    return MediaTally(images=images, encoded=encoded, large=large)


@settings(max_examples=60, deadline=None)
@given(tally=tallies(), blocks=st.lists(BLOCKS, min_size=1, max_size=4))
def test_what_fit_lets_in_is_inside_the_apis_limits_and_the_reducer_takes_it(
    tally: MediaTally, blocks: list[ImageBlock | TextBlock]
) -> None:
    content, after = fit(tuple(blocks), tally)
    kept = [] if isinstance(content, str) else [b for b in content if isinstance(b, ImageBlock)]
    for block in kept:
        info = inspect(block)
        assert isinstance(info, ImageInfo)
        assert info.media_type == block.source.media_type
        assert info.encoded <= MAX_IMAGE_BASE64
        assert info.side <= MAX_SIDE
        if after.images > MANY_IMAGES:
            assert info.side <= MAX_SIDE_MANY
    assert after.images == tally.images + len(kept)
    assert after.images <= MAX_IMAGES
    assert after.encoded <= MAX_REQUEST_IMAGE_BASE64
    assert after.images <= MANY_IMAGES or after.large == 0
    # What fit gives is what the reducer lets in, counted the same way.
    assert problem(content, tally) == (None, after)
    # An image left out is a line naming it, never dropped without a word.
    left_out = sum(isinstance(b, ImageBlock) for b in blocks) - len(kept)
    text = (
        content
        if isinstance(content, str)
        else "".join(b.text for b in content if isinstance(b, TextBlock))
    )
    assert text.count("[image not shown: ") >= left_out


# -- the reducer ----------------------------------------------------------------------------

SERVER: dict[str, Any] = {"name": "m", "transport": "stdio", "command": "m-server"}


def schema(name: str, **properties: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": name,
        "input_schema": {"type": "object", "properties": properties},
    }


def source(name: str, kind: SourceKind = SourceKind.MCP) -> ToolSource:
    ref = name if kind is SourceKind.BUILTIN else "m/" + name.removeprefix("mcp__m__")
    return ToolSource(tool=name, kind=kind, ref=ref, read_only=True)


READ_FILE = schema("read_file")
OLD, NEW = schema("mcp__m__old"), schema("mcp__m__new")
RUN = RunSettings(
    mcp_servers=(SERVER,),
    tools=(READ_FILE, OLD),
    tool_sources=(source("read_file", SourceKind.BUILTIN), source("mcp__m__old")),
)


def events_until_tools() -> list[Event]:
    """A run whose model has just called mcp__m__old (toolu_1) and read_file (toolu_2)."""
    calls = (
        ToolUseBlock(id="toolu_1", name="mcp__m__old", input={}),
        ToolUseBlock(id="toolu_2", name="read_file", input={}),
    )
    return [
        RunStarted(seq=1, ts=0.0, run_id="r", goal="g", settings=RUN),
        LlmCallStarted(seq=2, ts=0.0, step=1),
        LlmResponse(
            seq=3, ts=0.0, content=calls, stop_reason="tool_use", usage=Usage(output_tokens=1)
        ),
    ]


def changed(seq: int, tools: tuple[Any, ...], sources: tuple[ToolSource, ...], **kw: Any) -> Event:
    fields: dict[str, Any] = {"servers": ("m",), "tools": tools, "tool_sources": sources, **kw}
    return ToolsChanged(seq=seq, ts=0.0, **fields)


def test_a_gone_tool_is_offered_no_more_and_its_pending_call_answered_with_why() -> None:
    events = events_until_tools()
    new_sources = (source("read_file", SourceKind.BUILTIN), source("mcp__m__new"))
    events.append(changed(4, (READ_FILE, NEW), new_sources))
    state = rebuild(events)
    assert state.settings.tools == (READ_FILE, NEW)
    assert state.turn_stale == ("toolu_1",)
    action = next_action(state, lambda name, tool_input: False, can_ask=False)
    assert isinstance(action, AnswerStale)
    [(call, result)] = action.answers
    assert call.id == "toolu_1"
    assert result.is_error
    assert result.error_type == ErrorType.UNKNOWN_TOOL
    assert "mcp__m__old is no longer offered" in str(result.content)
    # The next request offers the new list.
    for seq, (call_id, answer) in enumerate(
        [("toolu_1", result), ("toolu_2", ToolResult.ok("text"))], start=5
    ):
        events.append(ToolCallFinished(seq=seq, ts=0.0, id=call_id, result=answer))
    request = plan_request(rebuild(events))
    assert [tool["name"] for tool in request.to_json()["tools"]] == ["read_file", "mcp__m__new"]


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (
            changed(
                4, (READ_FILE, NEW), (source("read_file", SourceKind.BUILTIN),), servers=("x",)
            ),
            "not the run's",
        ),
        (
            # A built-in may not change (no line of a log can add code to load on resume).
            changed(
                4,
                (schema("read_file", path={"type": "string"}), NEW),
                (source("read_file", SourceKind.BUILTIN), source("mcp__m__new")),
            ),
            "other than those of its MCP servers",
        ),
        (
            changed(
                4,
                (READ_FILE, NEW, NEW),
                (source("read_file", SourceKind.BUILTIN), source("mcp__m__new")),
            ),
            "names a tool twice",
        ),
        (
            changed(
                4,
                (READ_FILE,),
                (source("read_file", SourceKind.BUILTIN), source("mcp__m__new")),
            ),
            "a source for a tool it does not offer",
        ),
    ],
    ids=["another-server", "a-builtin", "twice", "source-without-tool"],
)
def test_the_reducer_refuses_a_tools_changed_that_breaks_the_rules(event: Event, why: str) -> None:
    state = rebuild(events_until_tools())
    with pytest.raises(InvalidTransition, match=why):
        reduce(state, event)


def test_a_result_with_an_image_the_api_would_refuse_is_refused_by_the_reducer() -> None:
    # A planted log cannot make a request the API refuses for its images.
    state = rebuild(events_until_tools())
    too_wide: ResultContent = (image(png_header(MAX_SIDE + 1, 1)),)
    with pytest.raises(InvalidTransition, match="8000 px a side"):
        reduce(state, ToolCallFinished(seq=4, ts=0.0, id="toolu_1", result=ToolResult.ok(too_wide)))
    mislabelled: ResultContent = (image(png_header(2, 2), "image/gif"),)
    with pytest.raises(InvalidTransition, match="declared image/gif but is image/png"):
        reduce(
            state, ToolCallFinished(seq=4, ts=0.0, id="toolu_1", result=ToolResult.ok(mislabelled))
        )
