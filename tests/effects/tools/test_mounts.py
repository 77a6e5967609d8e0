"""Which workspaces read_file reads in place: a tree wholly on local file systems."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruizn.effects.tools.mounts import local_tree

# proc(5)'s format; the mount point is the fifth field, the type follows the " - ".
ROOT_EXT4 = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
PROC = "22 27 0:21 / /proc rw,relatime - proc proc rw\n"


def mountinfo(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "mountinfo"
    path.write_text(ROOT_EXT4 + PROC + "".join(lines))
    return str(path)


def test_a_folder_on_a_local_disk_is_local(tmp_path: Path) -> None:
    assert local_tree("/home/me/project", mountinfo=mountinfo(tmp_path))
    # A mount elsewhere (proc) is not in the tree and changes nothing.
    assert local_tree("/home/me/project", mountinfo=mountinfo(tmp_path, PROC))


@pytest.mark.parametrize("kind", ["nfs4", "cifs", "fuse.sshfs", "9p", "autofs"])
def test_a_network_mount_holding_or_inside_the_tree_is_not_local(tmp_path: Path, kind: str) -> None:
    holding = f"40 27 0:50 / /home/me rw - {kind} server:/export rw\n"
    assert not local_tree("/home/me/project", mountinfo=mountinfo(tmp_path, holding))
    inside = f"41 27 0:51 / /home/me/project/data rw - {kind} server:/data rw\n"
    assert not local_tree("/home/me/project", mountinfo=mountinfo(tmp_path, inside))
    # A sibling whose name merely starts the same is outside the tree.
    sibling = f"42 27 0:52 / /home/me/project-data rw - {kind} server:/x rw\n"
    assert local_tree("/home/me/project", mountinfo=mountinfo(tmp_path, sibling))


def test_the_last_mount_on_a_point_is_the_one_seen(tmp_path: Path) -> None:
    nfs = "40 27 0:50 / /srv rw - nfs4 server:/srv rw\n"
    tmpfs_over = "41 40 0:51 / /srv rw - tmpfs tmpfs rw\n"
    assert local_tree("/srv/work", mountinfo=mountinfo(tmp_path, nfs, tmpfs_over))
    assert not local_tree("/srv/work", mountinfo=mountinfo(tmp_path, tmpfs_over, nfs))


def test_escaped_mount_points_are_read(tmp_path: Path) -> None:
    spaced = "40 27 0:50 / /home/my\\040files rw - nfs4 server:/x rw\n"
    assert not local_tree("/home/my files/p", mountinfo=mountinfo(tmp_path, spaced))


def test_no_mountinfo_or_an_unknown_format_is_not_local(tmp_path: Path) -> None:
    assert not local_tree("/home/me", mountinfo=str(tmp_path / "missing"))
    assert not local_tree("/home/me", mountinfo=mountinfo(tmp_path, "garbage line\n"))


def test_this_machines_temporary_folder_is_local(tmp_path: Path) -> None:
    # The suite's own workspaces (and CI's) are on a local disk or tmpfs.
    assert local_tree(tmp_path)
