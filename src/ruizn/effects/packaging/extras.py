"""The command that installs one of ruizn's extras (`fleet`, `otel`) where ruizn is.

`pip install 'ruizn[fleet]'` is right for ruizn installed from an index, and wrong for
ruizn installed from its checkout (`pip install -e .`), where it would fetch another ruizn.
pip records how it installed a distribution (PEP 610, direct_url.json): an editable or a
local-folder install gets the command for that folder. The interpreter is named, so the
command installs into the environment ruizn runs in, whichever `pip` is first on PATH.
"""

from __future__ import annotations

import json
import shlex
import sys
from importlib import metadata
from urllib.parse import unquote, urlsplit


def install_command(extra: str) -> str:
    """The command that brings `extra` to the ruizn running now."""
    try:
        direct_url = metadata.distribution("ruizn").read_text("direct_url.json")
    except metadata.PackageNotFoundError:  # run from a source tree on sys.path
        direct_url = None
    return command_for(extra, direct_url, python=sys.executable)


def command_for(extra: str, direct_url: str | None, *, python: str) -> str:
    """The install command for `extra`, given the distribution's direct_url.json text."""
    pip = f"{shlex.quote(python)} -m pip install"
    folder = _local_folder(direct_url)
    if folder is None:
        return f"{pip} {shlex.quote(f'ruizn[{extra}]')}"
    editable = "-e " if _editable(direct_url) else ""
    return f"{pip} {editable}{shlex.quote(f'{folder}[{extra}]')}"


def _record(direct_url: str | None) -> dict[str, object]:
    if not direct_url:
        return {}
    try:
        record = json.loads(direct_url)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _local_folder(direct_url: str | None) -> str | None:
    record = _record(direct_url)
    url = record.get("url")
    if not isinstance(url, str) or "dir_info" not in record:
        return None
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    return unquote(parts.path)


def _editable(direct_url: str | None) -> bool:
    info = _record(direct_url).get("dir_info")
    return isinstance(info, dict) and info.get("editable") is True
