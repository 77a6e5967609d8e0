"""An eval as one self-contained HTML page: the table of trials, each linked to its run's own
page (`ruizn view`). Pure: the caller writes the files. Everything from the report is escaped
text, never markup."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from ruizn.evals.report import EvalReport

__all__ = ["eval_page"]

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
th, td { padding: 4px 10px; border-bottom: 1px solid #ddd; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.passed { color: #1a7f37; } .failed, .error, .diverged, .stopped { color: #cf222e; }
.not_run { color: #888; } .why { color: #555; font-size: 12px; }
"""


def eval_page(report: EvalReport, links: Mapping[tuple[str, int], str]) -> str:
    """The page; `links` maps (case, epoch) to the href of that trial's run page."""
    rows = []
    for trial in report.trials:
        href = links.get((trial.case, trial.epoch))
        run = escape(trial.run_id or "")
        run_cell = f'<a href="{escape(href, quote=True)}">{run}</a>' if href else run
        cost = "-" if trial.cost is None else f"${trial.cost:.4f}"
        why = escape(trial.why() or "") if not trial.passed else ""
        rows.append(
            f"<tr><td>{escape(trial.case)}</td><td class=num>{trial.epoch}</td>"
            f'<td class="{trial.outcome}">{escape(trial.outcome.replace("_", " "))}</td>'
            f"<td class=num>{trial.score:.2f}</td><td class=num>{trial.steps}</td>"
            f"<td class=num>{cost}</td><td class=num>{trial.elapsed:.1f} s</td>"
            f"<td>{run_cell}</td><td class=why>{why}</td></tr>"
        )
    verdict = "ok" if report.ok else "FAILED"
    summary = (
        f"{report.passed}/{len(report.trials)} passed ({report.pass_rate:.0%}, needed"
        f" {report.min_pass:.0%}): {verdict}; ${report.cost:.4f}"
        f" (+${report.judge_cost:.4f} judges), {report.elapsed:.1f} s"
    )
    note = f"<p>{escape(report.budget_note)}</p>" if report.budget_note else ""
    title = escape(f"ruizn eval {report.dataset} ({report.eval_id})")
    head = "".join(
        f"<th>{name}</th>"
        for name in ("case", "epoch", "result", "score", "steps", "cost", "time", "run", "why")
    )
    return (
        "<!doctype html>\n<html><head><meta charset=utf-8>"
        # No script, and nothing loaded from anywhere: the page is the report as text.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
        " style-src 'unsafe-inline'\">"
        f"<title>{title}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{title}</h1><p>{escape(summary)}</p>{note}"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "</body></html>\n"
    )
