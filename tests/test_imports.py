"""The folders are the layers, and imports go down them only.

Checked over the source tree, every import statement wherever it is: lazy ones inside a
function and type-only ones under `if TYPE_CHECKING:` count the same.

- a module imports only its own folder and the layers below it (`LAYERS`);
- no cycle between folders, even between two features on the same layer;
- no cycle among the modules;
- nothing inside the package imports its face (`ruizn`): the face imports them, lazily.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import ruizn

SRC = Path(ruizn.__file__).parent
FACE = "ruizn"
CORE = "core"  # the modules at the top of src/ruizn/
# The layers, lowest first, as folder names under src/ruizn/. A new feature package is one
# more name in the features' row.
LAYERS: tuple[tuple[str, ...], ...] = (
    (CORE,),
    ("effects",),
    ("shell",),
    ("cassette", "view", "fleet", "evals"),
    ("cli",),
)
RANK = {folder: rank for rank, row in enumerate(LAYERS) for folder in row}
# `python -m ruizn` sits at the top of the tree but is the command's entry point.
ENTRY_POINTS = {"ruizn.__main__": "cli"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, *, package: bool = False) -> set[str]:
    """Every ruizn module `source` (the module `module`) imports, wherever the statement is."""
    here = module if package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {m for m in found if m == FACE or m.startswith(FACE + ".")}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found = _imports(path.read_text(encoding="utf-8"), name, package=path.stem == "__init__")
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def _folder(module: str) -> str:
    """The folder under src/ruizn/ that holds `module`; the core for a module at the top."""
    if module in ENTRY_POINTS:
        return ENTRY_POINTS[module]
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (SRC / parts[1]).is_dir() else CORE


def _folder_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module != FACE:
            here = _folder(module)
            folders.setdefault(here, set()).update(_folder(t) for t in targets if t != FACE)
            folders[here].discard(here)
    return folders


def _cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of `graph`, as the path around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_every_folder_is_in_the_table() -> None:
    folders = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(RANK) - {CORE}


def test_imports_go_down_the_layers() -> None:
    offenders = sorted(
        f"{module} ({_folder(module)}) imports {target} ({_folder(target)})"
        for module, targets in _graph().items()
        if module != FACE
        for target in targets
        if target != FACE and RANK[_folder(target)] > RANK[_folder(module)]
    )
    assert not offenders


def test_there_is_no_cycle_between_folders() -> None:
    cycle = _cycle(_folder_graph(_graph()))
    assert cycle is None, "folder cycle: " + " -> ".join(cycle or ())


def test_there_is_no_import_cycle() -> None:
    graph = _graph()
    graph.pop(FACE, None)  # the face imports everything lazily, and nothing imports it
    for targets in graph.values():
        targets.discard(FACE)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_nothing_inside_the_package_imports_its_face_and_it_imports_no_command() -> None:
    graph = _graph()
    assert sorted(m for m, targets in graph.items() if FACE in targets) == []
    assert sorted(t for t in graph[FACE] if _folder(t) == "cli") == []


def test_the_checks_see_lazy_and_type_only_imports() -> None:
    # `ruizn.cli.run_cmd` imports the session inside its command: the graph must see it.
    assert "ruizn.cli.live" in _graph()["ruizn.cli.run_cmd"]
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ruizn.cli.main import cli\n"
        "def f():\n    from ..fleet import worker\n"
    )
    seen = _imports(source, "ruizn.effects.bus")
    assert {"ruizn.cli.main", "ruizn.fleet.worker"} <= seen
    assert RANK[_folder("ruizn.cli.main")] > RANK[_folder("ruizn.effects.bus")]
    assert _cycle({"shell": {"fleet"}, "fleet": {"shell"}}) == ["fleet", "shell", "fleet"]


def test_a_folder_is_its_layer() -> None:
    assert _folder("ruizn.state") == CORE
    assert _folder("ruizn.effects.models.provider") == "effects"
    assert _folder("ruizn.effects") == "effects"
    assert _folder("ruizn.__main__") == "cli"
