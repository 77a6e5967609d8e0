"""`ruizn resume`: rebuild a run from its log and continue the loop in the same log."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ruizn.effects.logfile import LogError, TornTail, replay_file
from ruizn.shell.cli import EXIT_OK, fail
from ruizn.shell.logs import resolve_run
from ruizn.shell.session import TEST_MODEL, build_runner, drive, open_writer
from ruizn.state import Status


def resume(
    run: str,
    *,
    log_dir: str | Path | None,
    max_steps: int | None,
    read_timeout: float,
    max_retries: int,
) -> int:
    path = resolve_run(run, log_dir)

    def note(tail: TornTail) -> None:
        print(f"ruizn: warning: {tail.describe(path)}; cutting it before resuming", file=sys.stderr)

    try:
        replayed = replay_file(path, torn=note)
    except LogError as exc:
        fail(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}")
    state = replayed.state
    if state.status is Status.SUCCESS:
        print(f"run {state.run_id} already finished with success; nothing to resume")
        return EXIT_OK
    if max_steps is None:
        # A run stopped by its limit gets another batch of the same size; any other stop
        # keeps its limit.
        max_steps = state.max_steps
        if state.status is Status.MAX_STEPS:
            max_steps = state.step + state.max_steps
    elif max_steps <= state.step and state.messages[-1].role == "user":
        fail(f"--max-steps {max_steps} leaves no step: the run has taken {state.step} already")
    if state.model != TEST_MODEL and not os.environ.get("ANTHROPIC_API_KEY"):
        fail("ANTHROPIC_API_KEY is not set: set it to resume this run")
    workspace = Path(state.workspace or ".")
    if not workspace.is_dir():
        fail(f"the run's workspace {workspace} no longer exists")
    torn_bytes = 0
    if replayed.torn is not None:
        # Only the unfinished last write is cut; every whole line stays byte for byte.
        torn_bytes = replayed.torn.size
        os.truncate(path, replayed.torn.offset)
    writer = open_writer(path)
    runner = build_runner(
        model=state.model,
        workspace=workspace,
        read_timeout=read_timeout,
        max_retries=max_retries,
        writer=writer,
        state=state,
    )
    runner.resume(max_steps=max_steps, torn_bytes=torn_bytes)
    return drive(runner, path)
