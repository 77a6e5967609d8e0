"""The demo server behind a pipe that spoils its stdout, for the client's garbage handling.

It writes one line that is not JSON-RPC before the server starts, and replaces every line
the server writes that contains SWALLOW_ME with another such line, so the request it
answered never gets its answer. Only lines are copied; no MCP is spoken here.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

DEMO = Path(__file__).with_name("demo.py")


def main() -> None:
    out = sys.stdout.buffer
    out.write(b"noise: this line is not JSON-RPC\n")
    out.flush()
    child = subprocess.Popen(
        [sys.executable, str(DEMO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None
    assert child.stdout is not None
    child_in = child.stdin

    def pump_in() -> None:
        for line in sys.stdin.buffer:
            child_in.write(line)
            child_in.flush()
        child_in.close()

    threading.Thread(target=pump_in, daemon=True).start()
    for line in child.stdout:
        out.write(b"{broken json\n" if b"SWALLOW_ME" in line else line)
        out.flush()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
