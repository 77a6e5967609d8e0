"""`ruizn chat` (and `ruizn` alone at a terminal): a session, one run a message at a time.

The first message starts a run; each later one continues it (`Agent.start_resume` with a
`Resume(message=...)`), so the whole session is one log that `replay`, `view`, `rerun` and
`fork` read like any other. A setting changed here (`/model`, `/effort`) goes into the log
as a settings_changed event with the next message. Ctrl-C during a turn cancels that turn
only (the run ends `cancelled`, logged); the next message answers its open tool calls as
not run (`resuming.cancelled_answers`) and goes on. The input line is prompt_toolkit's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import click

from ruizn.cli.agents_cmd import agent_options
from ruizn.cli.exits import EXIT_ERROR, EXIT_OK, Exit, echo_error
from ruizn.cli.live import _USAGE_ERRORS, Opening, _sdk_notices, _with_signals, echo_err
from ruizn.cli.options import UsageFailure, checked_text, run_options
from ruizn.defaults import EFFORT_LEVELS, Effort
from ruizn.effects.runlog.store import RunStore
from ruizn.effects.userconfig.dirs import state_dir
from ruizn.redact import Redactor
from ruizn.resuming import UntrustedRun
from ruizn.shell.agent import Agent
from ruizn.shell.outcome import Resume, RunResult, Session
from ruizn.shell.toolcalls import first_error
from ruizn.state import ExecutionContext, Status
from ruizn.terminal import visible

__all__ = ["SLASH_COMMANDS", "ChatSession", "chat_command", "history_line", "open_session"]

SLASH_COMMANDS: dict[str, str] = {
    "/help": "this list",
    "/model": "/model ID: the model from the next message on",
    "/effort": f"/effort LEVEL ({', '.join(EFFORT_LEVELS)}): the effort from the next message on",
    "/cost": "usage and cost so far, per step",
    "/tools": "the tools the run offers",
    "/show": "the run as `ruizn show` prints it",
    "/fork": "a new run holding this one so far; the session goes on in it",
    "/agents": "the subagents the run may start (its `agent` tool)",
    "/compact": "/compact [INSTRUCTIONS]: the conversation so far becomes one summary, now",
    "/rewind": "/rewind --step N | --to SEQ | --undo: the files back as they were (asks first)",
    "/new": "a fresh run from the next message",
    "/exit": "end the session (Ctrl-D does too)",
}

# What looks like a secret typed at the prompt, kept out of the history file as well as the
# values of the environment's keys: an Anthropic key, and NAME=VALUE with a secret's name.
_TYPED_SECRETS = re.compile(
    r"sk-ant-[A-Za-z0-9_\-]{8,}"
    r"|(?i:\b[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD)\s*[=:]\s*)\S+"
)


def history_line(text: str, redactor: Redactor) -> str:
    """A line as the history file keeps it: known secrets and typed ones replaced."""
    text = redactor.redact(text)
    return _TYPED_SECRETS.sub(
        lambda m: (
            m.group(0)[: len(m.group(0)) - len(m.group(0).lstrip())] + "[redacted]"
            if m.group(0).startswith("sk-ant-")
            else _keep_name(m.group(0))
        ),
        text,
    )


def _keep_name(found: str) -> str:
    name = re.match(r"(?i)[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD)\s*[=:]\s*", found)
    return (name.group(0) if name else "") + "[redacted]"


class ChatSession:
    """One session at the terminal. `agent` is the terminal's Agent (printer, prompt);
    `run` a run to continue (None: the first message starts one)."""

    def __init__(
        self,
        agent: Agent,
        *,
        run: str | None,
        environ: dict[str, str],
        read: Callable[[], str] | None = None,
    ) -> None:
        self._agent = agent
        self._run = run
        self._model: str | None = None
        self._effort: Effort | None = None
        self._cancelled = False
        self._redactor = Redactor.from_env(environ)
        self._environ = environ
        self._read = read or self._prompt_reader()

    # The loop -----------------------------------------------------------------------------

    def loop(self) -> int:
        """Read, act, repeat; Ctrl-D, `/exit` or Ctrl-C twice at an empty prompt end it."""
        if self._run is not None:
            echo_err(f"ruizn: session on run {visible(self._run)}; /help lists the commands")
        else:
            echo_err("ruizn: a new session; /help lists the commands, Ctrl-D ends it")
        interrupts = 0
        while True:
            try:
                text = self._read()
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts >= 2:
                    break
                echo_err("(Ctrl-C again, or Ctrl-D, to leave)")
                continue
            except EOFError:
                break
            interrupts = 0
            text = text.strip()
            if not text:
                continue
            if text.startswith("/"):
                if self._slash(text) == "exit":
                    break
                continue
            code = self._turn(text)
            if code is not None:
                return code
        if self._run is not None:
            echo_err(f"ruizn: session ended; run {self._run} (ruizn chat {self._run})")
        return EXIT_OK

    def _turn(self, text: str) -> int | None:
        """One message: a run started or continued, driven until the model ends its turn or
        the person cancels it. None: the session goes on; an int ends it (a lost log)."""
        agent, run = self._agent, self._run
        if run is None:

            def opening() -> Any:
                return agent.start(text)

        else:
            request = Resume(
                message=text, model=self._model, effort=self._effort, cancelled=self._cancelled
            )

            def opening() -> Any:
                return agent.start_resume(run, request)

        result, fatal = _drive(opening)
        if fatal is not None:
            return fatal
        if result is None:
            return None
        self._run = result.run_id
        self._model = self._effort = None  # in the log now: the run's own from here
        status = result.state.status
        self._cancelled = status is Status.CANCELLED
        if self._cancelled:
            echo_err("(turn cancelled; your next message goes on from here)")
        elif status is not Status.SUCCESS:
            reason = f": {visible(result.state.error)}" if result.state.error else ""
            echo_err(f"(the turn ended {status.value}{reason})")
        return None

    # Slash commands ------------------------------------------------------------------------

    def _slash(self, text: str) -> str | None:
        name, _, argument = text.partition(" ")
        argument = argument.strip()
        if name == "/exit":
            return "exit"
        if name == "/help":
            for command, what in SLASH_COMMANDS.items():
                echo_err(f"  {command:<8} {what}")
        elif name == "/model":
            if not argument:
                echo_err(f"model: {visible(self._current('model'))}")
            else:
                self._model = argument
                echo_err(f"model: {visible(argument)} from the next message on")
        elif name == "/effort":
            if argument not in EFFORT_LEVELS:
                echo_err(f"/effort takes one of {', '.join(EFFORT_LEVELS)}")
            else:
                self._effort = argument
                echo_err(f"effort: {argument} from the next message on")
        elif name == "/new":
            self._run, self._cancelled = None, False
            echo_err("the next message starts a new run")
        elif name == "/agents":
            settings = self._state().settings if self._run else self._agent.settings
            if not settings.subagents:
                echo_err("no subagents: give --agents DIR or --subagents to offer them")
            for agent in settings.subagents:
                echo_err(f"  {visible(agent.name)}: {visible(agent.description)}")
        elif name in ("/cost", "/show", "/tools", "/fork", "/compact", "/rewind"):
            if self._run is None:
                echo_err(f"{name}: no run yet (send a message first)")
            else:
                self._about_run(name, argument)
        else:
            echo_err(f"unknown command {visible(name)}: /help lists them")
        return None

    def _about_run(self, name: str, argument: str = "") -> None:
        from ruizn.cli.logs import cost_report, show_run

        assert self._run is not None
        store = self._store()
        try:
            if name == "/compact":
                self._compact(argument)
            elif name == "/rewind":
                self._rewind(argument)
            elif name == "/show":
                show_run(store, self._run)
            elif name == "/cost":
                for line in cost_report(store, self._run):
                    print(line)
            elif name == "/tools":
                state = self._state()
                for schema in state.settings.tools:
                    print(f"  {visible(str(schema.get('name', '?')))}")
            else:
                fork = self._agent.fork(self._run, at=self._state().last_seq)
                echo_err(f"forked: the session goes on in {fork.run_id} ({self._run} is kept)")
                self._run = fork.run_id
        except SystemExit:  # a command's one-line refusal (fail) has been printed
            pass
        except Exit as refused:  # a command's refusal (fail), or a no to its question
            if refused.message:
                echo_error(refused.message)
        except _USAGE_ERRORS as exc:
            echo_error(str(exc))
        except (UntrustedRun, UsageFailure) as exc:
            echo_error(str(exc))

    def _compact(self, instructions: str) -> None:
        """`ruizn compact` on the session's run: the summary is events in its log, and the
        next message goes on from it."""
        from ruizn.shell.compacting import CompactionFailed

        run, agent = self._run, self._agent
        assert run is not None
        said = checked_text("/compact", instructions) if instructions else None
        try:
            with _sdk_notices():
                anyio.run(
                    lambda: _with_signals(lambda: agent.compact_async(run, instructions=said))
                )
        except KeyboardInterrupt:  # logged as a compaction call that gave up
            echo_err("(compaction cancelled; the next message goes on from the history)")
            return
        except CompactionFailed as exc:
            echo_err(f"ruizn: {visible(str(exc))}")
            return
        echo_err("compacted: the next message goes on from the summary")

    def _rewind(self, argument: str) -> None:
        """`ruizn rewind` on the session's run: what will change, asked here, undo kept.
        With no argument: the steps that changed files, to pick one."""
        from ruizn.cli.files_cmd import changed_steps, rewind_files

        assert self._run is not None
        picked = _rewind_arguments(argument)
        if isinstance(picked, str):
            echo_err(picked)
            return
        files, steps = changed_steps(self._store(), self._run)
        if not picked:
            for step, count in steps:
                echo_err(f"  step {step}: {count} file{'s' if count != 1 else ''} changed")
            echo_err(
                "/rewind --step N puts the files back as they were before step N"
                if steps
                else "no step of this run changed a file"
            )
            return
        rewind_files(files, yes=False, **picked)

    def _current(self, setting: str) -> str:
        if self._run is None:
            return str(getattr(self._agent.settings, setting))
        return str(getattr(self._state().settings, setting))

    def _store(self) -> RunStore:
        return self._agent.store()

    def _state(self) -> ExecutionContext:
        """The run's state as its log holds it now."""
        assert self._run is not None
        store = self._store()
        return store.load(store.find(self._run)).state

    # Input ----------------------------------------------------------------------------------

    def _prompt_reader(self) -> Callable[[], str]:
        """prompt_toolkit's line editor: history across sessions (secrets left out),
        completion of slash commands and paths, Esc-Enter for a new line."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.key_binding import KeyBindings

        bindings = KeyBindings()

        @bindings.add("escape", "enter")
        def _newline(event: Any) -> None:
            event.current_buffer.insert_text("\n")

        path = state_dir(self._environ) / "chat-history"
        prompt: PromptSession[str] = PromptSession(
            history=_history(path, self._redactor),
            completer=_completer(),
            complete_while_typing=False,
            key_bindings=bindings,
        )
        return lambda: prompt.prompt("> ")


def _rewind_arguments(argument: str) -> dict[str, Any] | str:
    """`/rewind`'s words as `rewind_files`' arguments ({} for none), or what is wrong."""
    words = argument.split()
    picked: dict[str, Any] = {"to": None, "step": None, "undo": False, "force": False}
    usage = "/rewind takes --step N, --to SEQ or --undo (and --force)"
    while words:
        word = words.pop(0)
        if word in ("--undo", "--force"):
            picked[word[2:]] = True
        elif word in ("--to", "--step") and words and words[0].isdigit() and int(words[0]) > 0:
            picked[word[2:]] = int(words.pop(0))
        else:
            return usage
    chosen = sum((picked["to"] is not None, picked["step"] is not None, picked["undo"]))
    if chosen > 1 or (picked["force"] and not chosen):
        return usage
    return picked if chosen else {}


def _drive(opening: Opening) -> tuple[RunResult | None, int | None]:
    """Drive one turn under the signals (Ctrl-C cancels it). The result, or None when it
    did not start (the reason is shown); and an exit code when the session cannot go on."""
    from ruizn.effects.runlog.sink import LogLost, SinkError

    sessions: list[Session] = []

    async def main() -> RunResult:
        async with opening() as session:
            sessions.append(session)
            return await _with_signals(session.drive)

    try:
        with _sdk_notices():
            return anyio.run(main), None
    except KeyboardInterrupt:
        return (sessions[0].result() if sessions else None), None
    except BaseExceptionGroup as failed:
        error: BaseException = first_error(failed)
    except Exception as exc:
        error = exc
    if isinstance(error, LogLost | SinkError):
        echo_error(f"{error}; the session ends (every line before it is kept)")
        return None, EXIT_ERROR
    if isinstance(error, _USAGE_ERRORS):
        echo_error(str(error))
        return None, None
    raise error


def _history(path: Path, redactor: Redactor) -> Any:
    from prompt_toolkit.history import FileHistory

    class SecretFreeHistory(FileHistory):
        """The person's lines across sessions, in the state directory, secrets left out."""

        def store_string(self, string: str) -> None:
            super().store_string(history_line(string, redactor))

    path.parent.mkdir(parents=True, exist_ok=True)
    return SecretFreeHistory(str(path))


def _completer() -> Any:
    from prompt_toolkit.completion import (
        Completer,
        Completion,
        PathCompleter,
        WordCompleter,
        merge_completers,
    )
    from prompt_toolkit.document import Document

    slash = WordCompleter(list(SLASH_COMMANDS), sentence=True)
    paths = PathCompleter(expanduser=True)

    class LastWordPaths(Completer):
        """Paths for the word under the cursor (not the whole line)."""

        def get_completions(self, document: Document, event: Any) -> Iterable[Completion]:
            if document.text.startswith("/"):
                return
            word = document.get_word_before_cursor(WORD=True)
            yield from paths.get_completions(Document(word, len(word)), event)

    class SlashAtStart(Completer):
        def get_completions(self, document: Document, event: Any) -> Iterable[Completion]:
            if document.text.startswith("/") and " " not in document.text:
                yield from slash.get_completions(document, event)

    return merge_completers([SlashAtStart(), LastWordPaths()])


@click.command("chat")
@click.argument("run", required=False)
@run_options
@agent_options
def chat_command(run: str | None, goal: str | None, **options: Any) -> None:
    """Open a session at the terminal: each message goes on in the same run (RUN, or a new
    one), with slash commands (/help).

    `ruizn` alone at a terminal opens one too; `ruizn chat last` reopens the newest run.
    --goal is the first message.
    """
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageFailure(
            "ruizn chat needs a terminal: use `ruizn run GOAL` or `ruizn continue RUN MESSAGE`"
        )
    raise Exit(open_session(run=run, first=goal, **options))


def open_session(
    *,
    run: str | None,
    first: str | None,
    workspace: str,
    log_dir: str | None,
    trust: bool = False,
    **options: Any,
) -> int:
    """`ruizn chat [RUN]`: the session's agent built as `ruizn run` builds one."""
    import os

    from ruizn.cli.agents_cmd import AGENT_OPTIONS, with_subagents
    from ruizn.cli.live import terminal_agent, with_project_hooks, with_user_hooks
    from ruizn.cli.runoptions import options_from, settings_from_cli

    picked = {key: options.pop(key, None) for key in AGENT_OPTIONS}
    profile = options.pop("profile", None)
    given = options_from({**options, "workspace": workspace}, profile=profile)
    settings, servers = settings_from_cli(given)
    settings = with_project_hooks(with_user_hooks(settings), trust=trust)
    settings = with_subagents(settings, picked, trust=trust)
    agent = terminal_agent(settings, log_dir=log_dir, mcp=servers, conversation=True)
    if run is not None:
        run = agent.store().find(run).run_id
    session = ChatSession(agent, run=run, environ=dict(os.environ))
    if first is not None:
        code = session._turn(first)
        if code is not None:
            return code
    return session.loop()
