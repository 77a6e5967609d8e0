"""Images in tool results: what the Messages API takes, stated once, and the rule that keeps
every request inside it.

A tool's result goes to the model as text, or as text and image blocks inside its
`tool_result` (`ToolResult.content` is then a tuple of `TextBlock` and `ImageBlock`). The API
refuses a whole request (HTTP 400, which no retry gets past) when one image breaks its
limits, so an image is checked before it enters the run, and one that would break them is
replaced by a text line saying why (`fit`), never sent:

- its bytes must be a JPEG, PNG, GIF or WebP whose size in pixels can be read (the declared
  media type is corrected to what the bytes are: the API refuses a mismatch);
- its base64 text may be at most 5 MiB (`MAX_IMAGE_BASE64`; the API counts the base64);
- at most 8000 px a side, and 2000 px once a request holds more than 20 images;
- a request holds at most 100 images (`MAX_IMAGES`) and, so the body stays well under the
  API's 32 MB, at most 24 MiB of image base64 (`MAX_REQUEST_IMAGE_BASE64`).

Every request carries the whole history, so the limits per request bound the run: the
images of all the results so far (`MediaTally`) plus the new one must fit. An image is
never dropped from the history later (the log is the request), so once a run holds 100
images, or a large one and 20 images, further images are text lines. The reducer refuses a
result that breaks the rule (`problem`), so no log, live or planted, can make a request the
API refuses for its images, and a run's log grows by at most 24 MiB of image text.

Pure: bytes in, records and strings out.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable, Iterable

from attrs import frozen

from ruizn.format import human_bytes
from ruizn.state import (
    ExecutionContext,
    ImageBlock,
    ImageSource,
    MediaTally,
    ResultBlock,
    ResultContent,
    TextBlock,
    ToolResultBlock,
)

MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
MAX_SIDE = 8000
# Past this many images in one request, the API's limit per side drops to MAX_SIDE_MANY.
MANY_IMAGES = 20
MAX_SIDE_MANY = 2000
MAX_IMAGES = 100
MAX_REQUEST_IMAGE_BASE64 = 24 * 1024 * 1024


@frozen  # positional, as the issue and the README write it: `ruizn.Image(data, "image/png")`
class Image:
    """An image a tool returns: `ruizn.Image(data, "image/png")`, with `data` the file's
    bytes. A `@ruizn.tool` function may return one, or a list of text and images."""

    data: bytes
    media_type: str = "image/png"

    def block(self) -> ImageBlock:
        encoded = base64.b64encode(self.data).decode("ascii")
        return ImageBlock(source=ImageSource(media_type=self.media_type, data=encoded))


@frozen(kw_only=True)
class ImageInfo:
    """What an image's bytes say of it."""

    media_type: str  # what the bytes are, whatever was declared
    width: int
    height: int
    size: int  # bytes, decoded
    encoded: int  # characters of base64

    @property
    def side(self) -> int:
        return max(self.width, self.height)


def counted(tally: MediaTally, info: ImageInfo) -> MediaTally:
    """`tally` with one more image."""
    return MediaTally(
        images=tally.images + 1,
        encoded=tally.encoded + info.encoded,
        large=tally.large + (info.side > MAX_SIDE_MANY),
    )


def inspect(block: ImageBlock) -> ImageInfo | str:
    """The image's type and size in pixels, read from its bytes; or why they cannot be
    (one phrase: not base64, not an image type the API takes, a header cut short)."""
    data = block.source.data
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "its data is not base64"
    read = _reader(raw)
    if read is None:
        return "its bytes are not a JPEG, PNG, GIF or WebP image, the types the model takes"
    media_type, reader = read
    try:
        size = reader(raw)
    except (struct.error, IndexError):
        size = None
    if size is None or min(size) < 1:
        return f"its bytes begin like {media_type} but its size in pixels cannot be read"
    width, height = size
    return ImageInfo(
        media_type=media_type, width=width, height=height, size=len(raw), encoded=len(data)
    )


def refusal(info: ImageInfo, tally: MediaTally) -> str | None:
    """Why the API would refuse the next request with this image in it, or None."""
    if info.encoded > MAX_IMAGE_BASE64:
        return f"its base64 is over the {human_bytes(MAX_IMAGE_BASE64)} the API takes per image"
    if info.side > MAX_SIDE:
        return f"it is over the {MAX_SIDE} px a side the API takes"
    if tally.images >= MAX_IMAGES:
        return f"the run's requests already hold {MAX_IMAGES} images, the most the API takes"
    if tally.encoded + info.encoded > MAX_REQUEST_IMAGE_BASE64:
        return (
            f"the run's images would pass {human_bytes(MAX_REQUEST_IMAGE_BASE64)} of base64,"
            " the most ruizn puts in one request (the API takes 32 MB in all)"
        )
    if tally.images >= MANY_IMAGES and (info.side > MAX_SIDE_MANY or tally.large):
        return (
            f"a request with more than {MANY_IMAGES} images may hold none over"
            f" {MAX_SIDE_MANY} px a side, and "
            + ("this one is" if info.side > MAX_SIDE_MANY else "the run holds one already")
        )
    return None


def fit(content: ResultContent, tally: MediaTally) -> tuple[ResultContent, MediaTally]:
    """`content` as it may go to the model after the run's images `tally`: each image that
    the API would refuse becomes a text line naming it and why. Returns the content in its
    one form (`content_of`) and the tally with its images."""
    if isinstance(content, str):
        return content, tally
    parts: list[str | ImageBlock] = []
    for block in content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
            continue
        info = inspect(block)
        why = info if isinstance(info, str) else refusal(info, tally)
        if why is not None:
            parts.append(not_shown(block, info, why))
            continue
        assert isinstance(info, ImageInfo)
        tally = counted(tally, info)
        parts.append(_typed(block, info.media_type))
    return content_of(parts), tally


def _typed(block: ImageBlock, media_type: str) -> ImageBlock:
    """The block declared as what its bytes are (the API refuses a wrong media type)."""
    if block.source.media_type == media_type:
        return block
    return ImageBlock(source=ImageSource(media_type=media_type, data=block.source.data))


def problem(content: ResultContent, tally: MediaTally) -> tuple[str | None, MediaTally]:
    """Why `content` may not enter a run whose requests hold `tally` (None if it may), and
    the tally with its images. What `fit` gives always passes."""
    if isinstance(content, str):
        return None, tally
    if not content:
        return "a result's content blocks are empty", tally
    if not any(isinstance(block, ImageBlock) for block in content):
        return "a result's content blocks hold no image (text alone is a string)", tally
    for block in content:
        if isinstance(block, TextBlock):
            if not block.text.strip():
                return "a result holds a blank text block", tally
            continue
        info = inspect(block)
        if isinstance(info, str):
            return f"an image in a result: {info}", tally
        if info.media_type != block.source.media_type:
            return (
                f"an image in a result is declared {block.source.media_type} but is"
                f" {info.media_type}"
            ), tally
        why = refusal(info, tally)
        if why is not None:
            return f"an image in a result: {why}", tally
        tally = counted(tally, info)
    return None, tally


def content_of(parts: Iterable[str | ImageBlock]) -> ResultContent:
    """A result's content in its one form: a string when it holds no image (its texts joined
    by newlines); else text and image blocks in order, neighbouring texts joined the same
    way and blank ones left out (the API refuses a blank text block)."""
    items = list(parts)
    if not any(isinstance(item, ImageBlock) for item in items):
        return "\n".join(item for item in items if isinstance(item, str))
    blocks: list[ResultBlock] = []
    texts: list[str] = []
    for item in [*items, None]:
        if isinstance(item, str):
            texts.append(item)
            continue
        text = "\n".join(texts)
        texts = []
        if text.strip():
            blocks.append(TextBlock(text=text))
        if item is not None:
            blocks.append(item)
    return tuple(blocks)


def returned(value: object) -> ResultContent | None:
    """The content a tool's return value stands for when it holds an image: an `Image`, or
    a list (or tuple) of text and `Image`s, in order; None for anything else."""
    if isinstance(value, Image):
        return content_of([value.block()])
    if (
        isinstance(value, list | tuple)
        and any(isinstance(item, Image) for item in value)
        and all(isinstance(item, str | Image) for item in value)
    ):
        return content_of(item.block() if isinstance(item, Image) else item for item in value)
    return None


def tally_of_run(state: ExecutionContext) -> MediaTally:
    """The images the run's next request holds: those of its history and its open turn."""
    results = [
        block.content
        for message in state.messages
        for block in message.content
        if isinstance(block, ToolResultBlock)
    ]
    results += [result.content for result in state.turn_results if result is not None]
    return tally_of(results)


def tally_of(contents: Iterable[ResultContent]) -> MediaTally:
    """The images of these results, as the reducer counted them when they entered."""
    tally = MediaTally()
    for content in contents:
        if isinstance(content, str):
            continue
        for block in content:
            if isinstance(block, ImageBlock):
                info = inspect(block)
                if isinstance(info, ImageInfo):
                    tally = counted(tally, info)
    return tally


def not_shown(block: ImageBlock, info: ImageInfo | str, why: str) -> str:
    """The line that stands for an image the model is not sent."""
    if isinstance(info, ImageInfo):
        return f"[image not shown: {describe(info)}: {why}]"
    size = human_bytes(len(block.source.data) * 3 // 4)
    return f"[image not shown: {block.source.media_type}, about {size}: {why}]"


def describe(info: ImageInfo) -> str:
    """`image/png, 3.9 KB, 64x64 px`: what a person (or the model) is told of an image."""
    return f"{info.media_type}, {human_bytes(info.size)}, {info.width}x{info.height} px"


def image_line(block: ImageBlock) -> str:
    """One line for an image in a transcript or a summary: its type, size and, where its
    bytes tell, its size in pixels; never its bytes."""
    info = inspect(block)
    if isinstance(info, ImageInfo):
        return f"{info.media_type} · {human_bytes(info.size)} · {info.width}x{info.height} px"
    data = block.source.data
    return f"{block.source.media_type} · about {human_bytes(len(data) * 3 // 4)}"


# What an image costs in a request: about width x height / 750 tokens, and the API scales a
# large image down to about 1.15 megapixels first, so about 1600 at most.
PIXELS_PER_TOKEN = 750
MAX_IMAGE_TOKENS = 1600
# What an image surely costs, at least, once scaled down (the scaling rounds).
MIN_LARGE_IMAGE_TOKENS = 1400


def image_tokens(block: ImageBlock, *, at_least: bool = False) -> int:
    """The tokens an image adds to a request: at most this (`at_least=False`, for judging
    what a request may hold), or at least this (for what clearing it frees)."""
    info = inspect(block)
    if isinstance(info, str):  # never enters a run (`problem`); count it as the most
        return 0 if at_least else MAX_IMAGE_TOKENS
    pixels = info.width * info.height
    if at_least:
        return min(pixels // PIXELS_PER_TOKEN, MIN_LARGE_IMAGE_TOKENS)
    return min(-(-pixels // PIXELS_PER_TOKEN), MAX_IMAGE_TOKENS)


def result_size(content: ResultContent) -> int:
    """A result's size in bytes: its text's UTF-8 and its images' decoded bytes."""
    if isinstance(content, str):
        return utf8_size(content)
    size = 0
    for block in content:
        if isinstance(block, TextBlock):
            size += utf8_size(block.text)
        else:
            size += len(block.source.data) * 3 // 4 - block.source.data[-2:].count("=")
    return size


def utf8_size(text: str) -> int:
    # isascii is a flag read, not a scan: most results cost no encoding at all.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def images(content: ResultContent) -> tuple[ImageBlock, ...]:
    if isinstance(content, str):
        return ()
    return tuple(block for block in content if isinstance(block, ImageBlock))


def text_of(content: ResultContent) -> str:
    """The text of a result, its text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(block.text for block in content if isinstance(block, TextBlock))


# -- what the bytes are --------------------------------------------------------------------

_Size = tuple[int, int] | None
_SizeReader = Callable[[bytes], _Size]


def _reader(raw: bytes) -> tuple[str, _SizeReader] | None:
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png", _png
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg", _jpeg
    if raw[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif", _gif
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp", _webp
    return None


def _png(raw: bytes) -> _Size:
    if raw[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", raw[16:24])
    return int(width), int(height)


def _gif(raw: bytes) -> _Size:
    width, height = struct.unpack("<HH", raw[6:10])
    return int(width), int(height)


def _webp(raw: bytes) -> _Size:
    chunk = raw[12:16]
    if chunk == b"VP8 " and raw[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", raw[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if chunk == b"VP8L" and raw[20] == 0x2F:
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(raw[24:27], "little") + 1
        height = int.from_bytes(raw[27:30], "little") + 1
        return width, height
    return None


# The JPEG markers that start a frame (and so say its size): SOF0-3, 5-7, 9-11, 13-15.
_SOF = frozenset({*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), *range(0xCD, 0xD0)})
# Markers that stand alone, with no length after them.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xDA)})


def _jpeg(raw: bytes) -> _Size:
    at = 2
    end = len(raw)
    while at + 4 <= end:
        if raw[at] != 0xFF:
            return None
        marker = raw[at + 1]
        if marker == 0xFF:  # a fill byte before the marker
            at += 1
            continue
        if marker in _STANDALONE:
            at += 2
            continue
        (length,) = struct.unpack(">H", raw[at + 2 : at + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", raw[at + 5 : at + 9])
            return int(width), int(height)
        if length < 2:
            return None
        at += 2 + length
    return None
