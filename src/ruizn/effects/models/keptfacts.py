"""The Models API's answers about models, kept in the user's state directory so that a run
need not ask again before its first request (`ruizn.modelfacts.reusable` decides when a kept
answer stands in).

One small JSON file per API endpoint and key: its name is a digest of the base URL and of a
digest of the key, and it holds the models' facts and when each was asked, never the key.
What is read back is data, never authority: a file that does not parse, or whose entries do
not hold the facts of the model they are filed under, is ignored (the model is asked again),
and nothing in it can grant anything (the facts only narrow what a run may choose; the
Messages API refuses what a model cannot do anyway). Never fatal: a folder that cannot be
written is a lookup not kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

import orjson
from attrs import frozen

from ruizn.modelfacts import ModelFacts
from ruizn.serde import converter

__all__ = ["FactsFile", "KeptFacts", "KeptFactsStore"]

FOLDER = "model-facts"
VERSION = 1
# A file grows by one entry per model a key runs; far above any real count, it starts over.
MAX_MODELS = 500
MAX_BYTES = 1_000_000


@frozen(kw_only=True)
class KeptFacts:
    """An earlier answer about a model: its facts (None: the API did not know it), and when
    it was asked (seconds since the epoch)."""

    facts: ModelFacts | None
    asked_at: float


class KeptFactsStore(Protocol):
    def read(self, base_url: str, key_digest: str, model: str) -> KeptFacts | None: ...

    def write(self, base_url: str, key_digest: str, model: str, kept: KeptFacts) -> None: ...


class FactsFile:
    """The kept answers under `state/model-facts/`, one file per endpoint and key."""

    def __init__(self, state: Path) -> None:
        self._folder = state / FOLDER

    def read(self, base_url: str, key_digest: str, model: str) -> KeptFacts | None:
        return _entry(self._models(self._path(base_url, key_digest)), model)

    def write(self, base_url: str, key_digest: str, model: str, kept: KeptFacts) -> None:
        path = self._path(base_url, key_digest)
        models = self._models(path)
        if len(models) >= MAX_MODELS:
            models = {}
        models[model] = {
            "asked_at": kept.asked_at,
            "facts": None if kept.facts is None else converter.unstructure(kept.facts),
        }
        blob = orjson.dumps({"v": VERSION, "models": models})
        # Best effort, never half a file: a new file renamed over the old one. Two runs
        # writing at once lose one entry, asked again by the next run.
        with contextlib.suppress(OSError):
            self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=self._folder, prefix=".facts-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(blob)
                os.replace(name, path)
            except OSError:
                os.unlink(name)
                raise

    def _path(self, base_url: str, key_digest: str) -> Path:
        name = hashlib.sha256(f"{base_url}\n{key_digest}".encode()).hexdigest()[:32]
        return self._folder / f"{name}.json"

    @staticmethod
    def _models(path: Path) -> dict[str, Any]:
        """The file's entries as they are (each checked when read), or none at all."""
        try:
            with path.open("rb") as file:
                blob = file.read(MAX_BYTES + 1)
            data = orjson.loads(blob) if len(blob) <= MAX_BYTES else None
        except (OSError, orjson.JSONDecodeError):
            return {}
        if not isinstance(data, dict) or data.get("v") != VERSION:
            return {}
        models = data.get("models")
        return dict(models) if isinstance(models, dict) else {}


def _entry(models: dict[str, Any], model: str) -> KeptFacts | None:
    entry = models.get(model)
    if not isinstance(entry, dict):
        return None
    asked_at, facts = entry.get("asked_at"), entry.get("facts")
    if isinstance(asked_at, bool) or not isinstance(asked_at, int | float):
        return None
    if facts is None:
        return KeptFacts(facts=None, asked_at=float(asked_at))
    try:
        known = converter.structure(facts, ModelFacts)
    except Exception:  # cattrs raises several types; all mean "not facts"
        return None
    return KeptFacts(facts=known, asked_at=float(asked_at))
