"""Real MCP servers for the tests (scripts run as processes of their own), and how to start
the demo server over Streamable HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["DEMO", "SERVERS", "start_http_demo", "stop_http_demo"]

SERVERS = Path(__file__).resolve().parent
DEMO = SERVERS / "demo.py"


def start_http_demo(port: int) -> subprocess.Popen[bytes]:
    """The demo server over Streamable HTTP on 127.0.0.1, as a process of its own."""
    proc = subprocess.Popen(
        [sys.executable, str(DEMO), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for_port(port, proc)
    return proc


def stop_http_demo(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP demo server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            time.sleep(0.05)
        else:
            return
    raise RuntimeError("the HTTP demo server did not open its port")
