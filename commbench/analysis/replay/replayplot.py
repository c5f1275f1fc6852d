"""The replay figure (`commbench plot` of a replay's rows; the report shows its tables): per
replayed step, two bars, replayed and recorded, each split by collective: where a job's step
spends its communication on this fabric against where it spent it when it ran. A replay has no
message-size curve (its ops are a job's, not a sweep's), so its rows are drawn here, not there."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from commbench.analysis.points.figures import new_figure
from commbench.analysis.replay import replayrows
from commbench.core.outtext import terminal


def build_figure(df: pd.DataFrame) -> Figure:
    steps = replayrows.steps(df, per_run=True)
    names = sorted({p.collective for s in steps for p in s.parts})
    fig = new_figure(width=11.0, height=max(3.5, 0.9 * len(steps) + 2.2))
    ax = fig.subplots()
    colours = {n: f"C{i % 10}" for i, n in enumerate(names)}
    labels, y, named = [], 0.0, set()
    runs = len({s.run for s in steps}) > 1
    for s in steps:
        for kind in ("replayed", "recorded"):
            left = 0.0
            for part in s.parts:
                ms = (part.time_us if kind == "replayed" else part.recorded_us or 0.0) / 1e3
                ax.barh(y, ms, left=left, color=colours[part.collective], hatch="//" if kind == "recorded" else None,
                        edgecolor="white", label=None if part.collective in named else part.collective)
                named.add(part.collective)
                left += ms
            setting = f" {terminal(s.setting, 40)}" if s.setting else ""
            setting += f" [{terminal(s.run, 40)}]" if runs else ""
            labels.append((y, f"{terminal(s.title(), 40)}{setting}: {kind}"))
            y += 1.0
        y += 0.6
    ax.set_yticks([p for p, _ in labels], [t for _, t in labels], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("communication time per step (ms; summed over its ops: overlapping ops count each)")
    ax.legend(loc="lower right", fontsize=8)
    fig.suptitle("Replayed steps by collective: this fabric (solid) against the job as recorded (hatched)",
                 fontsize=11, fontweight="bold")
    return fig
