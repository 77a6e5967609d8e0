"""Who queued a fleet run: an HMAC over what was queued, with the operator's own key.

A fleet's database is authority only where its operator put it. Anyone who can write to a
database (a file that came with a cloned repository, a shared Postgres) can queue a
workflow in it, and a queued run carries everything that runs code: tool modules, MCP
commands, a workspace, an approval mode. So every run ruizn queues (`batch`, `submit`,
`resume --db`) carries `signature`, an HMAC-SHA256 over the rest of its input as canonical
JSON, keyed with a secret kept in the user's state directory (`fleet.key`, 32 random bytes,
created 0600 on first use, never inside a workspace). A worker or batch runs only inputs
its own key signed; any other is refused before anything is imported or started, unless
its operator passed `--trust` (the grant is shown first). Each result a worker returns is
signed too, over the input's signature and the result, so a batch believes only results of
what it queued, never a row that merely has the run's id.

A fleet on several machines shares one key: copy `fleet.key` into each worker's state
directory (or point `$RUIZN_STATE_DIR` at a folder holding it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruizn.effects.userconfig.dirs import state_dir

KEY_FILE = "fleet.key"
SIGNATURE = "signature"
PROOF = "proof"


class FleetKeyError(RuntimeError):
    """The key cannot be read or made; the message is one line saying where and why."""


def canonical(payload: Mapping[str, Any]) -> bytes:
    """The bytes signed: the payload as JSON with sorted keys, whatever order or container
    (tuple, list) it came in, so a round trip through the database signs the same."""
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


class FleetKey:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def of_user(cls, environ: Mapping[str, str]) -> FleetKey:
        """The user's key, made (0600, in a 0700 folder) the first time it is needed."""
        folder = state_dir(environ)
        path = folder / KEY_FILE
        try:
            return cls(_read_or_make(folder, path))
        except OSError as exc:
            raise FleetKeyError(
                f"cannot read or create the fleet key {path}: {exc.strerror or exc}"
            ) from None

    def mac(self, payload: Mapping[str, Any]) -> str:
        return hmac.new(self._secret, canonical(payload), hashlib.sha256).hexdigest()

    def digest(self, data: bytes) -> str:
        """A keyed digest of `data` (run ids a stranger cannot predict)."""
        return hmac.new(self._secret, b"run-id\0" + data, hashlib.sha256).hexdigest()

    def signed(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """`payload` with its signature."""
        body = {k: v for k, v in payload.items() if k != SIGNATURE}
        return {**body, SIGNATURE: self.mac(body)}

    def verify(self, payload: Mapping[str, Any]) -> bool:
        """Whether this key signed `payload` (a payload with no signature is not signed)."""
        signature = payload.get(SIGNATURE)
        if not isinstance(signature, str):
            return False
        body = {k: v for k, v in payload.items() if k != SIGNATURE}
        try:
            expected = self.mac(body)
        except (TypeError, ValueError):
            return False
        return hmac.compare_digest(signature, expected)

    def prove(self, signature: str, result: Mapping[str, Any]) -> dict[str, Any]:
        """A worker's result with its proof: the result belongs to the input so signed."""
        body = {k: v for k, v in result.items() if k != PROOF}
        return {**body, PROOF: self.mac({"input": signature, "result": body})}

    def proven(self, signature: str, result: Mapping[str, Any]) -> bool:
        proof = result.get(PROOF)
        if not isinstance(proof, str):
            return False
        body = {k: v for k, v in result.items() if k != PROOF}
        try:
            expected = self.mac({"input": signature, "result": body})
        except (TypeError, ValueError):
            return False
        return hmac.compare_digest(proof, expected)


def _read_or_make(folder: Path, path: Path) -> bytes:
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = secrets.token_bytes(32)
    # Written whole under a private name, then linked into place: another ruizn making the
    # key at the same moment finds either no key or a whole one, and both use the winner's.
    tmp = folder / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secret.hex().encode())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return _read(path)
    finally:
        tmp.unlink(missing_ok=True)
    return secret


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        text = f.read(4096).strip()
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise OSError(f"{path} is not a ruizn fleet key") from None
    if len(secret) < 16:
        raise OSError(f"{path} is too short to be a fleet key")
    return secret
