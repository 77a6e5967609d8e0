"""Every module, function or file the documents, docstrings and comments name exists: a
name left behind by a move is a wrong map for the next reader.

Checked: `ruizn.a.b` in backticks (a module, or a module and then its attributes), paths in
backticks under `src/`, `tests/`, `bench/`, `docs/`, every `folder/module.py` path read from
`src/ruizn/` (as the docs write them: effects/tools/bash.py, shell/agent.py), and
`module.function` for the core's and the shell's policy modules (decide.next_action).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "ruizn"

_TICKED = re.compile(r"`([^`\s]+)`")
_DOTTED = re.compile(r"ruizn(\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)+/?")
_ROOTS = ("src/", "tests/", "bench/", "docs/", ".ci/")
# `folder/name.py` anywhere in the text, ticked or not.
_PY_PATH = re.compile(r"(?<![\w/.-])((?:[a-z_]+/)+[a-z_]+\.py)\b")
# Modules whose names no prose uses for anything else: `decide.x` means ruizn.decide's x.
_POLICY_MODULES = {
    name: f"ruizn.{name}"
    for name in (
        "decide",
        "reducers",
        "resuming",
        "rules",
        "grant",
        "redact",
        "serde",
        "bounds",
        "toolsource",
        "modelfacts",
        "configlayers",
    )
} | {name: f"ruizn.shell.{name}" for name in ("runner", "wiring", "toolcalls")}
_MODULE_ATTRIBUTE = re.compile(r"(?<![\w./-])([a-z_]+)\.(_?[a-z_][A-Za-z0-9_]*)(?![\w/(-])")


def _documents() -> list[tuple[str, str]]:
    texts = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in _docs()]
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(
                node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            ) and (doc := ast.get_docstring(node, clean=False)):
                texts.append((str(path.relative_to(ROOT)), doc))
        # comments name modules too
        comments = "\n".join(
            line.split("#", 1)[1]
            for line in path.read_text(encoding="utf-8").splitlines()
            if "#" in line
        )
        texts.append((str(path.relative_to(ROOT)), comments))
    return texts


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _dotted_exists(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if attribute in ("py",):
                return False
            try:
                found = getattr(found, attribute)
            except AttributeError:
                return False
        return True
    return False


def _ours(name: str) -> bool:
    """`ruizn.X...` where X is a module or package of ours (`ruizn.run.status`, a span
    attribute's name, is not)."""
    top = name.split(".")[1]
    return (SRC / top).is_dir() or (SRC / f"{top}.py").exists()


def _path_exists(text: str) -> bool:
    text = text.rstrip("/").split(":", 1)[0]
    if any(ch in text for ch in "*{}<>$"):
        return True  # a pattern or a placeholder, not a name
    if text.startswith(_ROOTS):
        return (ROOT / text).exists()
    if text.startswith("ruizn/") and text.endswith(".py"):
        return (SRC.parent / text).exists()
    first = text.split("/", 1)[0]
    if text.endswith(".py") and (SRC / first).is_dir():
        return (SRC / text).exists()
    return True  # some other path (a user's file, an example's): not ours to check


def _missing() -> list[str]:
    problems = []
    for where, text in _documents():
        for path in _PY_PATH.findall(text):
            ours = path.startswith("src/") or (SRC / path.split("/", 1)[0]).is_dir()
            if ours and not _path_exists(path):
                problems.append(f"{where}: {path}")
        for module, attribute in _MODULE_ATTRIBUTE.findall(text):
            if attribute == "py":
                continue  # a file's name (decide.py), checked as a path
            if module in _POLICY_MODULES and not _dotted_exists(
                f"{_POLICY_MODULES[module]}.{attribute}"
            ):
                problems.append(f"{where}: {module}.{attribute}")
        for ticked in _TICKED.findall(text):
            word = ticked.strip(".,;:()")
            if _DOTTED.fullmatch(word):
                missing = _ours(word) and not _dotted_exists(word)
            else:
                missing = bool(_PATH.fullmatch(word)) and "://" not in word
                missing = missing and not _path_exists(word)
            if missing:
                problems.append(f"{where}: `{word}`")
    return sorted(set(problems))


def test_every_module_and_file_named_in_backticks_exists() -> None:
    assert _missing() == []


@pytest.mark.parametrize(
    ("name", "exists"),
    [
        ("ruizn.shell.agent.Agent", True),
        ("ruizn.reducers.reduce", True),
        ("ruizn.shell.cli.main", False),
        ("ruizn.reducers._no_such_function", False),
    ],
)
def test_the_check_tells_names_that_exist_from_ones_that_do_not(name: str, exists: bool) -> None:
    assert _dotted_exists(name) is exists


def test_the_check_reads_paths_as_the_docs_write_them() -> None:
    assert _path_exists("effects/tools/bash.py")
    assert _path_exists("src/ruizn/shell/agent.py")
    assert _path_exists("ruizn/reducers.py")
    assert not _path_exists("effects/writer.py")
    assert not _path_exists("src/ruizn/shell/cli/main.py")
    assert _path_exists("hooks/deny_src.py")  # a person's file in an example
