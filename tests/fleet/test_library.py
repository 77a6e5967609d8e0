"""The fleet is a library: it returns reports and raises typed errors, and never prints or
ends the process. Printing, progress bars and exit codes are the CLI's
(cli/fleet_printer.py), so a program can run a batch, a worker or a submit and read
what happened."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ruizn.fleet

FLEET = Path(ruizn.fleet.__file__).parent

# Calls that print or end the process: `print(...)`, `sys.exit(...)`, `os._exit(...)`...
_CALLS = {"print", "exit", "quit", "breakpoint", "input"}
_ATTRIBUTES = {
    ("sys", "exit"),
    ("sys", "stdout"),
    ("sys", "stderr"),
    ("sys", "__stdout__"),
    ("sys", "__stderr__"),
    ("os", "_exit"),
    ("os", "abort"),
}


def violations(source: str) -> list[str]:
    """What in `source` prints, exits, or speaks click: one line each, with its line number."""
    tree = ast.parse(source)
    caught: set[int] = set()  # `except SystemExit` catches it (a plug-in's import may raise it)
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            caught.update(id(n) for n in ast.walk(node.type))
    found = []
    for node in ast.walk(tree):
        where = getattr(node, "lineno", 0)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _CALLS
        ):
            found.append(f"{where}: {node.func.id}()")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in _ATTRIBUTES:
                found.append(f"{where}: {node.value.id}.{node.attr}")
            if node.value.id == "click":
                found.append(f"{where}: click.{node.attr}")
        if isinstance(node, ast.Name) and id(node) not in caught:
            if node.id in {"SystemExit", "KeyboardInterrupt"}:
                found.append(f"{where}: {node.id}")
            if node.id.startswith("EXIT_"):
                found.append(f"{where}: {node.id} (an exit code)")
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names]
            module = node.module if isinstance(node, ast.ImportFrom) else None
            for name in [module, *names] if module else names:
                if name and (
                    name == "click"
                    or name.startswith("click.")
                    or name.startswith("ruizn.cli")
                    or name in {"rich", "tqdm"}
                ):
                    found.append(f"{where}: import {name}")
    return found


@pytest.mark.parametrize("path", sorted(FLEET.glob("*.py")), ids=lambda p: p.name)
def test_the_fleet_never_prints_or_exits(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "print('x')",
        "import sys\nsys.exit(2)",
        "import sys\nsys.stderr.write('x')",
        "import sys\nprint('x', file=sys.stderr)",
        "import os\nos._exit(130)",
        "raise SystemExit(2)",
        "import click\nclick.echo('x')",
        "from click import echo",
        "from ruizn.cli.exits import fail",
        "def f():\n    from ruizn.cli.exits import EXIT_ERROR\n    return EXIT_ERROR",
        "exit(1)",
        "raise KeyboardInterrupt",
    ],
)
def test_the_walk_finds_what_it_forbids(source: str) -> None:
    assert violations(source)


def test_catching_systemexit_is_no_exit() -> None:
    # driver.py catches what a broken plug-in module raises at import, SystemExit included.
    assert violations("try:\n    pass\nexcept (Exception, SystemExit):\n    pass") == []


def test_the_fleet_modules_are_all_walked() -> None:
    names = {p.name for p in FLEET.glob("*.py")}
    assert {"batch.py", "worker.py", "app.py", "errors.py", "reports.py"} <= names
