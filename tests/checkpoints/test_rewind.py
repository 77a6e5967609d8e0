"""`Agent.rewind`: a run whose only changes the shell made goes back to every step, byte for
byte; a file changed since by someone else blocks it until forced; `undo` puts it back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ruizn
from ruizn.effects.runlog.reader import iter_events
from ruizn.events import Checkpointed
from tests.checkpoints.conftest import COMMANDS
from tests.checkpoints.test_store import tree_hash


def test_a_run_of_shell_commands_rewinds_to_every_step_with_the_exact_bytes(
    shell_run: Callable[..., Any],
) -> None:
    agent, run_id, seen, ws = shell_run()
    end = tree_hash(ws)
    steps = sorted(seen)[:-1]  # the last step ran no tool
    assert len(set(seen.values())) == len(seen)  # every step changed the files
    for step in [*reversed(steps), *steps]:
        agent.rewind(run_id, step=step)
        assert tree_hash(ws) == seen[step], step
    last = agent.rewind(run_id, to=10_000)  # the run's end
    assert tree_hash(ws) == end
    assert last.label.endswith("(the run's end)")


def test_a_file_changed_after_the_run_blocks_rewind_until_forced_and_undo_restores_it(
    shell_run: Callable[..., Any],
) -> None:
    agent, run_id, seen, ws = shell_run()
    (ws / "k.txt").write_text("the user's edit\n")
    mine = tree_hash(ws)
    with pytest.raises(ruizn.RewindRefused, match=r"k\.txt changed since run"):
        agent.rewind(run_id, step=2)
    assert tree_hash(ws) == mine
    done = agent.rewind(run_id, step=2, force=True)
    assert tree_hash(ws) == seen[2]
    assert {c.path for c in done.changes} >= {"k.txt", "a.txt", "x.sh", "z.bin"}
    agent.rewind(run_id, undo=True)
    assert tree_hash(ws) == mine
    assert (ws / "k.txt").read_text() == "the user's edit\n"


def test_no_checkpoints_when_turned_off(shell_run: Callable[..., Any]) -> None:
    agent, run_id, _, ws = shell_run(COMMANDS[:1], checkpoints=False)
    log = ws / ".ruizn" / "runs" / run_id / "events.jsonl"
    assert not [e for e in iter_events(log) if isinstance(e, Checkpointed)]
    with pytest.raises(ruizn.RewindRefused, match="no checkpoints"):
        agent.rewind(run_id, step=1)
