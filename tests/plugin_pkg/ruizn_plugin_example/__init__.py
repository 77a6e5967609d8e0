"""Tools a plug-in package offers to ruizn."""

from __future__ import annotations

from typing import ClassVar

import ruizn
from ruizn.effects.tools.base import BaseTool
from ruizn.state import JsonObject, ToolResult


@ruizn.tool(read_only=True)
def shout(text: str) -> str:
    """Say the text in capitals.

    Args:
        text: What to say.
    """
    return text.upper() + "!"


def count_letters(text: str, letter: str = "a") -> dict[str, int]:
    """Count one letter in a text.

    :param text: The text to search.
    :param letter: The letter to count.
    """
    return {letter: text.count(letter)}


class Reverse(BaseTool):
    name = "reverse"
    description = "Reverse a text."
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        return str(input["text"])[::-1]


TOOLS = [count_letters, Reverse]
