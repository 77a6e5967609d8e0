"""What the whole suite shares: `pytest --update-goldens`, the fixtures of the tests that
drive the CLI in several folders (a workspace, the local API server), and `run_python` for
a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakeapi import FakeAnthropic, free_port
from tests.mcp_servers import start_http_demo, stop_http_demo

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


def run_python(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in a fresh interpreter (this one's executable), its output captured as
    text: for what only a new process shows (what an import loads, start-up time)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# Demo\n\nA small demo project.\n", encoding="utf-8")
    return ws


@pytest.fixture
def server_factory() -> Iterator[Any]:
    """Starts local Messages API servers (tests/fakeapi) from scripts; stops them after."""
    started: list[FakeAnthropic] = []

    def make(script: Any) -> FakeAnthropic:
        server = FakeAnthropic(script).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def http_demo() -> Iterator[str]:
    """The URL of tests/mcp_servers/demo.py serving Streamable HTTP on 127.0.0.1."""
    port = free_port()
    proc = start_http_demo(port)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_http_demo(proc)


@pytest.fixture(scope="session")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/plugin_pkg really installed (built by pip, entry points and all) into a folder
    of its own. Put the folder on sys.path or PYTHONPATH and importlib.metadata finds it;
    the test venv itself is left as it was."""
    target = tmp_path_factory.mktemp("plugins")
    pip = ("-m", "pip", "install", "--quiet", "--no-deps")
    done = run_python(*pip, "--target", str(target), str(PLUGIN_PACKAGE), timeout=600)
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


@pytest.fixture(autouse=True, scope="session")
def _no_bubblewrap_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite leaves no bubblewrap running: at the end of the session, no `bwrap` whose
    command line names this session's temporary folder (where every test's workspace is, so
    only the ones this session started) may still be alive."""
    marker = str(tmp_path_factory.getbasetemp())
    yield
    deadline = time.monotonic() + 5
    while (left := _live_bwraps(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], f"bubblewrap processes this test session started still run: {left}"


def _live_bwraps(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if argv and Path(os.fsdecode(argv[0])).name == "bwrap" and state != "Z":
            line = b" ".join(argv).decode(errors="replace")
            if marker in line:
                found.append(f"{entry.name}: {line[:200]}")
    return found
