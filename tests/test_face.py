"""The face: `ruizn.__all__` is what a library user touches, stated once in __init__.py and
once for type checkers in __init__.pyi; the two agree, and every name resolves."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ruizn
from ruizn.events import EVENT_TYPES

STUB = Path(ruizn.__file__).with_suffix(".pyi")


def _stub_names() -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.parse(STUB.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                found[alias.asname or alias.name] = node.module or ""
    return found


def test_the_face_and_the_stub_name_the_same_things_from_the_same_modules() -> None:
    stub = _stub_names()
    assert sorted(ruizn.__all__) == sorted(stub)
    # In a fresh interpreter: other tests may drop ruizn's modules from sys.modules.
    code = (
        "import importlib, json, sys, ruizn\n"
        "stub = json.loads(sys.argv[1])\n"
        "print([n for n in ruizn.__all__"
        " if getattr(ruizn, n) is not getattr(importlib.import_module(stub[n]), n)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(stub)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"


def test_every_event_agent_stream_yields_is_public() -> None:
    assert {t.__name__ for t in EVENT_TYPES} <= set(ruizn.__all__)
    for name in ("Agent", "tool", "RunResult", "Provider", "Approver", "Event"):
        assert name in ruizn.__all__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        ruizn.NoSuchThing  # noqa: B018


def test_importing_the_face_reads_no_file_and_loads_no_sdk() -> None:
    code = (
        "import sys, builtins; opened = []; real = builtins.open\n"
        "builtins.open = lambda *a, **k: (opened.append(a[0]), real(*a, **k))[1]\n"
        "import ruizn; print(opened, sorted(m for m in ('anyio', 'anthropic', 'pydantic')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[] []"
