"""`ruizn.Image` as a library user meets it: a @ruizn.tool returns one, the model sees it, and
the log rebuilds the run exactly."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import ruizn
from ruizn.effects.models.provider import ModelReply
from ruizn.state import ToolUseBlock, Usage
from tests.mcp_servers.media import png


@ruizn.tool(read_only=True)
def screenshot(width: int, height: int) -> list[object]:
    """A screenshot of the given size.

    Args:
        width: Pixels across.
        height: Pixels down.
    """
    return [f"{width}x{height}:", ruizn.Image(png(width, height), "image/png")]


def test_a_tool_returning_an_image_reaches_the_model_and_replays_exactly(tmp_path: Path) -> None:
    seen: list[Any] = []

    def model(request: dict[str, Any]) -> ModelReply | str:
        last = request["messages"][-1]["content"]
        results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            seen.extend(results)
            return "I see it."
        calls = (
            ToolUseBlock(id="toolu_1", name="screenshot", input={"width": 8, "height": 6}),
            ToolUseBlock(id="toolu_2", name="screenshot", input={"width": 9001, "height": 1}),
        )
        return ModelReply(content=calls, stop_reason="tool_use", usage=Usage(output_tokens=3))

    agent = ruizn.Agent(model=model, tools=[screenshot], builtins=False, workspace=tmp_path)
    result = agent.run("look")
    assert result.status == ruizn.Status.SUCCESS
    small, wide = seen
    assert small["content"] == [
        {"type": "text", "text": "8x6:"},
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(png(8, 6)).decode(),
            },
        },
    ]
    # Too wide for the API: a line saying so, in the place of the image.
    assert wide["content"].startswith("9001x1:\n[image not shown: image/png, ")
    assert wide["content"].endswith("9001x1 px: it is over the 8000 px a side the API takes]")
    assert result.log_path is not None
    assert ruizn.replay(result.log_path) == result.state
