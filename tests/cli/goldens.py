"""Compare a produced text with a golden file; `pytest --update-goldens` rewrites it."""

from __future__ import annotations

import difflib
from pathlib import Path

GOLDEN_CLI = Path(__file__).resolve().parents[1] / "golden" / "cli"


def check_golden(name: str, actual: str, *, update: bool) -> None:
    path = GOLDEN_CLI / name
    if update or not path.exists():
        if not update:
            raise AssertionError(f"golden {path} is missing: run pytest --update-goldens")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
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
        raise AssertionError(f"output differs from golden {path.name}:\n{diff}")
