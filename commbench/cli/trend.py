"""`commbench trend RESULTS...`: the runs in time order, the points that changed and since when
(analysis/trend/trend.py; docs/TREND.md). Reads results files and never starts ranks or imports torch."""

from __future__ import annotations

import json
import sys

import click

from commbench.cli.options import fraction
from commbench.core.errors import EXIT_BAD_RESULT, EXIT_OK, BadInput
from commbench.core.outtext import LINE_LIMIT, terminal
from commbench.core.units import counted

SHOWN = 8  # changed points listed per change run (the rest counted)


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option(
    "--alpha",
    default="0.05",
    show_default=True,
    help="Significance level of each point's change-point test, Benjamini-Hochberg adjusted over points.",
)
@click.option(
    "--threshold",
    default="5%",
    show_default=True,
    help="Smallest change of a point's median (before vs after) that is named (5% or 0.05).",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--plot", "plot_path", default=None, help="Also draw the changed points' series into this .png/.svg.")
@click.option("--force", is_flag=True, help="Replace an existing --plot file (never an input).")
def trend(results, alpha, threshold, fmt, plot_path, force) -> int:
    """Follow every point across runs (files or folders, e.g. a nightly job's results) in time order
    and name the first run after each change, its points and what differed.

    Exit 0: no point got worse; 1: a point got worse; 3: too few runs for a verdict. See docs/TREND.md.
    """
    from commbench.analysis.trend import trend as trending

    a = fraction(alpha, "--alpha", low_open=True)
    thr = fraction(threshold, "--threshold")
    if a > 0.5:
        raise BadInput(f"--alpha {alpha} is above 0.5: pass a significance level such as 0.05 or 0.01")
    if plot_path is not None:
        from commbench.analysis.report import plot

        plot.check_figure(plot_path, "trend", "--plot", results, force)  # before anything is read
    found = trending.trend(results, alpha=a, threshold=thr)
    if plot_path is not None:
        from commbench.analysis.report import plot
        from commbench.analysis.trend import trendplot

        plot.save_figure(trendplot.draw(found), plot_path, "--plot", "trend", results, force)
    text = json.dumps(_as_dict(found), indent=2, default=str) + "\n" if fmt == "json" else _table(found, trending)
    sys.stdout.write(text)
    return EXIT_BAD_RESULT if found.worse() else EXIT_OK


def _table(found, trending) -> str:
    runs = found.runs
    lines = [
        f"trend: {len(runs)} runs from {runs[0].started_at} to {runs[-1].started_at}, {found.points} points followed"
    ]
    if not found.changes:
        lines.append("no change: every point's series is steady (or moved less than --threshold)")
        return "\n".join(lines) + "\n"
    for at in found.change_runs():
        changed = [c for c in found.changes if c.at == at]
        worse = sum(c.change < 0 for c in changed)
        lines.append("")
        lines.append(
            f"CHANGE from {terminal(runs[at].name(), LINE_LIMIT)}: {counted(len(changed), 'point')} "
            f"({worse} slower, {len(changed) - worse} faster)"
        )
        lines.append(f"  the run before: {terminal(runs[at - 1].name(), LINE_LIMIT)}")
        host, links = trending.common_host(changed)
        if host is not None:
            lines.append(f"  every changed link ({links}) has {terminal(host)} at one end: suspect {terminal(host)}")
        lines += [f"  {trending.describe(c)}" for c in changed[:SHOWN]]
        if len(changed) > SHOWN:
            lines.append(f"  ... and {len(changed) - SHOWN} more (--format json lists them all)")
        differs = found.differs.get(at) or []
        lines.append(
            "  what differs: "
            + (
                "; ".join(terminal(d, LINE_LIMIT) for d in differs)
                if differs
                else "nothing commbench records (a cause outside the runs' settings)"
            )
        )
    return "\n".join(lines) + "\n"


def _as_dict(found) -> dict:
    return {
        "runs": [
            {"index": r.index, "run_id": r.run_id, "started_at": r.started_at, "label": r.label} for r in found.runs
        ],
        "points": found.points,
        "changes": [
            {
                "first_run_after": found.runs[c.at].index,
                "run_id": found.runs[c.at].run_id,
                "point": {k: _plain(v) for k, v in c.key.items() if v is not None},
                "before_GBps": c.before,
                "after_GBps": c.after,
                "change": c.change,
                "p": c.p,
                "q": c.q,
            }
            for c in found.changes
        ],
        "what_differs": {str(found.runs[at].index): d for at, d in found.differs.items()},
        "verdict": "worse" if found.worse() else ("changed" if found.changes else "steady"),
    }


def _plain(value):
    """A key value from the engine (numpy scalars included) as JSON holds it."""
    return value.item() if hasattr(value, "item") else value
