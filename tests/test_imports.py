"""Imports run one way, checked over the source tree (every import, lazy ones included):

- nothing outside the CLI (`ruizn.cli`, and `python -m ruizn`) imports the CLI;
- nothing inside the package imports its face (`ruizn` itself): the face imports them;
- the layers go down only: the CLI -> fleet -> rerun -> the builder (`ruizn.Agent`) ->
  the runner -> effects -> core (the modules at the top, and the pure projections of the
  feature packages: cassette's recording/fork/diff, view's timeline/spans);
- there is no cycle among the modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ruizn

SRC = Path(ruizn.__file__).parent
CLI_ENTRY = {"ruizn.__main__"}
# Lower number, lower layer: a module may import its own layer and the ones below.
# The longest prefix that matches a module names its layer; the rest is the core (0).
LAYERS = {
    "ruizn.cli": 6,
    "ruizn.fleet": 5,
    "ruizn.cassette.rerun": 4,
    "ruizn.shell.agent": 3,
    "ruizn.shell": 2,
    "ruizn.effects": 1,
    "ruizn.cassette.model": 1,
    "ruizn.cassette.hooks": 1,
    "ruizn.view.page": 1,
}
CORE_LAYER = 0


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every ruizn module `path` imports, wherever the import statement is."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m == "ruizn" or m.startswith("ruizn.")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {m for m in _imports(path) if m in modules and m != name}
    return graph


def _layer(module: str) -> int:
    matches = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    return LAYERS[max(matches, key=len)] if matches else CORE_LAYER


def test_only_the_cli_imports_the_cli() -> None:
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if target.startswith("ruizn.cli")
        and not module.startswith("ruizn.cli")
        and module not in CLI_ENTRY
    )
    assert not offenders


def test_nothing_inside_the_package_imports_its_face() -> None:
    offenders = sorted(
        module
        for path in SRC.rglob("*.py")
        if (module := _module_name(path)) != "ruizn" and "ruizn" in _imports(path)
    )
    assert not offenders


def test_imports_go_down_the_layers() -> None:
    offenders = sorted(
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _graph().items()
        for target in targets
        if module != "ruizn" and module not in CLI_ENTRY and _layer(target) > _layer(module)
    )
    assert not offenders


def test_there_is_no_import_cycle() -> None:
    graph = _graph()
    graph.pop("ruizn", None)  # the face imports everything lazily, and nothing imports it
    for targets in graph.values():
        targets.discard("ruizn")
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
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_the_checks_see_lazy_imports() -> None:
    # `ruizn.cli.run_cmd` imports the session inside its command: the graph must see it.
    assert "ruizn.cli.live" in _graph()["ruizn.cli.run_cmd"]
