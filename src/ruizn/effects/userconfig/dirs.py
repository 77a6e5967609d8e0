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

__all__ = ["home_folder", "state_dir", "state_folder"]


def home_folder(environ: Mapping[str, str]) -> str | None:
    """The user's home: `$HOME`, else the password database's entry for this user (a
    service, cron or `env -i` may start ruizn with no HOME); None if neither says."""
    if environ.get("HOME"):
        return environ["HOME"]
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir or None
    except KeyError:  # a uid with no entry (a container's arbitrary user)
        return None


def state_folder(environ: Mapping[str, str]) -> str:
    """`$RUIZN_STATE_DIR`, else `$XDG_STATE_HOME/ruizn`, else `~/.local/state/ruizn`."""
    if environ.get("RUIZN_STATE_DIR"):
        return environ["RUIZN_STATE_DIR"]
    if environ.get("XDG_STATE_HOME"):
        return os.path.join(environ["XDG_STATE_HOME"], "ruizn")
    home = home_folder(environ) or os.path.expanduser("~")
    return os.path.join(home, ".local", "state", "ruizn")


def state_dir(environ: Mapping[str, str]) -> Path:
    """The user's ruizn state folder (never inside a workspace), as a Path."""
    from pathlib import Path

    return Path(state_folder(environ))
