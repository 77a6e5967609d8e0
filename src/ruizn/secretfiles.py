"""Which file names hold secrets by convention: the file tools refuse them, checkpoints
leave them out. Pure: names in, a verdict out."""

from __future__ import annotations

import fnmatch
import re

__all__ = ["SECRET_FILE_PATTERNS", "is_secret_name"]

# Files whose content is a credential by convention. Matched (fnmatch, case-sensitive) against
# the final name, both as given and as resolved. Kept short on purpose: this catches the usual
# places a key sits in a project, it is not a secret scanner.
SECRET_FILE_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    ".pypirc",
    "credentials",
    "credentials.json",
)
# The patterns as one expression, matched as fnmatchcase matches each (a read checks a name
# three times, a search every name it meets: one match, not sixteen).
_SECRET_NAME = re.compile("|".join(fnmatch.translate(p) for p in SECRET_FILE_PATTERNS))


def is_secret_name(name: str) -> bool:
    """Whether a file's final name is one of SECRET_FILE_PATTERNS."""
    return _SECRET_NAME.match(name) is not None
