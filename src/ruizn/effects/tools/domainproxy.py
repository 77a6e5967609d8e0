"""The domain allowlist's proxy, bridged into the run's network namespace
(`--shell-allow-domain`; docs/shell.md, "A domain allowlist").

- The proxy (proxyd.py: proxy.py with the allowlist's plugin) runs outside the sandbox, in
  ruizn's network, listening on a Unix socket in a private folder (0700) of ruizn's.
- A forwarder, socat (Debian's `socat`), runs in the run's own network namespace (entered
  as a command's is, by the reaper) and listens on 127.0.0.1:PROXY_PORT there: each
  connection a command makes to it is passed to the proxy's socket. Nothing else of the
  host's network is reachable from the namespace.
- Both run below ruizn's reaper (reaper.py), so neither outlives the run or ruizn, with
  every process below them.
- Commands get HTTP_PROXY, HTTPS_PROXY, ALL_PROXY (and the lower-case names) pointing at
  it, and NO_PROXY for the loopback, where the run's own background servers answer.

Fail closed: before the first command, `self_test` connects from inside the namespace,
asks the proxy for a name the list does not hold, and must read the proxy's own refusal;
anything else (no socat, no proxy, no answer, another answer) is SandboxUnavailable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from ruizn.domains import REFUSED, probe_host
from ruizn.effects.tools.bwrap import SandboxUnavailable
from ruizn.effects.tools.lifetime import dying_with

__all__ = ["PROXY_PORT", "DomainProxy"]

# The forwarder's port in the run's own network namespace (squid's usual one): free there,
# since the proxy starts before any command.
PROXY_PORT = 3128
_START_SECONDS = 10.0
_REAPER = Path(__file__).with_name("reaper.py")
_PROXYD = "import sys; from ruizn.effects.tools.proxyd import main; sys.exit(main(sys.argv))"
# No CPU or memory limit for the proxy (it lives as long as the run), no process cgroup.
_UNLIMITED = (str(10**9), str(1 << 40), "0")
# Run inside the namespace: ask the proxy for a refused name; print its first line and
# whether its body is the allowlist's refusal.
_PROBE = """
import socket, sys, time
port, host, marker = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode()
ask = b"CONNECT %s:443 HTTP/1.1\\r\\nHost: %s:443\\r\\n\\r\\n" % (host, host)
end = time.monotonic() + float(sys.argv[4])
said, why = b"", ""
while not said and time.monotonic() < end:  # until the forwarder and the proxy listen
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(ask)
            while len(said) < 4096:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                said += chunk
    except OSError as exc:
        why = "no answer on 127.0.0.1:%d: %s" % (port, exc)
    if not said:
        time.sleep(0.05)
if not said:
    print(why or "the connection closed with no answer"); sys.exit(1)
line = said.split(b"\\r\\n", 1)[0].decode("ascii", "replace")
print(line if marker in said else "an answer that is not the allowlist's: " + line)
"""


class DomainProxy:
    """The proxy and its forwarder for one run; `close()` ends both."""

    def __init__(
        self, patterns: tuple[str, ...], netns: tuple[int, int], environ: Mapping[str, str]
    ) -> None:
        self.patterns = patterns
        self._netns = netns
        self._environ = dict(environ)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._folder = Path(tempfile.mkdtemp(prefix="ruizn-proxy-"))
        self._socket = self._folder / "proxy.sock"
        self._log = self._folder / "proxy.log"

    @classmethod
    def start(
        cls, patterns: tuple[str, ...], netns: tuple[int, int], environ: Mapping[str, str]
    ) -> DomainProxy:
        """The proxy started and proved to refuse from inside the namespace (self_test)."""
        proxy = cls(patterns, netns, environ)
        try:
            proxy._start()
            proxy.self_test()
        except BaseException:
            proxy.close()
            raise
        return proxy

    def environment(self) -> dict[str, str]:
        """What commands get, so the tools that honour it go through the proxy."""
        url = f"http://127.0.0.1:{PROXY_PORT}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
        found = {name: url for name in names} | {name.lower(): url for name in names}
        loopback = "localhost,127.0.0.1,::1"
        return found | {"NO_PROXY": loopback, "no_proxy": loopback}

    def _start(self) -> None:
        socat = shutil.which("socat", path=self._environ.get("PATH", os.defpath))
        if socat is None:
            raise SandboxUnavailable(
                "--shell-allow-domain needs socat, to bridge the proxy into the sandbox's"
                " network: install it (apt-get install socat)"
            )
        with open(self._log, "wb") as log:
            self._spawn(
                [sys.executable, "-I", "-c", _PROXYD, str(self._socket), *self.patterns],
                stderr=log,
            )
        end = time.monotonic() + _START_SECONDS
        while not self._socket.exists():
            if self._procs[0].poll() is not None or time.monotonic() > end:
                raise SandboxUnavailable(f"the shell's domain proxy did not start: {self._said()}")
            time.sleep(0.02)
        listen = f"TCP-LISTEN:{PROXY_PORT},bind=127.0.0.1,reuseaddr,fork"
        self._spawn([socat, listen, f"UNIX-CONNECT:{self._socket}"], inside=True)

    def self_test(self) -> None:
        """Prove, from inside the run's network namespace, that the proxy answers and
        refuses a name not on the list; SandboxUnavailable (one line, why) if not."""
        host = probe_host(self.patterns)
        if host is None:
            raise SandboxUnavailable(
                "the shell's domain proxy cannot be tested: the allowlist lets every name through"
            )
        argv = [sys.executable, "-I", "-S", "-c", _PROBE, str(PROXY_PORT), host]
        done = self._run([*argv, REFUSED, str(_START_SECONDS)])
        if not done.startswith("HTTP/1.1 403"):
            raise SandboxUnavailable(
                "the shell's domain proxy failed its self-test (from inside the sandbox's"
                f" network, a name not on the list was not refused by it): {done}"
            )

    def close(self) -> None:
        """End the proxy and its forwarder (and all below them), and remove the folder."""
        for proc in self._procs:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []
        shutil.rmtree(self._folder, ignore_errors=True)

    def _reaped(self, argv: list[str], *, inside: bool) -> tuple[list[str], tuple[int, ...]]:
        """`argv` below the reaper, in the run's namespaces when `inside`."""
        fds = self._netns if inside else ()
        where = ",".join(map(str, fds)) if fds else "-"
        reaper = [sys.executable, "-I", "-S", str(_REAPER), str(os.getpid()), *_UNLIMITED]
        return [*reaper, where, *argv], fds

    def _spawn(
        self, argv: list[str], *, inside: bool = False, stderr: IO[bytes] | None = None
    ) -> None:
        command, fds = self._reaped(argv, inside=inside)
        self._procs.append(
            subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr if stderr is not None else subprocess.DEVNULL,
                env=self._environ,
                start_new_session=True,
                pass_fds=fds,
                preexec_fn=dying_with(os.getpid()),  # noqa: PLW1509 (as bash.py's)
            )
        )

    def _run(self, argv: list[str]) -> str:
        """What `argv` printed, run inside the namespace (its first line)."""
        command, fds = self._reaped(argv, inside=True)
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=self._environ,
                pass_fds=fds,
                timeout=_START_SECONDS + 5,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the test could not run: {exc}"
        out = (
            done.stdout.decode("utf-8", "replace").strip()
            or done.stderr.decode("utf-8", "replace").strip()
        )
        return " ".join(out.split())[:300] or f"no answer (exit status {done.returncode})"

    def _said(self) -> str:
        try:
            text = self._log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        lines = [line for line in text.splitlines() if line.strip()]
        return " ".join(lines[-1].split())[:300] if lines else "it printed nothing"
