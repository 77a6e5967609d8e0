"""The one writer of a SQLite fleet database (fleet/writerlock.py): writers of two processes
on one file take turns on the file lock, and a writer re-enters its own turn."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ruizn.fleet.writerlock import OneWriter


def test_two_writers_on_one_file_take_turns_and_each_reenters_its_own(tmp_path: Path) -> None:
    database = str(tmp_path / "fleet.sqlite")
    # Two instances hold two open files, as two processes would: the file lock decides.
    first, second = OneWriter(database), OneWriter(database)
    order: list[str] = []

    def other() -> None:
        with second:
            order.append("second")

    with first, first:  # a group commit's transaction inside its turn
        waiting = threading.Thread(target=other)
        waiting.start()
        time.sleep(0.2)  # the other writer is kept out meanwhile
        order.append("first done")
    waiting.join(10)
    assert order == ["first done", "second"]
    assert (tmp_path / "fleet.sqlite-writer.lock").exists()
    first.close()
    second.close()


def test_no_file_lock_for_a_database_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    writer = OneWriter(":memory:")
    with writer, writer:
        pass
    writer.close()
    assert list(tmp_path.iterdir()) == []  # no `:memory:-writer.lock` made anywhere
