"""Whether a folder's whole tree is on local file systems, where a bounded read cannot hang.

A read from NFS, SMB, sshfs or any FUSE mount can block for as long as the server is away;
one from ext4 or tmpfs takes microseconds. `read_file` uses this to read in place on local
trees, saving the hand-over to a worker thread (about a tenth of a step's client time),
and keeps the thread, with its timeout, everywhere else. Read from /proc/self/mountinfo;
anywhere that cannot be read (not Linux) counts as not local.
"""

from __future__ import annotations

import os
import re

__all__ = ("LOCAL_TYPES", "local_tree")

# File systems on a disk or in memory of this machine. Anything else (nfs, cifs, fuse.*,
# 9p, autofs, ...) may wait on something outside it.
LOCAL_TYPES = frozenset(
    {
        "btrfs",
        "erofs",
        "exfat",
        "ext2",
        "ext3",
        "ext4",
        "f2fs",
        "hfsplus",
        "jfs",
        "ntfs3",
        "overlay",
        "ramfs",
        "squashfs",
        "tmpfs",
        "vfat",
        "xfs",
        "zfs",
    }
)

_ESCAPE = re.compile(r"\\([0-7]{3})")


def local_tree(root: str | os.PathLike[str], *, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """True when `root` and every mount below it are on `LOCAL_TYPES` file systems."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as handle:
            text = handle.read()
    except OSError:
        return False
    top = os.path.realpath(root)
    inside = top.rstrip("/") + "/"
    holder: tuple[int, str] | None = None  # (length of its mount point, type)
    for line in text.splitlines():
        mount = _parse(line)
        if mount is None:
            return False  # a format we do not know: do not guess
        point, kind = mount
        if point == top or top.startswith(point.rstrip("/") + "/"):
            if holder is None or len(point) >= holder[0]:
                holder = (len(point), kind)  # the deepest (last) mount holding root wins
        elif point.startswith(inside) and kind not in LOCAL_TYPES:
            return False
    return holder is not None and holder[1] in LOCAL_TYPES


def _parse(line: str) -> tuple[str, str] | None:
    """(mount point, file system type) of a mountinfo line (proc(5)), or None."""
    fields = line.split(" ")
    try:
        dash = fields.index("-", 6)
        return _ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4]), fields[dash + 1]
    except (ValueError, IndexError):
        return None
