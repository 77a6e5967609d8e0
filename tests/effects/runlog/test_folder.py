"""The run-folder rules at the library level: what `RunFolder` opens and refuses, the line cap
the writer and the reader share, and the cut resume makes. (The attacks themselves, over the
real CLI, are in tests/cli/test_hostile_folders.py.)"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from attrs import evolve

from ruizn.effects.runlog.folder import RunFolder, UnsafeRunFile
from ruizn.effects.runlog.reader import MAX_LINE_BYTES, LogError, replay_file
from ruizn.effects.runlog.sink import LogWriteError
from ruizn.effects.runlog.writer import EventWriter, truncate_log
from ruizn.events import LlmToken
from ruizn.serde import decode, encode
from tests.conftest import PRECIOUS
from tests.paths import TESTS

GOLDEN = TESTS / "golden" / "core" / "plain_answer" / "events.jsonl"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


def _streaming_log(folder: Path) -> tuple[Path, LlmToken]:
    """A log that stopped inside a model's reply (another token may follow), and its token."""
    lines = GOLDEN.read_bytes().splitlines(keepends=True)
    token_at = next(i for i, line in enumerate(lines) if b'"type":"llm_token"' in line)
    folder.mkdir()
    log = folder / "events.jsonl"
    log.write_bytes(b"".join(lines[: token_at + 1]))
    token = decode(lines[token_at])
    assert isinstance(token, LlmToken)
    return log, token


def test_the_writer_and_the_reader_agree_on_the_longest_line(tmp_path: Path) -> None:
    log, token = _streaming_log(tmp_path / "run")
    events = replay_file(log).events
    overhead = len(encode(evolve(token, seq=token.seq + 1, text=""))) + 1  # and its newline
    longest = evolve(token, seq=token.seq + 1, text="x" * (MAX_LINE_BYTES - overhead))
    with EventWriter.append(log, fsync=False) as writer:
        writer(longest)
        size = log.stat().st_size
        too_long = evolve(longest, seq=token.seq + 2, text=longest.text + "x")
        with pytest.raises(LogWriteError, match=f"over the {MAX_LINE_BYTES >> 20} MiB"):
            writer(too_long)
        assert log.stat().st_size == size  # nothing of it was written
    assert replay_file(log).events == events + 1
    with log.open("ab") as f:  # the same line planted by hand: refused, never read whole
        f.write((encode(too_long) + "\n").encode())
    with pytest.raises(LogError, match=f"line {events + 2} is longer than 64 MiB"):
        replay_file(log)


def test_each_kind_of_planted_entry_is_refused_by_name_and_kind(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "regular").write_text("x")
    (folder / "link").symlink_to(folder / "regular")
    os.mkfifo(folder / "fifo")
    (folder / "dir").mkdir()
    os.link(folder / "regular", folder / "second-name")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / "sock"))
        with RunFolder.open(folder) as run:
            expected = {
                "link": "is a symbolic link",
                "fifo": "is a FIFO, not a regular file",  # opened at once: O_NONBLOCK
                "dir": "is a folder, not a regular file",
                "sock": "is a socket, not a regular file",
            }
            for name, why in expected.items():
                for write in (False, True):
                    with pytest.raises(UnsafeRunFile) as refused:
                        run.open_file(name, os.O_RDWR if write else os.O_RDONLY, write=write)
                    assert str(refused.value).startswith(f"{folder / name}: {why}")
            # Two names: read, never written.
            os.close(run.open_file("second-name", os.O_RDONLY, write=False))
            with pytest.raises(UnsafeRunFile, match="has 2 hard links"):
                run.open_file("second-name", os.O_RDWR, write=True)
            os.close(run.open_file("new", os.O_RDWR | os.O_CREAT, write=True))
    assert (folder / "regular").read_text() == "x"


def test_a_folder_swapped_after_it_was_opened_cannot_redirect_a_file(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with RunFolder.open(folder) as run:
        folder.rename(tmp_path / "moved")
        folder.symlink_to(elsewhere, target_is_directory=True)
        os.close(run.open_file("lock", os.O_RDWR | os.O_CREAT, write=True))
    assert (tmp_path / "moved" / "lock").is_file()
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(UnsafeRunFile, match="the run folder is a symbolic link"):
        RunFolder.open(folder)


def test_replace_file_replaces_a_planted_link_instead_of_writing_through_it(
    tmp_path: Path, precious: Path
) -> None:
    folder = _folder(tmp_path)
    (folder / "events.recovered.jsonl").symlink_to(precious)
    with RunFolder.open(folder) as run:
        run.replace_file("events.recovered.jsonl", [b"a\n", b"b\n"])
    assert precious.read_text() == PRECIOUS
    assert (folder / "events.recovered.jsonl").read_bytes() == b"a\nb\n"
    assert sorted(p.name for p in folder.iterdir()) == ["events.recovered.jsonl"]


def test_truncate_log_cuts_a_plain_log_and_refuses_a_link_or_a_second_name(
    tmp_path: Path, precious: Path
) -> None:
    folder = _folder(tmp_path)
    log = folder / "events.jsonl"
    log.write_bytes(b"whole\ntorn")
    truncate_log(log, 6)
    assert log.read_bytes() == b"whole\n"
    log.unlink()
    log.symlink_to(precious)
    with pytest.raises(LogWriteError, match="symbolic link"):
        truncate_log(log, 0)
    log.unlink()
    os.link(precious, log)
    with pytest.raises(LogWriteError, match="2 hard links"):
        truncate_log(log, 0)
    assert precious.read_text() == PRECIOUS
