"""Report pieces that follow what was drawn and what was given: figure captions that name only
the panels a figure has (a figure without small sizes has no latency panel), and the baseline's
runs, so that the before side's metadata is in the report as the after side's is."""

from __future__ import annotations

from typing import TYPE_CHECKING


from commbench.analysis import plot
from commbench.analysis.markdown import runs_markdown
from commbench.core.units import format_size

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

BASELINE_RUNS = "Baseline runs (before)"
_LATENCY = f"time per operation of sizes ≤ {format_size(plot.SMALL_BYTES)}"


def curves_caption(fig: Figure) -> str:
    """The caption of the curves figure: its top panel, and its bottom one only when it has one."""
    against = "bucket size" if fig.axes and fig.axes[0].get_xlabel().startswith("Bucket size") else "message size"
    top = (f"bus bandwidth (nccl-tests definition) against {against}, median over repetitions, "
           "band from min to max.")
    if not plot.has_latency_panel(fig):
        return top[0].upper() + top[1:]
    return f"Top: {top} Bottom: {_LATENCY}."


def comparison_caption(fig: Figure) -> str:
    text = "Before (baseline, dashed) and after (solid): median busbw over every run and repetition of each side"
    return text + (f"; below, the {_LATENCY}." if plot.has_latency_panel(fig) else ".")


def baseline_runs_markdown(df: pd.DataFrame) -> list[str]:
    """The baseline's runs as the Markdown report's "Runs" section lists the after side's."""
    return runs_markdown(df, BASELINE_RUNS)


def with_baseline_runs(text: str, baseline_df: pd.DataFrame | None) -> str:
    """The Markdown report with the baseline's runs after its own "Runs" section (before the footer line)."""
    if baseline_df is None or len(baseline_df) == 0:
        return text
    body, _, footer = text.rstrip("\n").rpartition("\n")
    return "\n".join([body, *baseline_runs_markdown(baseline_df), footer]) + "\n"
