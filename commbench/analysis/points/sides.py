"""One side of a comparison as compare reads it: its points, their values and summaries.

A point is one value of KEY_COLUMNS (collective, dtype, size, placement, ranks, workload, ...,
core/columns.py); its rows are the repetitions. The rows are grouped once, by the one aggregation
(analysis/points/pointtable.py, over files or a frame in memory); here is what compare needs of a side: each
point's repetition values, its median, min and max, whether its rows hold per-iteration samples
(damaged ones refuse the comparison), and the repetitions that could not be measured (`Lost`, a
failed pairs link).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from commbench.analysis.points.frames import printable, short
from commbench.core.columns import POINT_KEY
from commbench.core.errors import BadInput
from commbench.core.outtext import terminal
from commbench.core.units import format_size

KEY_COLUMNS = POINT_KEY  # a point (core/columns.py: the registry's key columns)
ERROR_CHARS = 200  # of a failed row's reason, in a note


# Workloads that measure the same thing: an imported nccl-tests log and commbench's own sweep are
# both one collective at one size, with the same definitions (docs/RESULTS.md, "Definitions"), so
# they pair up; the workload then shows as a difference between the sides.
SAME_MEASUREMENT = {"nccl-tests": "sweep"}


@dataclass
class Lost:
    """A point's repetitions that could not be measured (status in linkrank.FAILED: a pairs link)."""

    statuses: dict[str, int]  # status -> repetitions, most frequent first
    error: str | None  # the most common reason, on one line

    @property
    def count(self) -> int:
        return sum(self.statuses.values())

    def text(self, of: int) -> str:
        """'unreachable in 3 of 3 repetitions: no route to host' (`of`: the side's repetitions)."""
        what = ", ".join(f"{s} in {n}" for s, n in self.statuses.items())
        return f"{what} of {of} repetition{'s' if of != 1 else ''}" + (f": {self.error}" if self.error else "")


def lost_points(keys: list[tuple], statuses: list, errors: list) -> dict[tuple, Lost]:
    """Point -> its failed repetitions, from the failed rows' point keys (normalised as the
    aggregation normalises them), statuses and errors, in the order of their first row."""
    counts: dict[tuple, Counter] = {}
    reasons: dict[tuple, Counter] = {}
    for key, status, error in zip(keys, statuses, errors):
        counts.setdefault(key, Counter())[str(status)] += 1
        if error:
            reasons.setdefault(key, Counter())[short(" ".join(printable(str(error)).split()), ERROR_CHARS)] += 1
    return {k: Lost(dict(c.most_common()), reasons[k].most_common(1)[0][0] if k in reasons else None)
            for k, c in counts.items()}


def describe_point(key: dict) -> str:
    """A point's key as messages name it: 'all_reduce float32 64 MiB in-place on 4 ranks', with its
    rail and setting when it has them ('... on 4 ranks GLOO_SOCKET_IFNAME=eth1'). Every value from
    the file on one terminal line, escaped and bounded (core/outtext.py)."""
    place = "in-place" if key.get("in_place") else "out-of-place"
    link = f" {terminal(key['src_host'])} -> {terminal(key.get('dst_host'))}" if key.get("src_host") else ""
    rail = f" rail {terminal(key['rail'])}" if key.get("rail") else ""
    setting = f" {terminal(key['settings'])}" if key.get("settings") else ""
    return (f"{terminal(key.get('collective'))}{link}{rail} {terminal(key.get('dtype'))} "
            f"{format_size(key.get('size_bytes') or 0)} {place} on {terminal(key.get('world_size'))} ranks{setting}")


@dataclass
class Side:
    """The points of one side; everything per row is an array (a million rows). Row i is the i-th
    value of the aggregation (the points' repetitions, one point after the other)."""

    name: str
    rows: dict[tuple, np.ndarray]  # point -> its rows, ascending; points in the order of their first row
    value: np.ndarray  # the busbw (or algbw, world_size 1) of every row
    summary: dict[tuple, tuple[float, float, float]]  # point -> median, min, max of its values
    has_samples: np.ndarray  # per row: it holds per-iteration samples
    damaged: np.ndarray  # per row: samples with a time or a sample that is not a positive number

    def check_samples(self, idx: np.ndarray, key: dict) -> bool:
        """Whether any of the point's rows holds samples; a damaged one fails the comparison."""
        if self.damaged[idx].any():
            raise BadInput(f"the {self.name} results hold a time that is not a positive number for "
                           f"{describe_point(key)}: a damaged or hand-edited file; re-run the measurement")
        return bool(self.has_samples[idx].any())

    def iteration_values(self, idx: np.ndarray) -> np.ndarray:
        """Per-iteration bandwidth of every timed iteration of the point (after check_samples)."""
        raise NotImplementedError


def summarise(keys: list[tuple], point: np.ndarray, values: np.ndarray) -> dict[tuple, tuple[float, float, float]]:
    """Point -> median, min and max of its values, every point at once: the values sorted, then
    read at positions (the median of an even count is the mean of the middle two, as np.median
    takes it). The engine's sides (analysis/points/pointtable.py) are summarised here too."""
    counts = np.bincount(point, minlength=len(keys))
    ends = np.cumsum(counts)
    ordered = values[np.lexsort((values, point))]
    starts = ends - counts
    low, high = ordered[starts + (counts - 1) // 2], ordered[starts + counts // 2]
    with np.errstate(over="ignore"):
        median = np.where(counts % 2 == 1, low, (low + high) / 2)
    return dict(zip(keys, zip(median.tolist(), ordered[starts].tolist(), ordered[ends - 1].tolist())))
