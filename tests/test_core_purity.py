"""The core does no I/O: it imports nothing that could, and nothing from the outer layers.

The layers are the folders (tests/test_imports.py): core, effects, shell, the features, cli.
The core modules (the pure functions and the records they work on) may import only the
standard library's pure parts, attrs/cattrs and each other. The core is found by walking the
tree, so a new module cannot escape the check: every module at the top of src/ruizn/ (but the
face and `__main__`). The pure projections that stay in a feature package (cassette/, view/)
are held to the same rule: every module there that is not named in NOT_CORE with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ruizn
from tests.conftest import run_python

SRC = Path(ruizn.__file__).parent
PACKAGE = "ruizn"
# The entry points at the top of src/ruizn/: the face (it imports the public names lazily)
# and `python -m ruizn`. Every other module at the top is core, found by walking the folder.
ENTRY_POINTS = {"__init__", "__main__"}
# Feature packages hold pure projections beside the parts that drive runs or read files;
# every module in them is held to the core's rule unless it is named here, with its reason.
FEATURE_PACKAGES = ("cassette", "view", "evals")
NOT_CORE: dict[str, str] = {
    "cassette.model": "the recording as a model: a Provider, which yields under anyio",
    "cassette.hooks": "the recording's hook answers: a HookExecutor (effects.hooks), async",
    "cassette.rerun": "re-drives a recording: it builds and drives runs through ruizn.Agent",
    "view.page": "the page: it reads its HTML, CSS and JS assets from the package",
    "evals.api": "ruizn.eval: runs an eval under anyio, writes its report",
    "evals.dataset": "reads a dataset file, checks its fixture folders exist",
    "evals.fleetrun": "runs an eval's runs as a fleet batch, writes its goals file",
    "evals.recordings": "reads the first event of each recorded log in a folder",
    "evals.rescore": "replays saved runs' logs",
    "evals.runner": "builds and drives runs through ruizn.Agent, copies fixtures",
    "evals.scoring": "digests a workspace's files, imports a Function scorer's module",
}


def _core_modules() -> tuple[str, ...]:
    top = {p.stem for p in SRC.glob("*.py")} - ENTRY_POINTS
    features = {
        f"{package}.{p.stem}"
        for package in FEATURE_PACKAGES
        for p in (SRC / package).glob("*.py")
        if p.stem != "__init__"
    }
    return tuple(sorted(top | (features - set(NOT_CORE))))


CORE = _core_modules()
FORBIDDEN = frozenset(
    {
        # I/O, clocks, randomness, concurrency
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
        "importlib",
        # a price database: costs reach the core only as data (llm_response.cost)
        "genai_prices",
        # the outer layers
        "ruizn.effects",
        "ruizn.shell",
        "ruizn.fleet",
        "ruizn.cli",
    }
)
# Builtins that do I/O or load code at run time.
FORBIDDEN_CALLS = frozenset({"open", "print", "input", "exec", "eval", "compile", "__import__"})


def imported_names(source: str, module: str) -> set[str]:
    """Every module `source` (the module `ruizn.<module>`) imports, as absolute dotted names.
    `from X import y` counts as importing X and X.y (y may be a submodule)."""
    package = f"{PACKAGE}.{module}".split(".")[:-1]  # the package the module is in
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                base = [*base, *(node.module.split(".") if node.module else [])]
                source_module = ".".join(base)
            else:
                source_module = node.module or ""
            names.add(source_module)
            names.update(f"{source_module}.{alias.name}" for alias in node.names)
    return names


def forbidden_imports(names: set[str]) -> set[str]:
    """The names that are, or are inside, a forbidden module or package."""
    return {
        name
        for name in names
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)
    }


def forbidden_calls(source: str) -> set[str]:
    return {
        node.func.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in FORBIDDEN_CALLS
    }


def test_the_core_is_what_the_folder_shows() -> None:
    # The rule a newcomer sees in the tree: the modules at the top of src/ruizn/ are the core.
    assert {"state", "reducers", "decide", "events", "serde", "settings"} <= set(CORE)
    gone = set(NOT_CORE) - {
        f"{package}.{p.stem}" for package in FEATURE_PACKAGES for p in (SRC / package).glob("*.py")
    }
    assert not gone, f"{sorted(gone)} no longer exist: remove them from NOT_CORE"


@pytest.mark.parametrize("module", CORE)
def test_a_core_module_imports_no_io_library_and_no_outer_layer(module: str) -> None:
    source = (SRC / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8")
    bad = forbidden_imports(imported_names(source, module))
    assert not bad, f"ruizn.{module} imports {sorted(bad)}: the core must stay pure"


@pytest.mark.parametrize("module", CORE)
def test_a_core_module_calls_no_io_builtin(module: str) -> None:
    source = (SRC / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8")
    assert not forbidden_calls(source), f"ruizn.{module} calls {sorted(forbidden_calls(source))}"


def test_the_import_check_sees_every_spelling_of_an_import() -> None:
    cases = {
        "import os": {"os"},
        "import os.path as p": {"os.path"},
        "from os import path": {"os.path"},
        "import datetime": {"datetime"},
        "from ruizn import effects": {"ruizn.effects"},
        "from ruizn.effects.models.provider import Provider": {"ruizn.effects.models.provider"},
        "from . import shell": {"ruizn.shell"},
        "from .effects import bus": {"ruizn.effects", "ruizn.effects.bus"},
        "from .shell.runner import AgentRunner": {"ruizn.shell.runner"},
        "def f():\n    import time": {"time"},
        "try:\n    import anyio\nexcept ImportError:\n    pass": {"anyio"},
    }
    for source, expected in cases.items():
        assert expected <= forbidden_imports(imported_names(source, "state")), source
    allowed = "import json\nfrom attrs import frozen\nfrom .state import Usage\nimport ruizn.events"
    assert forbidden_imports(imported_names(allowed, "serde")) == set()
    assert imported_names("from .state import Usage", "serde") >= {"ruizn.state"}
    assert forbidden_calls("x = open('f')\nprint(x)") == {"open", "print"}


def test_effects_do_not_import_the_shell() -> None:
    for path in sorted((SRC / "effects").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        names = imported_names(path.read_text(encoding="utf-8"), module)
        shell = {n for n in names if n == "ruizn.shell" or n.startswith("ruizn.shell.")}
        assert not shell, f"ruizn.{module} imports {sorted(shell)}: imports run shell -> effects"


def test_importing_the_core_loads_no_io_library() -> None:
    modules = ", ".join(f"ruizn.{m}" for m in CORE)
    code = (
        f"import sys, {modules}\n"
        "print(sorted(m for m in ('anyio', 'anthropic', 'click', 'httpx', 'httpx2')"
        " if m in sys.modules))"
    )
    out = run_python("-c", code, check=True)
    assert out.stdout.strip() == "[]", f"importing the core loaded {out.stdout.strip()}"
