"""Where the config files are, and reading them with tomllib. The rules about what they may
set and which wins are pure (`ruizn.configlayers`)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruizn.configlayers import ConfigFileError
from ruizn.effects.userconfig.dirs import home_folder

PROJECT_FILE = Path(".ruizn") / "config.toml"


def user_config_path(environ: Mapping[str, str]) -> Path:
    """$RUIZN_CONFIG, else $XDG_CONFIG_HOME/ruizn/config.toml, else ~/.config/ruizn/..."""
    explicit = environ.get("RUIZN_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path(home_folder(environ) or "~") / ".config")
    return Path(base).expanduser() / "ruizn" / "config.toml"


def read_toml(path: Path, *, required: bool = False) -> dict[str, Any] | None:
    """The file's table; None if there is none (ConfigFileError if `required`: a file named
    by RUIZN_CONFIG must exist). A file that is not TOML is a ConfigFileError naming it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise ConfigFileError(f"{path}: no such config file (RUIZN_CONFIG)") from None
        return None
    except IsADirectoryError:
        raise ConfigFileError(f"{path}: is a folder, not a config file") from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: not valid TOML: {exc}") from None
