"""The user's ruizn folders outside every workspace: the state folder (the trust record,
batch databases, the fleet key, `ruizn runs`' cache).

Only `os` at import: `ruizn runs` finds its cache here at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["state_dir", "state_folder"]


def state_folder(environ: Mapping[str, str]) -> str:
    """`$RUIZN_STATE_DIR`, else `$XDG_STATE_HOME/ruizn`, else `~/.local/state/ruizn`."""
    if environ.get("RUIZN_STATE_DIR"):
        return environ["RUIZN_STATE_DIR"]
    if environ.get("XDG_STATE_HOME"):
        return os.path.join(environ["XDG_STATE_HOME"], "ruizn")
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".local", "state", "ruizn")


def state_dir(environ: Mapping[str, str]) -> Path:
    """The user's ruizn state folder (never inside a workspace), as a Path."""
    from pathlib import Path

    return Path(state_folder(environ))
