"""The host x host heat map of `commbench pairs` results, for `commbench plot`.

Rows are senders, columns receivers (bidir: the same value in both triangles), each cell the
median GB/s over repetitions. Slow links are dark, the slowest ones (as many as one host takes
part in) get a box, and hosts singled out as slow are named in red. One map per run, side by side.

Links that could not be measured (`status` unreachable, timeout or error: docs/RESULTS.md) have
no bandwidth, and a failed link is never drawn as a slow one:

- failed in every repetition: a grey hatched cell holding the status (`unreachable`, `timeout`,
  `error`; the most frequent one when the repetitions differ). The colour scale is set by the
  measured cells only. Above MAX_ANNOTATED endpoints a side the cell holds the status's first
  letter (`U`, `T`, `E`).
- failed in some repetitions, measured in the others: the median of the measured repetitions,
  coloured as any cell, its value followed by `!` (only `!` above MAX_ANNOTATED).

Rows of the confirmation round (`confirm` true: a suspect re-measured against hosts that passed)
are evidence for the fault verdict (linkfaults.faults, the report's "Faults" section), not cells.
The title says how many links were not measured and what the verdict names (`failed: host n3
(unreachable)`); a host it names is in red like a slow one.

Rows with rails (`pairs --per-rail`): one map per run and rail, each judged on its own rail (a
host in red on eth1's map has a slow or failed eth1, not a slow host).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from commbench.analysis.pairs import linkfaults, linkrank
from commbench.analysis.points.figures import draw_heatmap, mpl_text, new_figure
from commbench.analysis.points.frames import is_true, short
from commbench.analysis.points.runs import describe_run, run_name
from commbench.core.columns import LINK_KEY
from commbench.core.errors import BadInput
from commbench.core.units import format_size

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

MAX_RUNS = 4
MAX_ANNOTATED = 16  # endpoints per side up to which every cell shows its value
LINK_COLUMNS = LINK_KEY  # core/columns.py
PARTLY_FAILED_MARK = "!"
MAX_BLAMED = 4  # culprits named in a title


def pairs_rows(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """The rows of `commbench pairs` runs (None when there are none)."""
    if df is None or len(df) == 0 or "workload" not in df.columns:
        return None
    rows = df[df["workload"] == "pairs"]
    return rows if len(rows) else None


def matrix(links: list[linkrank.Link]) -> tuple[list[str], np.ndarray]:
    """(endpoint names in rank order, GB/s with senders on rows and receivers on columns; NaN where
    nothing was measured, e.g. the diagonal)."""
    names = linkrank.endpoint_order(links)
    at = {n: i for i, n in enumerate(names)}
    values = np.full((len(names), len(names)), np.nan)
    for ln in links:
        values[at[ln.src], at[ln.dst]] = ln.gbps
        if ln.bidir:
            values[at[ln.dst], at[ln.src]] = ln.gbps
    return names, values


# --------------------------------------------------------------------------- failed links


@dataclass(frozen=True)
class Fault:
    """A link that failed in `failed` of its `total` repetitions (confirmation rows left out)."""

    status: str  # the most frequent failed status (ties: in linkrank.FAILED's order)
    failed: int
    total: int

    @property
    def partly(self) -> bool:
        return self.failed < self.total


def matrix_rows(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """The pairs rows a heat map is drawn from: a link named, not of the confirmation round."""
    rows = pairs_rows(df)
    if rows is None or any(c not in rows.columns for c in LINK_COLUMNS):
        return None
    rows = rows.dropna(subset=list(LINK_COLUMNS))
    confirm = is_true(rows, "confirm")
    if confirm.any():
        rows = rows[~confirm]
    return rows if len(rows) else None


def _failed_mask(rows: pd.DataFrame) -> np.ndarray:
    if "status" not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    status = rows["status"]
    if status.isna().all():  # nothing failed: the fault vocabulary is not needed
        return np.zeros(len(rows), dtype=bool)
    return status.isin(linkrank.FAILED).to_numpy(dtype=bool)


def failed_links(run: pd.DataFrame) -> dict[tuple[int, int], Fault]:
    """(src_rank, dst_rank) -> Fault, for every link of one run's matrix rows that failed at least once."""
    failed = _failed_mask(run)
    if not failed.any():
        return {}
    order = {s: i for i, s in enumerate(linkrank.FAILED)}
    out = {}
    status = run["status"].to_numpy(dtype=object)
    keys = [run["src_rank"].astype(int), run["dst_rank"].astype(int)]
    for (s, d), idx in run.groupby(keys, sort=False).indices.items():
        statuses = Counter(str(v) for v in status[idx][failed[idx]])
        if statuses:
            top = min(statuses, key=lambda v: (-statuses[v], order.get(v, len(order)), v))
            out[(int(s), int(d))] = Fault(top, sum(statuses.values()), len(idx))
    return out


def endpoints(run: pd.DataFrame) -> list[tuple[int, str]]:
    """(rank, name) of every endpoint of one run, in rank order, measured or not: hosts, or
    host/rRANK when a host runs several (the names linkrank gives)."""
    ends = {(str(h), int(r)) for h, r in zip(run["src_host"], run["src_rank"])} | \
           {(str(h), int(r)) for h, r in zip(run["dst_host"], run["dst_rank"])}
    per_host = Counter(h for h, _ in ends)
    return sorted((r, h if per_host[h] == 1 else f"{h}/r{r}") for h, r in ends)


# --------------------------------------------------------------------------- the figure


def build_figure(df: pd.DataFrame | None, threshold: float = linkrank.DEFAULT_THRESHOLD) -> Figure:
    rows = matrix_rows(df)
    if rows is None:
        raise BadInput("the results hold no pairs rows with src/dst columns: pass a file written by commbench pairs")
    runs = {key: run for key, _, _, run in linkrank.runs_and_rails(rows)}  # a map per run, and per rail
    held = len(runs)
    if held > MAX_RUNS:  # a nightly folder: the newest maps (run ids begin with their time), the rest by trend
        newest = sorted(runs, key=lambda k: (str(runs[k]["run_id"].iloc[0]), str(k)))[-MAX_RUNS:]
        runs = {k: runs[k] for k in newest}
    measured = linkrank.links_by_run(rows)
    every = pairs_rows(df)  # with the confirmation rows: the fault verdict's evidence
    assert every is not None  # it holds matrix_rows'
    n = max(len(endpoints(run)) for run in runs.values())
    side = min(14.0, max(4.5, 0.75 * n + 2.5))
    fig = new_figure(width=(side + 1.6) * len(runs), height=side + 1.4)
    axes = fig.subplots(1, len(runs), squeeze=False)[0]
    for ax, (key, run) in zip(axes, runs.items()):
        bidir = bool((run["collective"] == "sendrecv_bidir").all())
        scope = every[every["run_id"] == str(run["run_id"].iloc[0])]
        rail = linkrank.column(run, "rail")[0]
        if rail is not None:
            scope = scope[scope["rail"] == rail]
        blamed = linkfaults.faults(scope).named if _failed_mask(run).any() else []
        image = _draw_run(ax, run, measured.get(key, []), threshold, bidir, blamed)
        fig.colorbar(image, ax=ax, label="GB/s" + (" per direction" if bidir else ""), shrink=0.85)
    fig.suptitle("Point-to-point bandwidth between every pair of hosts", fontsize=12, fontweight="bold")
    if held > len(runs):
        fig.text(0.5, 0.005, f"the newest {len(runs)} of {held} pairs runs (a run's rails count one each); "
                 "all of them over time: commbench trend", ha="center", va="bottom", fontsize=9)
    return fig


def _cells(run: pd.DataFrame, links: list[linkrank.Link], bidir: bool) -> tuple[
        list[str], np.ndarray, list[list[str]], list[tuple[int, int]], dict[tuple[int, int], Fault]]:
    """(names, values, texts, hatched cells, faults) of one run's matrix."""
    ends = endpoints(run)
    names = [name for _, name in ends]
    at = {rank: i for i, (rank, _) in enumerate(ends)}
    both = (lambda i, j: ((i, j), (j, i))) if bidir else (lambda i, j: ((i, j),))  # bidir: a row per pair
    values = np.full((len(names), len(names)), np.nan)
    for ln in links:
        for cell in both(at[_rank(ln.src_rank)], at[_rank(ln.dst_rank)]):
            values[cell] = ln.gbps
    annotate = len(names) <= MAX_ANNOTATED
    texts = [[f"{v:.3g}" if np.isfinite(v) and annotate else "" for v in row] for row in values]
    found = failed_links(run)
    hatched = []
    for (s, d), fault in found.items():
        for i, j in both(at[s], at[d]):
            if fault.partly and np.isfinite(values[i, j]):
                texts[i][j] += PARTLY_FAILED_MARK
            else:
                values[i, j] = np.nan
                texts[i][j] = fault.status if annotate else fault.status[:1].upper()
                hatched.append((i, j))
    return names, values, texts, hatched, found


def _draw_run(ax: Axes, run: pd.DataFrame, links: list[linkrank.Link], threshold: float, bidir: bool,
              blamed: list[linkfaults.Culprit]) -> AxesImage:
    first = dict(run.iloc[0])
    names, values, texts, hatched, found = _cells(run, links, bidir)
    ranking = linkrank.rank_links(links, threshold) if links else None
    at = {rank: i for i, (rank, _) in enumerate(endpoints(run))}
    marked = {(at[_rank(ln.src_rank)], at[_rank(ln.dst_rank)]) for ln in ranking.slowest} if ranking else set()
    if bidir:
        marked |= {(j, i) for i, j in marked}
    image = draw_heatmap(ax, values, names, names, texts=texts, higher_is_better=True, marked=sorted(marked),
                         hatched=hatched)
    rank_of = {ln.src: ln.src_rank for ln in links} | {ln.dst: ln.dst_rank for ln in links}
    slow = {names[at[_rank(rank_of[e.name])]] for e in ranking.singled_out} if ranking else set()
    slow |= {c.name for c in blamed if c.kind == "host"}
    shown = {mpl_text(name) for name in slow}  # as draw_heatmap wrote the tick labels (core/outtext.py figure)
    for label in list(ax.get_xticklabels()) + list(ax.get_yticklabels()):
        if label.get_text() in shown:
            label.set_color("#c00000")
            label.set_fontweight("bold")
    for label in ax.get_xticklabels():
        label.set_rotation(35)
        label.set_horizontalalignment("right")
    ax.set_xlabel("host" if bidir else "receiver")
    ax.set_ylabel("host" if bidir else "sender")
    what = f"{first.get('collective')} of {format_size(int(first.get('size_bytes') or 0))}"
    rail = linkrank.column(run, "rail")[0]
    if rail is not None:
        what += f", rail {rail}"
    ax.set_title(mpl_text(f"{run_name(first)}: {what}\n{short(describe_run(first), 90)}\n"
                          f"{_verdict_line(ranking, threshold, rail)}{_fault_line(found, bidir, blamed)}"),
                 fontsize=8.5, loc="left")
    return image


def _rank(rank: int | None) -> int:
    """A link's rank: every link of the matrix rows has both (matrix_rows drops rows without them)."""
    assert rank is not None
    return rank


def _verdict_line(ranking: linkrank.Ranking | None, threshold: float, rail: str | None = None) -> str:
    if ranking is None:
        return "no link was measured"
    found = linkrank.verdict(ranking)
    if found:
        verdict = found.split(" (")[0]
        if rail is not None:  # judged against the same rail of the other hosts: the host's rail is slow
            for what in ("slow hosts:", "slow host:", "slow endpoints:", "slow endpoint:"):
                verdict = verdict.replace(what, f"slow on rail {rail}:")
    elif ranking.note:
        verdict = "no host singled out (two endpoints)"
    else:
        verdict = f"no host stands out (threshold {threshold:.0%})"
    return f"boxed: the {len(ranking.slowest)} slowest links · {verdict}"


def _fault_line(found: dict[tuple[int, int], Fault], bidir: bool, blamed: list[linkfaults.Culprit]) -> str:
    """The title's line on failed links and whom their pattern blames ('' when none failed)."""
    down = [f for f in found.values() if not f.partly]
    partly = len(found) - len(down)
    what = "pair" if bidir else "link"
    parts = []
    if down:
        statuses = ", ".join(sorted({f.status for f in down}))
        parts.append(f"hatched: {len(down)} {what}{'s' if len(down) > 1 else ''} not measured ({statuses})")
    if partly:
        parts.append(f"{PARTLY_FAILED_MARK}: {partly} {what}{'s' if partly > 1 else ''} failed in some repetitions")
    line = ("\n" + " · ".join(parts)) if parts else ""
    if blamed:
        shown = [f"{c.kind} {c.name} ({c.status})" for c in blamed[:MAX_BLAMED]]
        more = f" and {len(blamed) - MAX_BLAMED} more" if len(blamed) > MAX_BLAMED else ""
        line += "\nfailed: " + ", ".join(shown) + more
    return line
