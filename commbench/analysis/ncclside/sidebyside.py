"""commbench next to nccl-tests on the same GPUs: one ratio per collective, size and placement,
and whether it meets the goal (docs/NCCL_TESTS.md, "Side by side").

Both sides are results files: a `commbench sweep` (workload sweep) and an nccl-tests run or log
imported by `commbench nccl-tests run|import` (workload nccl-tests). A point is (collective,
dtype, size, placement); each side's value is its median over the rows of that point (commbench:
the median iteration of each repetition; nccl-tests: its mean over -n iterations).

The ratio is nccl-tests' time per operation over commbench's: commbench's speed as a share of
nccl-tests'. With two or more ranks that is exactly the ratio of their bus bandwidths (busbw is
bytes x factor / time, the factor the same on both sides); with one rank busbw is 0 by
definition, so the ratio is of time per operation alone.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field

import pandas as pd

from commbench.analysis.points.frames import scalar
from commbench.analysis.points.mdtext import md_table
from commbench.core.outtext import LINE_LIMIT, csv_cell, markdown, terminal
from commbench.analysis.points.runs import placement_name
from commbench.core.columns import CURVE_POINT
from commbench.core.errors import BadInput
from commbench.core.units import format_size

# The goal (issue #22): from 64 MiB, where busbw applies, commbench's busbw at least 97% of
# nccl-tests'; below 64 KiB, time per operation within 5% of nccl-tests' either way.
BUSBW_FROM = 64 * 2**20
BUSBW_GOAL = 0.97
TIME_BELOW = 64 * 2**10
TIME_GOAL = 0.05

READ_COLUMNS = ("collective", "dtype", "size_bytes", "in_place", "world_size", "time_us", "busbw_GBps",
                "workload", "device_name", "nccl_version", "transport", "plan", "backend")
KEY = list(CURVE_POINT)  # core/columns.py: collective, dtype, size_bytes, in_place


@dataclass(frozen=True)
class Pair:
    """One point measured on both sides."""

    collective: str
    dtype: str
    size_bytes: int
    in_place: bool
    commbench_us: float
    nccl_tests_us: float
    commbench_busbw: float
    nccl_tests_busbw: float
    ratio: float  # nccl-tests time / commbench time: above 1, commbench measured it faster
    goal: str  # "busbw >= 0.97", "time within 5%" or "" (no goal at this size)
    met: bool | None  # None where there is no goal


@dataclass
class SideBySide:
    world_size: int
    commbench: str  # what ran on each side, in a few words
    nccl_tests: str
    pairs: list[Pair]
    only_commbench: int = 0  # points one side has and the other lacks
    only_nccl_tests: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def missed(self) -> list[Pair]:
        return [p for p in self.pairs if p.met is False]

    @property
    def judged(self) -> list[Pair]:
        return [p for p in self.pairs if p.met is not None]

    @property
    def verdict(self) -> str:
        if not self.judged:
            return "no point has a goal"
        if self.missed:
            return f"goal missed at {len(self.missed)} of {len(self.judged)} points"
        return f"goal met at all {len(self.judged)} points"

    def exit_code(self) -> int:
        """0: the goal met (or no point has one); 1: missed somewhere (a CI job can gate on it)."""
        return 1 if self.missed else 0

    def to_frame(self) -> pd.DataFrame:
        rows = [asdict(p) for p in self.pairs]
        frame = pd.DataFrame(rows, columns=list(Pair.__dataclass_fields__))
        frame["world_size"] = self.world_size
        return frame


def _goal(size: int, world: int, ratio: float) -> tuple[str, bool | None]:
    if size >= BUSBW_FROM and world > 1:
        return f"busbw >= {BUSBW_GOAL:g}", bool(ratio >= BUSBW_GOAL)
    if size < TIME_BELOW:
        return f"time within {TIME_GOAL:.0%}", bool(abs(1 / ratio - 1) <= TIME_GOAL)
    return "", None


def _side(frame: pd.DataFrame, workload: str, name: str, source: str, fix: str) -> pd.DataFrame:
    rows = frame[frame["workload"] == workload] if "workload" in frame.columns else frame.iloc[0:0]
    rows = rows[rows["time_us"].notna() & (rows["time_us"] > 0)]
    if rows.empty:
        raise BadInput(f"{source} holds no {name} rows with a time: {fix}")
    worlds = sorted({int(w) for w in rows["world_size"].dropna()})
    if len(worlds) != 1:
        raise BadInput(f"{source} holds {name} rows of {len(worlds)} world sizes ({', '.join(map(str, worlds))}): "
                       "pass one run a side")
    return rows


def _graph(rows: pd.DataFrame, key: str) -> int:
    """CUDA graph use in a side's plan: commbench's cuda_graph (calls per graph), nccl-tests' graph (-G)."""
    values = set()
    for text in rows["plan"].dropna().unique() if "plan" in rows.columns else []:
        try:
            plan = json.loads(text)
        except (TypeError, ValueError):
            continue
        values.add(int(plan.get(key) or 0) if isinstance(plan, dict) else 0)
    return max(values, default=0)


def _described(rows: pd.DataFrame, graph: int, graph_words: str) -> str:
    first = {c: scalar(rows[c].dropna().iloc[0]) if c in rows.columns and rows[c].notna().any() else None
             for c in ("device_name", "nccl_version", "transport")}
    words = [f"NCCL {first['nccl_version'] or '?'}"]
    if first["transport"]:
        words.append(f"transport {first['transport']}")
    words.append(graph_words if graph else "plain loop")
    return ", ".join(words)


def _check_modes(cb_graph: int, nt_graph: int) -> None:
    if bool(cb_graph) != bool(nt_graph):
        which = ("commbench used --cuda-graph and nccl-tests ran without -G" if cb_graph
                 else "nccl-tests ran with -G and commbench without --cuda-graph")
        raise BadInput(f"{which}: pair like with like (commbench sweep --cuda-graph with nccl-tests -G 1, "
                       "or neither)")


def side_by_side(commbench: pd.DataFrame, nccl_tests: pd.DataFrame, sources: tuple[str, str]) -> SideBySide:
    """The pairs of points both sides measured, each with its ratio and goal; BadInput when the
    sides cannot be paired (no rows, other world sizes, graph against plain loop, no shared point)."""
    cb = _side(commbench, "sweep", "commbench sweep", sources[0], "pass the parquet file of `commbench sweep`")
    nt = _side(nccl_tests, "nccl-tests", "nccl-tests", sources[1],
               "pass the parquet file of `commbench nccl-tests run` or `nccl-tests import`")
    backends = sorted(set(cb["backend"].dropna().astype(str))) if "backend" in cb.columns else []
    if backends and backends != ["nccl"]:
        raise BadInput(f"the commbench sweep in {sources[0]} ran on {', '.join(backends)}, and nccl-tests measures "
                       "NCCL: run the sweep with --backend nccl on the GPUs nccl-tests ran on")
    world, nt_world = int(cb["world_size"].iloc[0]), int(nt["world_size"].iloc[0])
    if world != nt_world:
        raise BadInput(f"commbench ran {world} ranks and nccl-tests {nt_world}: measure both on the same GPUs "
                       "(nccl-tests -g N in one process, or N processes under mpirun/srun)")
    cb_graph, nt_graph = _graph(cb, "cuda_graph"), _graph(nt, "graph")
    _check_modes(cb_graph, nt_graph)
    mine = cb.groupby(KEY)[["time_us", "busbw_GBps"]].median()
    theirs = nt.groupby(KEY)[["time_us", "busbw_GBps"]].median()
    both = mine.add_suffix("_cb").join(theirs.add_suffix("_nt"), how="inner")
    if both.empty:
        raise BadInput(f"no point is on both sides (commbench: {_points(mine)}; nccl-tests: {_points(theirs)}): "
                       "run both over the same sizes, dtype and collectives")
    pairs = []
    for (coll, dtype, size, in_place), r in both.iterrows():
        ratio = r["time_us_nt"] / r["time_us_cb"]
        goal, met = _goal(int(size), world, ratio)
        pairs.append(Pair(str(coll), str(dtype), int(size), bool(in_place), float(r["time_us_cb"]),
                          float(r["time_us_nt"]), float(r["busbw_GBps_cb"]), float(r["busbw_GBps_nt"]),
                          float(ratio), goal, met))
    result = SideBySide(world, _described(cb, cb_graph, f"CUDA graph of {cb_graph} calls a replay"),
                        _described(nt, nt_graph, f"CUDA graph (-G {nt_graph})"), pairs,
                        only_commbench=len(mine) - len(both), only_nccl_tests=len(theirs) - len(both))
    if world == 1:
        result.notes.append("one rank: busbw is 0 by definition, so the ratio is of time per operation and the "
                            f"busbw goal from {format_size(BUSBW_FROM)} does not apply")
    return result


def _points(frame: pd.DataFrame) -> str:
    colls = sorted({terminal(k[0]) for k in frame.index})
    sizes = sorted({int(k[2]) for k in frame.index})
    return f"{', '.join(colls)} at {format_size(sizes[0])}..{format_size(sizes[-1])}" if sizes else "none"


_HEADERS = ["collective", "size", "place", "commbench us", "nccl-tests us", "commbench busbw",
            "nccl-tests busbw", "ratio", "goal", ""]


def _cells(p: Pair) -> list[str]:
    mark = "" if p.met is None else ("ok" if p.met else "MISS")
    return [p.collective, format_size(p.size_bytes), placement_name(p.in_place), f"{p.commbench_us:.2f}",
            f"{p.nccl_tests_us:.2f}", f"{p.commbench_busbw:.2f}", f"{p.nccl_tests_busbw:.2f}",
            f"{p.ratio:.3f}" if math.isfinite(p.ratio) else "n/a", p.goal, mark]


def _intro(s: SideBySide) -> list[str]:
    lines = [f"commbench vs nccl-tests, {s.world_size} rank(s)",
             f"  commbench:  {terminal(s.commbench)}", f"  nccl-tests: {terminal(s.nccl_tests)}",
             "  ratio = nccl-tests time / commbench time (1.000: the same; busbw ratio from 2 ranks)"]
    lines += [f"  note: {terminal(n, LINE_LIMIT)}" for n in s.notes]
    if s.only_commbench or s.only_nccl_tests:
        lines.append(f"  unpaired: {s.only_commbench} point(s) only commbench measured, "
                     f"{s.only_nccl_tests} only nccl-tests")
    return lines


def render_table(s: SideBySide) -> str:
    """For a terminal: every value from the files escaped and bounded (core/outtext.py)."""
    cells = [_HEADERS] + [[terminal(c) for c in _cells(p)] for p in s.pairs]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_HEADERS))]
    right = {1, 3, 4, 5, 6, 7}
    out = _intro(s) + [""]
    for row in cells:
        out.append("  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    out += ["", f"verdict: {s.verdict}"]
    return "\n".join(out) + "\n"


def render_markdown(s: SideBySide) -> str:
    """For a ticket: md_table and markdown() keep every value from the files inert."""
    intro = [f"**commbench vs nccl-tests**, {s.world_size} rank(s): commbench {markdown(s.commbench)}; "
             f"nccl-tests {markdown(s.nccl_tests)}. Ratio = nccl-tests time / commbench time."]
    intro += [f"_{markdown(n, LINE_LIMIT)}_" for n in s.notes]
    table = md_table(_HEADERS, [_cells(p) for p in s.pairs], right=[1, 3, 4, 5, 6, 7])
    return "\n\n".join(intro + [table, f"Verdict: **{s.verdict}**."]) + "\n"


def render_csv(s: SideBySide) -> str:
    """For a spreadsheet: each distinct text value through csv_cell (no cell starts a formula, no
    control character) and every text cell quoted, as OWASP recommends against CSV injection."""
    frame = s.to_frame()
    for name in ("collective", "dtype", "goal"):
        cells = {v: csv_cell(v) for v in frame[name].unique()}
        frame[name] = frame[name].map(cells)
    return frame.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC)
