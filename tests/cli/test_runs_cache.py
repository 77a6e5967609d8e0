"""`ruizn runs` keeps the rows it printed in the user's state folder: a log that changed
shows its new state, a corrupt cache is ignored (and rebuilt), and the cache never decides
what is shown over what the logs say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ruizn.cli import runs_list
from ruizn.effects.runlog import reader, writer
from tests.cli.conftest import cli_env, modules_after, run_cli


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(None, RUIZN_STATE_DIR=str(tmp_path / "state"))


def _runs(workspace: Path, env: dict[str, str]) -> list[str]:
    done = run_cli(["runs"], workspace=workspace, env=env)
    assert done.code == 0, done.stderr
    assert done.stderr == ""
    return done.stdout.splitlines()


def _run(workspace: Path, env: dict[str, str], goal: str) -> Path:
    done = run_cli(["run", "--model", "test", "--goal", goal], workspace=workspace, env=env)
    assert done.code == 0, done.stderr
    return done.log_path


def _cache_files(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["RUIZN_STATE_DIR"]) / runs_list.CACHE_FOLDER).glob("*.json"))


def test_the_names_are_the_stores() -> None:
    assert runs_list.LOG_NAME == reader.LOG_NAME
    assert runs_list.LOCK_NAME == writer.LOCK_NAME


def test_two_listings_in_sequence_list_the_same(workspace: Path, env: dict[str, str]) -> None:
    for goal in ("first goal", "second goal"):
        _run(workspace, env, goal)
    first = _runs(workspace, env)
    assert len(first) == 3
    assert "second goal" in first[1]
    assert "first goal" in first[2]
    assert len(_cache_files(env)) == 1  # the first listing wrote the cache
    assert _runs(workspace, env) == first


def test_a_warm_listing_reads_no_log(workspace: Path, env: dict[str, str]) -> None:
    core = {"ruizn.effects.runlog.store", "ruizn.events", "attr"}
    _run(workspace, env, "a goal")
    # The run stored its own row as it ended: the listing after it reads no log...
    after_run, after_modules = modules_after(["runs"], cwd=workspace, env=env)
    assert "a goal" in after_run
    assert not core & after_modules
    for path in _cache_files(env):
        path.unlink()
    cold, cold_modules = modules_after(["runs"], cwd=workspace, env=env)
    # ...without it, reading a log takes the store (and the event records)...
    assert "ruizn.effects.runlog.store" in cold_modules
    warm, warm_modules = modules_after(["runs"], cwd=workspace, env=env)
    # ...and the next listing lists the same from the cache, never loading what reads a log.
    assert warm == cold == after_run
    assert not core & warm_modules


def test_a_changed_log_shows_its_new_state(workspace: Path, env: dict[str, str]) -> None:
    log = _run(workspace, env, "the goal")
    before = _runs(workspace, env)
    assert " success " in before[1]
    # The run's last line goes: the log now says the run never finished.
    lines = log.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "run_finished"
    log.write_bytes(b"".join(lines[:-1]))
    after = _runs(workspace, env)
    assert " interrupted " in after[1]
    assert after[1].split()[0] == before[1].split()[0]


def test_a_corrupt_cache_is_ignored_and_rebuilt(workspace: Path, env: dict[str, str]) -> None:
    _run(workspace, env, "the goal")
    listed = _runs(workspace, env)
    (cache,) = _cache_files(env)
    for garbage in (b"\x00not json", b"[]", b'{"version": 1, "root": 3, "runs": {}}'):
        cache.write_bytes(garbage)
        assert _runs(workspace, env) == listed
    assert json.loads(cache.read_bytes())["version"] == 1  # rebuilt


@pytest.mark.parametrize("field", ["goal", "run"])
def test_a_planted_row_is_not_shown(workspace: Path, env: dict[str, str], field: str) -> None:
    # The cache grants nothing: a row ruizn did not write (one that would write to the
    # terminal, or one claiming another run) is dropped, and the log read again.
    _run(workspace, env, "the goal")
    listed = _runs(workspace, env)
    (cache,) = _cache_files(env)
    document = json.loads(cache.read_bytes())
    (entry,) = document["runs"].values()
    if field == "goal":
        entry["goal"] = "\x1b]0;pwned\x07"
    else:
        entry["cells"][0] = "another-run"
    cache.write_text(json.dumps(document))
    assert _runs(workspace, env) == listed


def test_an_unwritable_state_folder_still_lists(tmp_path: Path, workspace: Path) -> None:
    blocked = tmp_path / "state-file"
    blocked.write_text("not a folder\n")
    env = cli_env(None, RUIZN_STATE_DIR=str(blocked))
    _run(workspace, env, "the goal")
    first = _runs(workspace, env)
    assert len(first) == 2
    assert _runs(workspace, env) == first
