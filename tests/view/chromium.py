"""Debian's headless Chromium, as the view tests and bench/view_load.py drive it.

Flags: the sandbox needs user namespaces CI may not have; the network is closed here, so
every background connection (QUIC, component updates, sync, first-run) is off or Chromium
waits on it; each call gets a fresh profile so nothing carries over between pages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def need_chromium() -> str:
    """The browser, or a skip when it is missing outside CI. In CI (.ci/run installs
    Debian's chromium) a missing browser fails: a page test must never pass unrun there."""
    found = chromium_path()
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed, and CI must run the page tests (.ci/run)")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium); CI runs these")


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    browser = need_chromium()
    with tempfile.TemporaryDirectory(prefix="ruizn-chromium-") as profile:
        return subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "HOME": profile},
        )


def dump_dom(page: Path, *, timeout: float = 60) -> str:
    """The DOM after the page's scripts ran, serialised."""
    done = _run(["--dump-dom", page.resolve().as_uri()], timeout)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode("utf-8")


def screenshot(
    page: Path, out: Path, *, size: tuple[int, int] = (1400, 860), timeout: float = 60
) -> Path:
    done = _run(
        [f"--screenshot={out}", f"--window-size={size[0]},{size[1]}", page.resolve().as_uri()],
        timeout,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    assert out.is_file(), done.stderr.decode(errors="replace")[-2000:]
    return out
