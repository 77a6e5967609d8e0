"""Which runs ruizn started (or a person accepted) on this machine: the trust record.

A run's folder can arrive with any repository, tarball or shared drive, so its log is data,
never authority: ruizn acts on a run's recorded settings (its workspace, approval mode, tool
modules, MCP commands) only when this record says ruizn itself wrote that log, or when the
person at the keyboard accepts it now (`--trust`).

The record lives under the user's state directory (`$RUIZN_STATE_DIR`, else
`$XDG_STATE_HOME/ruizn`, else `~/.local/state/ruizn`), outside every workspace, so nothing
that arrives with a workspace can add to it. One small file per run, named by the SHA-256
of its run_started line as ruizn encodes it: an edited run_started (another workspace, an
`always` approval, a command) hashes to a name that is not there. Each file also says where
the log stood when ruizn last wrote it:

- `open`: a session began writing at `size` bytes, whose SHA-256 was `digest`; what follows
  may be that session's, even if it died (kill -9, a power cut) before it could say so;
- closed: the session ended with the log `size` bytes long, hashing to `digest`; a log that
  differs from that (an edited line, a line appended by someone else) is not ruizn's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from attrs import frozen

from ruizn.effects.userconfig.dirs import state_dir
from ruizn.events import RunStarted
from ruizn.serde import encode

NOT_STARTED_HERE = "was not started by ruizn on this machine"
CHANGED = "has a log that changed since ruizn last wrote it"
_CHUNK = 1 << 20


@frozen(kw_only=True)
class TrustRecord:
    run_id: str
    size: int
    digest: str
    open: bool


def run_key(first: RunStarted) -> str:
    return hashlib.sha256(encode(first).encode("utf-8")).hexdigest()


class TrustStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # Why the record could not be written (an unwritable state folder), once it failed:
        # runs still work, and are not recorded as this user's (a resume asks).
        self.failure: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TrustStore:
        return cls(state_dir(environ) / "trusted")

    def problem(self, first: RunStarted, log: Path) -> str | None:
        """Why the run is not one ruizn may act on as recorded, or None: it is."""
        record = self._read(run_key(first))
        if record is None or record.run_id != first.run_id:
            return NOT_STARTED_HERE
        try:
            size = os.stat(log).st_size
        except OSError:
            return CHANGED
        if size < record.size or (not record.open and size != record.size):
            return CHANGED
        if _digest(log, record.size) != record.digest:
            return CHANGED
        return None

    def opened(self, first: RunStarted, log: Path) -> None:
        """A session begins writing the run's log: it is trusted as it stands now."""
        self._write(first, log, open_=True)

    def closed(self, first: RunStarted, log: Path) -> None:
        """The session that wrote the log has ended: the log stands as it is now."""
        self._write(first, log, open_=False)

    def _write(self, first: RunStarted, log: Path, *, open_: bool) -> None:
        try:
            self._write_record(first, log, open_=open_)
        except OSError as exc:
            where = exc.filename or self.folder
            self.failure = f"cannot write the trust record in {where}: {exc.strerror or exc}"

    def _write_record(self, first: RunStarted, log: Path, *, open_: bool) -> None:
        size = os.stat(log).st_size
        record = {"run_id": first.run_id, "size": size, "digest": _digest(log, size)}
        record["open"] = open_
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.folder / f"{run_key(first)}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(path)

    def _read(self, key: str) -> TrustRecord | None:
        try:
            data = json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8"))
            return TrustRecord(
                run_id=str(data["run_id"]),
                size=int(data["size"]),
                digest=str(data["digest"]),
                open=bool(data["open"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _digest(path: Path, size: int) -> str:
    """SHA-256 of the first `size` bytes of `path` (a symlink is not followed)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.closing(os.fdopen(fd, "rb")) as f:
        left = size
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()
