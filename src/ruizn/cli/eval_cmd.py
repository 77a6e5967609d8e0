"""`ruizn eval DATASET` and `ruizn eval compare A B` (ruizn.evals loads inside them)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ruizn.cli.exits import EXIT_ERROR, EXIT_OK, Exit, fail

if TYPE_CHECKING:
    from ruizn.evals.dataset import Dataset
    from ruizn.evals.report import EvalReport

__all__ = ["eval_command"]

_HELP = (
    "Run every case of DATASET (pydantic-evals' YAML or JSON format) and score each run:"
    " exit 0 when the pass rate meets --min-pass, 1 when not."
)


class _RunCommand(click.Command):
    """The hidden `run` shows its usage as `ruizn eval [OPTIONS] DATASET`."""

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        parent = ctx.parent.command_path if ctx.parent is not None else "ruizn eval"
        formatter.write_usage(parent, " ".join(self.collect_usage_pieces(ctx)))


class _EvalGroup(click.Group):
    """`ruizn eval compare A B` is the subcommand; anything else is `ruizn eval DATASET`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands or args[0] == "run":
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("eval", cls=_EvalGroup, help=_HELP + "\n\n`ruizn eval compare A B`: two reports.")
def eval_command() -> None:
    pass


@eval_command.command("run", cls=_RunCommand, hidden=True, help=_HELP)
@click.argument("dataset", type=click.Path(dir_okay=False))
@click.option("--model", help="The model of every case (a case's metadata.ruizn.model wins).")
@click.option(
    "--epochs", type=click.IntRange(min=1), default=1, show_default=True, help="Runs of each case."
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs at once in this process (on the fleet's queue).",
)
@click.option(
    "--db",
    metavar="URL",
    help="Queue the runs on this fleet database: `ruizn worker --db URL` processes take them too.",
)
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0, min_open=True),
    help="USD for the whole eval; once spent, runs stop and the rest do not start.",
)
@click.option("--max-steps", type=click.IntRange(min=1), help="Each run's step limit.")
@click.option(
    "--min-pass",
    type=click.FloatRange(0, 1),
    default=1.0,
    show_default=True,
    help="The pass rate (passed trials / trials) needed to exit 0.",
)
@click.option(
    "--recordings",
    type=click.Path(file_okay=False),
    help="Re-drive each case from a run recorded in DIR with its goal (no model).",
)
@click.option(
    "--trust",
    is_flag=True,
    help="Accept recordings this user's ruizn did not make here (what they grant).",
)
@click.option(
    "--rescore",
    type=click.Path(dir_okay=False),
    help="Score the runs of REPORT again with DATASET's scorers (no model call).",
)
@click.option("--tool", "tool_specs", multiple=True, help="A tool MODULE:ATTR for every run.")
@click.option("--judge-model", help="The model of an LLMJudge that names none.")
@click.option(
    "--workspace",
    default=".",
    show_default=True,
    help="Where .ruizn/evals (workspaces, reports) and .ruizn/runs go.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML to FILE.")
@click.option(
    "--html",
    type=click.Path(dir_okay=False),
    help="Write the report as an HTML page to FILE, each run linked to its view.",
)
def run_command(dataset: str, **options: Any) -> None:
    raise Exit(_run(dataset, **options))


def _run(
    dataset: str,
    *,
    min_pass: float,
    recordings: str | None,
    rescore: str | None,
    workspace: str,
    as_json: bool,
    junit: str | None,
    html: str | None,
    **options: Any,
) -> int:
    from ruizn.evals.api import load_report
    from ruizn.evals.dataset import DatasetError, load_dataset
    from ruizn.evals.report import ReportError, report_to_json, table, to_junit
    from ruizn.settings import ConfigError

    if not os.path.isdir(workspace):
        fail(f"--workspace {workspace!r} is not a folder")
    if rescore is not None and recordings is not None:
        fail("--rescore scores saved runs; --recordings re-drives them: give one")
    if options.get("db") is not None and (rescore is not None or recordings is not None):
        fail("--db queues new runs for the fleet's workers: not with --rescore or --recordings")
    try:
        loaded = load_dataset(dataset)
        if rescore is not None:
            report = _rescored(loaded, load_report(rescore), workspace, min_pass)
        else:
            report = _evaluated(loaded, workspace, min_pass, recordings, **options)
    except (DatasetError, ReportError, ConfigError, FileNotFoundError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename}: {exc.strerror}")
    if junit is not None:
        Path(junit).write_text(to_junit(report), encoding="utf-8")
    if html is not None:
        _write_page(report, Path(html))
    if as_json:
        click.echo(json.dumps(report_to_json(report), indent=2))
    else:
        from ruizn.terminal import visible

        for line in table(report, width=min(_width(), 120)):
            click.echo(visible(line))
        click.echo(visible(f"report: {_saved(workspace, report.eval_id)}"))
    return EXIT_OK if report.ok else EXIT_ERROR


def _rescored(dataset: Dataset, earlier: EvalReport, workspace: str, min_pass: float) -> EvalReport:
    """`--rescore`: a new report, saved beside the others."""
    import anyio

    from ruizn.evals.api import save_report
    from ruizn.evals.rescore import rescore_async

    report = anyio.run(rescore_async, dataset, earlier).with_min_pass(min_pass)
    save_report(report, Path(workspace) / ".ruizn" / "evals" / report.eval_id / "report.json")
    return report


def _evaluated(
    dataset: Dataset,
    workspace: str,
    min_pass: float,
    recordings: str | None,
    *,
    max_steps: int | None,
    tool_specs: tuple[str, ...],
    **options: Any,
) -> EvalReport:
    import anyio

    from ruizn.cli.fleet_printer import warn
    from ruizn.evals.api import eval_async

    settings: dict[str, Any] = {}
    if max_steps is not None:
        settings["max_steps"] = max_steps
    if tool_specs:
        settings["tool_specs"] = tool_specs
    return anyio.run(
        lambda: eval_async(
            dataset,
            min_pass=min_pass,
            recordings=recordings,
            workspace=workspace,
            on_notice=warn,
            **options,
            **settings,
        )
    )


def _write_page(report: EvalReport, target: Path) -> None:
    """The eval's page, and each run's own page (`ruizn view`'s, beside its log) it links to."""
    from ruizn.cli.view import PAGE_NAME, _write
    from ruizn.effects.runlog.store import replay
    from ruizn.evals.page import eval_page
    from ruizn.view.page import render
    from ruizn.view.timeline import TimelineBuilder

    target.parent.mkdir(parents=True, exist_ok=True)
    links: dict[tuple[str, int], str] = {}
    for trial in report.trials:
        if trial.log_path is None:
            continue
        builder = TimelineBuilder()
        replay(trial.log_path, on_event=builder)
        page = Path(trial.log_path).parent / PAGE_NAME
        _write(page, render(builder.timeline(), source=trial.log_path))
        links[(trial.case, trial.epoch)] = os.path.relpath(page, target.resolve().parent)
    _write(target, eval_page(report, links))


def _saved(workspace: str, eval_id: str) -> str:
    return os.path.relpath(Path(workspace) / ".ruizn" / "evals" / eval_id / "report.json")


def _width() -> int:
    import shutil

    return max(60, shutil.get_terminal_size((80, 24)).columns)


@eval_command.command("compare")
@click.argument("a", type=click.Path(dir_okay=False))
@click.argument("b", type=click.Path(dir_okay=False))
def compare_command(a: str, b: str) -> None:
    """Compare two eval reports: the cases that got better or worse, cost and time deltas;
    exit 1 when a case got worse."""
    from ruizn.evals.api import load_report
    from ruizn.evals.report import ReportError, compare

    try:
        comparison = compare(load_report(a), load_report(b))
    except ReportError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename}: {exc.strerror}")
    for line in comparison.lines():
        click.echo(line)
    raise Exit(EXIT_ERROR if comparison.worse else EXIT_OK)
