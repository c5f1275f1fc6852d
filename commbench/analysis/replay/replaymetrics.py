"""A replay's gauges in `commbench export` (docs/METRICS.md): per replayed trace, its latest run's
steps, each step's communication time replayed and as the job recorded it, and each collective's part
of the step (analysis/replay/replayrows.py's one aggregation); at most MAX_TRACES traces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from commbench.analysis.replay import replayrows

if TYPE_CHECKING:
    from commbench.analysis.points.pointtable import Query
    from commbench.analysis.points.section import Gauges

# Traces exported, by name: aggregating one costs about 25 ms (replayrows.steps), so 10,000 traces
# took 207 s; the series cap alone (4096 a family, each trace at least one step) would still allow 100 s.
MAX_TRACES = 256


def replay_metrics(q: Query, m: Gauges) -> None:
    """Per replayed trace, its latest run: each step's communication time, replayed and as the job
    recorded it, and each collective's part of the step (analysis/replay/replayrows.py's one aggregation).
    The first MAX_TRACES traces by name only; the others' series counted as dropped."""
    rows = replayrows.rows_in(q)
    if rows.empty:
        return
    rows = rows.assign(_trace=rows["trace_file"].fillna("").astype(str))
    last = rows.sort_values("started_at", kind="stable").groupby("_trace").tail(1).set_index("_trace")["run_id"]
    latest = rows[rows["run_id"] == rows["_trace"].map(last)]  # each trace's latest run, in one pass
    traces = sorted(last.index)
    if len(traces) > MAX_TRACES:
        _dropped(m, latest[latest["_trace"].isin(traces[MAX_TRACES:])])
        latest = latest[latest["_trace"].isin(traces[:MAX_TRACES])]
    for trace, of_trace in latest.groupby("_trace", sort=True):
        for s in replayrows.steps(of_trace):
            base = {"trace": trace, "step": "outside" if s.trace_step == replayrows.OUTSIDE else s.trace_step,
                    "setting": s.setting}
            if s.time_us is not None:
                m.set("replay_step_seconds", "A replayed step's communication time (median over repetitions, max "
                      "over ranks), the latest run of the trace.", base, s.time_us / 1e6)
            if s.recorded_us is not None:
                m.set("replay_step_recorded_seconds", "The same step's communication time as the job recorded it.",
                      base, s.recorded_us / 1e6)
            for part in s.parts:
                m.set("replay_collective_seconds", "A collective's time within a replayed step: the sum of its ops' "
                      "medians.", {**base, "collective": part.collective}, part.time_us / 1e6)


def _dropped(m: Gauges, rows: pd.DataFrame) -> None:
    """The series the traces past MAX_TRACES would have made, counted without aggregating them:
    their steps (replayed and recorded) and their steps' collectives."""
    rows = rows.assign(_setting=rows["settings"].fillna("").astype(str))
    is_step = rows["collective"] == replayrows.STEP
    steps = rows[is_step]
    key = ["_trace", "trace_step", "_setting"]
    m.dropped("replay_step_seconds", len(steps[steps["time_us"].notna()].drop_duplicates(key)))
    m.dropped("replay_step_recorded_seconds", len(steps[steps["recorded_us"].notna()].drop_duplicates(key)))
    m.dropped("replay_collective_seconds", len(rows[~is_step].drop_duplicates([*key, "collective"])))
