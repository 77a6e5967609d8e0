"""A throw-away PostgreSQL server from the distribution's binaries (tests and bench)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.fakeapi import free_port

PG_BIN = Path("/usr/lib/postgresql")


class NoPostgres(Exception):
    """The binaries are absent or cannot be run here; the message says why."""


def pg_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(PG_BIN.glob("*/bin/pg_ctl")) if PG_BIN.is_dir() else []
    return versions[-1].parent if versions else None


def _as_postgres() -> list[str]:
    # Postgres refuses to run as root: the server runs as the distribution's user.
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """initdb + pg_ctl in a temp dir on 127.0.0.1 and a free port; yields a database URL."""
    bindir = pg_bindir()
    if bindir is None:
        raise NoPostgres(
            "PostgreSQL binaries (initdb, pg_ctl) are absent: apt-get install postgresql"
        )
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        raise NoPostgres("running as root without runuser: cannot start Postgres as another user")
    tmp = Path(tempfile.mkdtemp(prefix="ruizn-pg-"))
    data = tmp / "data"
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres")
    port = free_port()
    run = _as_postgres()
    try:
        subprocess.run(
            [
                *run,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "ruizn",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *run,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(tmp / "server.log"),
                "-o",
                f"-h 127.0.0.1 -p {port} -k {tmp} -c fsync=off",
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "ruizn", "fleet"],
            check=True,
            capture_output=True,
        )
        yield f"postgresql://ruizn@127.0.0.1:{port}/fleet"
    finally:
        subprocess.run(
            [*run, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)
