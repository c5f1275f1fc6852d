"""A replay's gauges in `commbench export` (docs/METRICS.md): per replayed trace, its latest run's
steps, each step's communication time replayed and as the job recorded it, and each collective's part
of the step (analysis/replay/replayrows.py's one aggregation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.analysis.replay import replayrows

if TYPE_CHECKING:
    from commbench.analysis.points.pointtable import Query
    from commbench.analysis.points.section import Gauges


def replay_metrics(q: Query, m: Gauges) -> None:
    """Per replayed trace, its latest run: each step's communication time, replayed and as the job
    recorded it, and each collective's part of the step (analysis/replay/replayrows.py's one aggregation)."""
    rows = replayrows.rows_in(q)
    if rows.empty:
        return
    rows = rows.assign(_trace=rows["trace_file"].fillna("").astype(str))
    for trace, of_trace in rows.groupby("_trace", sort=True):
        latest = of_trace[of_trace["run_id"] == of_trace.sort_values("started_at")["run_id"].iloc[-1]]
        for s in replayrows.steps(latest):
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
