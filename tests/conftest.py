"""Shared test options: `pytest --update-goldens` re-blesses the expected files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN_PACKAGE = Path(__file__).parent / "plugin_pkg"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite the expected outputs of the golden tests (review the git diff after)",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/plugin_pkg really installed (built by pip, entry points and all) into a folder
    of its own. Put the folder on sys.path or PYTHONPATH and importlib.metadata finds it;
    the test venv itself is left as it was."""
    target = tmp_path_factory.mktemp("plugins")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    done = subprocess.run(
        [*pip, "--target", str(target), str(PLUGIN_PACKAGE)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip could not install the test plug-in:\n{done.stderr}"
    return target


@pytest.fixture(autouse=True, scope="session")
def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The trust record (which runs this user's ruizn started) of the whole test session in
    a folder of its own, for every ruizn the tests start: never the user's real one."""
    import os

    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))


PRECIOUS = "the user's own file\n"


@pytest.fixture
def precious(tmp_path: Path) -> Path:
    """A file of the user's outside every run folder, for a planted link or hard link to
    point at: nothing ruizn does may change it (it must still read PRECIOUS)."""
    path = tmp_path / "precious.txt"
    path.write_text(PRECIOUS)
    return path
