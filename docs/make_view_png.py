"""Makes docs/view.png, the README's picture of `ruizn view`: a real run (the real CLI and
SDK against tests/fakeapi: a retried call, three tool calls side by side, a failed tool, a
call the approval policy denies, an answer), its page from `ruizn view`, drawn by Debian's
headless Chromium.

    python docs/make_view_png.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cli.conftest import ruizn_command  # noqa: E402 - after the path
from tests.fakeapi import FakeAnthropic  # noqa: E402
from tests.view.chromium import screenshot  # noqa: E402
from tests.view.demo import demo_run, demo_script, make_workspace  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ruizn-view-png-") as tmp:
        workspace = make_workspace(Path(tmp) / "demo")
        server = FakeAnthropic(demo_script()).start()
        try:
            demo_run(workspace, server)
        finally:
            server.stop()
        page = subprocess.run(
            [*ruizn_command(), "view", "last"],
            cwd=workspace,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        out = ROOT / "docs" / "view.png"
        screenshot(workspace / page, out, size=(1400, 900))
        print(out)


if __name__ == "__main__":
    main()
