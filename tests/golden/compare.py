"""Compare a produced text with a golden file; `pytest --update-goldens` rewrites it."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest


def check_golden(path: Path, actual: str, *, update: bool) -> None:
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"golden {path} is missing: run pytest --update-goldens and review it")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=str(path),
                tofile="actual",
            )
        )
        pytest.fail(f"{path.name} differs (re-bless with --update-goldens):\n{diff}")
