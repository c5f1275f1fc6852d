"""A replay's rows read back (issue #42 part 4, docs/REPLAY.md "Reading a replay"): each replayed
step's time, its time by collective (the sum of its op rows' times, replayed and recorded), its
largest ops and replay against recorded; for compare, the collectives that account for a step's
change. The one aggregation of replay rows: the report's Replay section and compare read it.

A point's value over repetitions is its median (as compare's per-point table takes it); a
collective's time in a step is the sum of its ops' medians. Ops issued asynchronously overlap,
so the collectives' sums need not add up to the step's time: shares of a change are shares of
the collectives' summed change, never of the step's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from commbench.analysis.points.frames import scalar
from commbench.core.replayprogram import STEP_COLLECTIVE

if TYPE_CHECKING:
    from commbench.analysis.points.pointtable import Aggregate, Query

WORKLOAD = "replay"
STEP = STEP_COLLECTIVE  # a step row's collective (core/replayprogram.py; docs/REPLAY.md)
OUTSIDE = -1  # trace_step of the ops outside any step the job marked
# What this module reads of a replay row; settings and run_id only where a file has them.
COLUMNS = ("workload", "collective", "trace_step", "trace_steps", "trace_op", "trace_group", "trace_file",
           "size_bytes", "dtype", "time_us", "recorded_us", "repetition", "settings", "run_id", "started_at")
LARGEST = 5  # ops listed per step


@dataclass(frozen=True)
class Op:
    """One op of a replayed step: its time is the median over repetitions."""

    trace_op: int
    collective: str
    size_bytes: int | None
    dtype: str | None
    group: str | None
    time_us: float | None
    recorded_us: float | None


@dataclass(frozen=True)
class Part:
    """A collective's part of a step: its ops' calls, bytes and summed times."""

    collective: str
    calls: int
    size_bytes: int
    time_us: float
    recorded_us: float | None  # None when any of its ops has no recorded time


@dataclass(frozen=True)
class Step:
    """A replayed step: the step row's median time, and its ops grouped by collective."""

    trace_step: int
    trace_steps: str  # the recorded steps it stands for ("0-3")
    time_us: float | None  # None: no step row (only its ops were read)
    recorded_us: float | None
    ops: tuple[Op, ...]  # issue order
    setting: str = ""  # its --env/--mtu setting, "" for none
    run: str = ""  # its run_id where steps are read run by run
    parts: tuple[Part, ...] = field(default=())  # largest replayed time first

    @property
    def ratio(self) -> float | None:
        """Replayed over recorded: above 1, the fabric under test took longer than the job's own."""
        return _ratio(self.time_us, self.recorded_us)

    def largest(self, n: int = LARGEST) -> list[Op]:
        return sorted((o for o in self.ops if o.time_us is not None), key=lambda o: -(o.time_us or 0.0))[:n]

    def title(self) -> str:
        """'step 0 (steps 0-3)', 'step 2', 'ops outside any step'."""
        if self.trace_step == OUTSIDE:
            return "ops outside any step"
        name = f"step {self.trace_step}"
        return name if self.trace_steps in ("", str(self.trace_step)) else f"{name} (steps {self.trace_steps})"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def is_replay(df: pd.DataFrame | None) -> bool:
    """Whether a frame holds replay rows."""
    return df is not None and "workload" in df.columns and bool((df["workload"] == WORKLOAD).any())


def rows_of(agg: Aggregate) -> pd.DataFrame:
    """A compared side's replay rows (COLUMNS), read through the engine's view of its files or
    frame: an empty frame for results without replay rows."""
    return rows_in(agg.query)


def rows_in(q: Query | None) -> pd.DataFrame:
    """The replay rows (COLUMNS) of a query's files or frame (engine.Query): an empty frame for
    results without them."""
    if q is None or "trace_step" not in q.source.columns or "workload" not in q.source.columns:
        return pd.DataFrame(columns=list(COLUMNS))
    from commbench.analysis.points.pointtable import quote

    names = [quote(c) if c in q.source.columns else f"NULL AS {quote(c)}" for c in COLUMNS]
    return q.run(f"SELECT {', '.join(names)} FROM rows WHERE workload = '{WORKLOAD}' AND NOT excluded "
                 "ORDER BY gi").to_pandas()


def steps(df: pd.DataFrame, per_run: bool = False) -> list[Step]:
    """The replayed steps of these rows, in step order (the ops outside any step last); with
    per_run each run's steps apart (the report), else every run's repetitions together (compare)."""
    if not is_replay(df):
        return []
    rows = df[df["workload"] == WORKLOAD]
    if "trace_step" not in rows.columns:
        return []
    rows = rows.assign(_setting=_text(rows, "settings"), _run=_text(rows, "run_id") if per_run else "",
                       _step=rows["trace_step"].map(scalar))
    rows = rows[rows["_step"].notna()]
    out = []
    for (run, setting, step), group in rows.groupby(["_run", "_setting", "_step"], sort=False):
        out.append(_step(group, int(step), str(setting), str(run)))
    return sorted(out, key=lambda s: (s.run, s.setting, s.trace_step == OUTSIDE, s.trace_step))


def _text(rows: pd.DataFrame, name: str) -> Any:
    if name not in rows.columns:
        return ""
    return rows[name].map(lambda v: "" if scalar(v) is None else str(v))


def _median(values: Iterable[Any]) -> float | None:
    got = pd.Series([scalar(v) for v in values], dtype="float64").dropna()
    return float(got.median()) if len(got) else None


def _step(group: pd.DataFrame, step: int, setting: str, run: str) -> Step:
    is_step = group["collective"] == STEP
    head = group[is_step]
    spans = [s for s in _text(group, "trace_steps") if s]
    ops = _ops(group[~is_step])
    return Step(trace_step=step, trace_steps=spans[0] if spans else "",
                time_us=_median(head["time_us"]) if len(head) else None,
                recorded_us=_median(head["recorded_us"]) if len(head) and "recorded_us" in head else None,
                ops=ops, setting=setting, run=run, parts=parts_of(ops))


def _ops(rows: pd.DataFrame) -> tuple[Op, ...]:
    if not len(rows) or "trace_op" not in rows.columns:
        return ()
    rows = rows[rows["trace_op"].map(scalar).notna()]
    out = []
    for index, op in rows.groupby(rows["trace_op"].map(lambda v: int(scalar(v))), sort=True):
        first = op.iloc[0]
        out.append(Op(trace_op=int(index), collective=str(first["collective"]), size_bytes=scalar(first["size_bytes"]),
                      dtype=scalar(first.get("dtype")), group=scalar(first.get("trace_group")),
                      time_us=_median(op["time_us"]),
                      recorded_us=_median(op["recorded_us"]) if "recorded_us" in op else None))
    return tuple(out)


def parts_of(ops: Iterable[Op]) -> tuple[Part, ...]:
    """Per collective: its calls, bytes, and the sums of its ops' replayed and recorded times
    (the recorded sum only where every op has one); the largest replayed time first."""
    by: dict[str, list[Op]] = {}
    for o in ops:
        by.setdefault(o.collective, []).append(o)
    parts = []
    for name, mine in by.items():
        recorded = [o.recorded_us for o in mine]
        parts.append(Part(collective=name, calls=len(mine), size_bytes=sum(o.size_bytes or 0 for o in mine),
                          time_us=sum(o.time_us or 0.0 for o in mine),
                          recorded_us=None if any(r is None for r in recorded) else sum(r or 0.0 for r in recorded)))
    return tuple(sorted(parts, key=lambda p: (-p.time_us, p.collective)))


# ---- compare: what changed between two replays of one trace ----


@dataclass(frozen=True)
class Cause:
    """A collective's part of a step's change: its share of the collectives' summed change."""

    collective: str
    share: float  # of the summed change; negative: it moved the other way
    change_us: float
    calls: int


@dataclass(frozen=True)
class StepChange:
    """A replayed step on both sides: its times, compare's verdict for its point, and the
    collectives that account for the change, largest share first."""

    trace_step: int
    title: str
    setting: str
    before_us: float | None
    after_us: float | None
    verdict: str
    causes: list[Cause]


def changes(before: pd.DataFrame, after: pd.DataFrame, verdicts: dict[tuple[int, str], str]) -> list[StepChange]:
    """The steps replayed on both sides, each with compare's verdict for its step point
    (`verdicts`: (trace_step, setting) -> verdict) and its causes."""
    after_steps = {(s.trace_step, s.setting): s for s in steps(after)}
    out = []
    for b in steps(before):
        a = after_steps.get((b.trace_step, b.setting))
        if a is None:
            continue
        out.append(StepChange(trace_step=b.trace_step, title=b.title(), setting=b.setting, before_us=b.time_us,
                              after_us=a.time_us, verdict=verdicts.get((b.trace_step, b.setting), "not compared"),
                              causes=causes(b.parts, a.parts)))
    return out


def causes(before: Iterable[Part], after: Iterable[Part]) -> list[Cause]:
    """Each collective's change in summed time, as a share of all of theirs; those that moved with
    the whole first, largest share first; none when nothing moved."""
    b, a = {p.collective: p for p in before}, {p.collective: p for p in after}
    deltas = {c: (a[c].time_us if c in a else 0.0) - (b[c].time_us if c in b else 0.0) for c in {*b, *a}}
    total = sum(deltas.values())
    if not total:
        return []
    calls = {c: (a.get(c) or b[c]).calls for c in deltas}
    out = [Cause(c, d / total, d, calls[c]) for c, d in deltas.items() if d]
    return sorted(out, key=lambda x: (-x.share, x.collective))


def step_verdicts(points: Iterable[Any]) -> dict[tuple[int, str], str]:
    """compare's verdict of each step point: (trace_step, setting) -> verdict."""
    out = {}
    for p in points:
        key = p.key
        if key.get("workload") == WORKLOAD and key.get("collective") == STEP and key.get("trace_step") is not None:
            out[(int(key["trace_step"]), str(key.get("settings") or ""))] = p.verdict
    return out


def compared(before: Aggregate, after: Aggregate, points: Iterable[Any]) -> list[StepChange]:
    """compare's hook: the replayed steps of two compared sides ([] unless both hold replay rows)."""
    points = list(points)
    if not any(p.key.get("workload") == WORKLOAD for p in points):  # no query over a sweep's million rows
        return []
    b = rows_of(before)
    if not len(b):
        return []
    a = rows_of(after)
    return changes(b, a, step_verdicts(points)) if len(a) else []
