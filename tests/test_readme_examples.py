"""The README's tool examples (and those of docs/library.md it points to) work as printed:
they pass `mypy --strict`, and they run.

Each example is cut out of README.md, saved as a file and loaded the way `--tool` loads it,
so a change to the README that breaks an example breaks this test.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ruizn.effects.tools.base import ToolRegistry, invoke_tool
from ruizn.effects.tools.loader import load_tool_spec
from ruizn.state import ErrorType, ToolCall, ToolResult
from tests.conftest import run_python

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The longer examples the README points to.
LIBRARY_DOC = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _block(language: str, containing: str) -> str:
    found: list[str] = []
    for text in (README, LIBRARY_DOC):  # the README's own first
        found = [
            body for lang, body in _BLOCK.findall(text) if lang == language and containing in body
        ]
        if found:
            break
    assert len(found) == 1, f"expected one {language} block with {containing!r} in README.md"
    return found[0]


FUNCTION_EXAMPLE = _block("python", "@ruizn.tool(read_only=True)")
LIBRARY_EXAMPLE = _block("python", "ruizn.Agent(")
CLASS_EXAMPLE = _block("python", "class WordCount")


@pytest.fixture
def examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "function_example.py").write_text(FUNCTION_EXAMPLE, encoding="utf-8")
    (tmp_path / "class_example.py").write_text(CLASS_EXAMPLE, encoding="utf-8")
    (tmp_path / "library_example.py").write_text(LIBRARY_EXAMPLE, encoding="utf-8")
    before = set(sys.modules)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.mark.slow
def test_the_examples_pass_mypy_strict(examples: Path) -> None:
    files = [
        str(examples / "function_example.py"),
        str(examples / "class_example.py"),
        str(examples / "library_example.py"),
    ]
    mypy = ("-m", "mypy", "--strict", "--python-version", "3.11")
    # cwd: the repo's mypy cache, warm after a `mypy` run
    done = run_python(*mypy, *files, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.anyio
async def test_the_function_example_is_a_tool_and_still_a_function(examples: Path) -> None:
    (add,) = load_tool_spec("function_example.py:add")  # as `--tool` loads it
    assert add.read_only
    registry = ToolRegistry([add])
    call = ToolCall(id="t", name="add", input={"a": 2, "b": 3})
    assert await invoke_tool(registry, call) == ToolResult.ok("5")
    wrong = ToolCall(id="t", name="add", input={"a": 2, "b": "three"})
    assert await invoke_tool(registry, wrong) == ToolResult.error(
        ErrorType.INVALID_INPUT, "invalid input for add at b: 'three' is not of type 'integer'"
    )


def test_the_schema_the_readme_shows_is_the_one_sent(examples: Path) -> None:
    (add,) = load_tool_spec("function_example.py:add")
    assert json.loads(_block("json", '"name": "add"')) == add.schema()


@pytest.mark.anyio
async def test_the_class_example_counts_words_and_refuses_empty_text(examples: Path) -> None:
    (word_count,) = load_tool_spec("class_example.py:WordCount")
    registry = ToolRegistry([word_count])
    count = ToolCall(id="t", name="word_count", input={"text": "one two  three"})
    assert await invoke_tool(registry, count) == ToolResult.ok("3")
    empty = ToolCall(id="t", name="word_count", input={"text": "  "})
    assert await invoke_tool(registry, empty) == ToolResult.error(
        ErrorType.INVALID_INPUT, "text is empty"
    )


def test_the_plugin_example_declares_the_entry_point_group_ruizn_loads() -> None:
    from ruizn.effects.tools.loader import ENTRY_POINT_GROUP

    declared = tomllib.loads(_block("toml", "ruizn.tools"))
    assert declared["project"]["entry-points"][ENTRY_POINT_GROUP] == {
        "my_tools": "my_package.tools:TOOLS"
    }
    package = tomllib.loads((ROOT / "tests" / "plugin_pkg" / "pyproject.toml").read_text())
    assert ENTRY_POINT_GROUP in package["project"]["entry-points"]


def test_the_library_example_runs_as_printed_and_its_log_rebuilds_the_result(
    examples: Path,
) -> None:
    (examples / "README.md").write_text("# A workspace\n", encoding="utf-8")
    done = run_python("library_example.py", cwd=examples, timeout=120)
    assert done.returncode == 0, done.stderr  # its own assert: replay == the final state
    status, _, output = done.stdout.partition(" ")
    assert status == "success"
    assert "README.md" in output
    assert list((examples / ".ruizn" / "runs").glob("*/events.jsonl"))
