"""The core does no I/O: it imports nothing that could, and nothing from the outer layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ruizn

SRC = Path(ruizn.__file__).parent
CORE = {"state", "events", "serde", "reducers", "decide", "request", "format"}
# Modules directly in src/ruizn/ that are not core, each with its reason.
NOT_CORE: dict[str, str] = {
    "__main__": "the `python -m ruizn` entry point: it starts the CLI",
}
FORBIDDEN = {
    "anyio",
    "anthropic",
    "httpx",
    "httpx2",
    "click",
    "os",
    "sys",
    "io",
    "pathlib",
    "socket",
    "subprocess",
    "time",
    "datetime",
    "random",
    "uuid",
    "secrets",
    "threading",
    "asyncio",
    "shutil",
    "signal",
    "tempfile",
    "logging",
}


def _imports(module: str) -> set[str]:
    tree = ast.parse((SRC / f"{module}.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "ruizn" if node.level else ""
            names.add(f"{base}.{node.module}" if base and node.module else (node.module or base))
    return names


def test_every_top_level_module_is_classified() -> None:
    modules = {p.stem for p in SRC.glob("*.py")} - {"__init__"}
    assert modules == CORE | set(NOT_CORE), "classify new modules as core or not (with a reason)"


def test_core_modules_import_no_io_and_no_outer_layer() -> None:
    for module in sorted(CORE):
        for name in _imports(module):
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"ruizn.{module} imports {name}"
            assert not name.startswith(("ruizn.effects", "ruizn.shell")), (
                f"ruizn.{module} imports {name}: imports run shell -> effects -> core"
            )


def test_effects_do_not_import_the_shell() -> None:
    for path in (SRC / "effects").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("ruizn.shell"), f"{path.name} imports the shell"


def test_importing_the_core_loads_no_io_library() -> None:
    code = (
        "import sys, ruizn.reducers, ruizn.serde, ruizn.decide, ruizn.request, ruizn.format;"
        "print(sorted(m for m in ('anyio', 'anthropic', 'click', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
