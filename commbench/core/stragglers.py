"""Stragglers: ranks and hosts that reach the collectives late, found from the per-rank columns of a run.

Every point stores each rank's median arrival skew (`rank_skew_us`, docs/RESULTS.md: how far the
rank entered behind the first rank to enter, from the time it spends inside a collective that all
ranks leave together). At one point a rank is late when its skew stands out from the other ranks':

- by at least max(ABS_FLOOR_US, REL_FLOOR x the point's time) over the other ranks' median skew,
  so that noise never names a rank (gloo on busy cores moves skews by tens of microseconds, and
  a ring's last hop makes one rank leave a little after the others);
- and, with MIN_WORLD_FOR_Z ranks or more, with a robust z-score (median and MAD over the ranks,
  normal-scaled) of at least Z_MIN. With 2 ranks the MAD cannot single one out (the z of either
  of two values is always 0.67) and with 3 it is zero as soon as two ranks agree, so small worlds
  rely on the comparison with the other ranks' median alone.

A host of 2 or more ranks is named instead of its ranks when all of them are late together (the
slow-host section below): with 2 hosts that is half of the ranks, which the rank rule cannot see.

A rank is a straggler when it is late at MIN_SHARE of the points or more and at MIN_LATE_POINTS at
least: a real straggler is late again and again, a noisy moment hits a point or two (one point
alone never names a rank: a single 1 KiB point once named a rank for one scheduler stall). Points
timed with fewer than MIN_ITERS iterations do not count: their median is one stall away from any
value (gloo on busy cores stalls for multiples of the 4 ms tick).

Every point of a run is judged at once (`judge`, over a points x ranks matrix with numpy: a million
points in seconds, not minutes); late_at_point is the same rule for one point, value for value
(tests/unit/test_stragglers_matrix.py keeps the row-by-row judgement as its oracle). The `*_matrix`
functions take a run's usable points as that matrix, as usable_points builds it from rows or a
large report reads it from the files (summary.late_arrivals_by_run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from commbench.core.units import format_us

ABS_FLOOR_US = 100.0
REL_FLOOR = 0.2
Z_MIN = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
MIN_WORLD_FOR_Z = 4
MIN_SHARE = 0.5
MIN_LATE_POINTS = 2
MIN_ITERS = 5
WARNING = "commbench: warning: straggler: "  # the stderr line's start; the report shows the rest


def rank_summary(own_s: Sequence[float], slowest_s: Sequence[float]) -> tuple[float, float]:
    """One rank's (median time, median arrival skew) from its own per-iteration times and the
    per-iteration maxima over ranks. The skew is taken per iteration (slowest - own), then the
    median: the iterations line up across ranks, noise in one iteration stays in that one."""
    own = np.asarray(own_s, dtype=float)
    if own.size == 0:
        return 0.0, 0.0
    return float(np.median(own)), float(np.median(np.asarray(slowest_s, dtype=float) - own))


def robust_z(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """(x - median) / MAD (normal-scaled); a MAD of zero gives +-inf for values off the median."""
    x = np.asarray(values, dtype=float)
    return np.asarray(robust_z_rows(x.reshape(1, -1))[0], dtype=float)


def robust_z_rows(x: np.ndarray) -> np.ndarray:
    """robust_z of every row of a (points x ranks) matrix at once, value for value."""
    # scipy.stats here, not at the top: every rank imports this module through harness/runner.py,
    # and scipy.stats is about 0.7 s of a rank's start while only worlds of MIN_WORLD_FOR_Z reach this
    from scipy.stats import median_abs_deviation

    mad = np.asarray(median_abs_deviation(x, axis=1, scale="normal"), dtype=float)[:, None]
    dev = x - np.median(x, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # MAD 0: chosen below; tiny: inf, as before
        z = dev / mad
    return np.asarray(np.where(mad > 0, z, np.where(dev > 0, np.inf, np.where(dev < 0, -np.inf, 0.0))), dtype=float)


@dataclass(frozen=True)
class Late:
    """One rank late at one point."""

    rank: int
    excess_us: float  # skew over the other ranks' median skew
    z: float | None  # robust z over the ranks; None below MIN_WORLD_FOR_Z ranks


def late_at_point(skew_us: Sequence[float] | np.ndarray, time_us: float) -> list[Late]:
    """The ranks whose arrival skew stands out at one point (see the module's docstring)."""
    x = np.asarray(skew_us, dtype=float).reshape(1, -1)
    j = judge(x, np.asarray([time_us], dtype=float))
    return [Late(int(r), float(j.excess[0, r]), None if j.z is None else float(j.z[0, r]))
            for r in np.flatnonzero(j.hits[0])]


@dataclass(frozen=True)
class Judged:
    """late_at_point of every point at once: where each rank (column) is late, its excess over the
    others' median and its robust z (None below MIN_WORLD_FOR_Z columns); a point of a non-finite
    skew, or of fewer than 2 columns, names none (its excess and z are 0 there)."""

    hits: np.ndarray  # (points, ranks) bool
    excess: np.ndarray  # (points, ranks)
    z: np.ndarray | None  # (points, ranks)


JUDGE_POINTS = 1 << 18  # points judged together: the sort's and z's temporaries follow it, not the run


def judge(skew_us: np.ndarray, time_us: np.ndarray) -> Judged:
    """The module's rule for a (points x ranks) matrix of skews and each point's time, every point
    at once (JUDGE_POINTS at a time); late_at_point's answers, value for value."""
    x = np.asarray(skew_us, dtype=float)
    t = np.asarray(time_us, dtype=float)
    if len(x) <= JUDGE_POINTS:
        return _judge(x, t)
    parts = [_judge(x[i:i + JUDGE_POINTS], t[i:i + JUDGE_POINTS]) for i in range(0, len(x), JUDGE_POINTS)]
    zs = [p.z for p in parts if p.z is not None]
    return Judged(np.concatenate([p.hits for p in parts]), np.concatenate([p.excess for p in parts]),
                  np.concatenate(zs) if zs else None)


def _judge(x: np.ndarray, time_us: np.ndarray) -> Judged:
    """judge of one chunk of points."""
    points, n = x.shape
    hits = np.zeros((points, n), dtype=bool)
    excess = np.zeros((points, n))
    z = np.zeros((points, n)) if n >= MIN_WORLD_FOR_Z else None
    ok = np.all(np.isfinite(x), axis=1) if n >= 2 else np.zeros(points, dtype=bool)
    if not ok.any():
        return Judged(hits, excess, z)
    good = x[ok]
    rel = REL_FLOOR * time_us[ok]
    floor = np.where(rel > ABS_FLOOR_US, rel, ABS_FLOOR_US)  # max(ABS_FLOOR_US, rel) as Python's: NaN time -> ABS
    excess[ok] = good - median_of_others_rows(good)
    hits[ok] = excess[ok] >= floor[:, None]
    if z is not None:
        z[ok] = robust_z_rows(good)
        hits[ok] &= z[ok] >= Z_MIN
    return Judged(hits, excess, z)


def median_of_others(x: np.ndarray) -> np.ndarray:
    """Per index r, the median of x without x[r] (np.median(np.delete(x, r)), value for value), from
    one sort: a rank's lateness is judged against the others in O(n log n), not O(n^2) (8,192
    ranks: one sort, not 8,192 medians of 8,191 values)."""
    return np.asarray(median_of_others_rows(np.asarray(x).reshape(1, -1))[0], dtype=float)


def median_of_others_rows(x: np.ndarray) -> np.ndarray:
    """median_of_others of every row of a (points x n) matrix, n >= 1, from one sort of each row."""
    n = x.shape[1]
    order = np.argsort(x, axis=1, kind="stable")
    s = np.take_along_axis(x, order, axis=1)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.broadcast_to(np.arange(n), order.shape), axis=1)

    def left(j: int) -> np.ndarray:  # the j-th smallest of the others: s[j] below r's place, else s[j + 1]
        return np.asarray(np.where(j < pos, s[:, j, None], s[:, min(j + 1, n - 1), None]), dtype=float)

    m = n - 1
    if m % 2:
        return left(m // 2)
    return np.asarray((left(m // 2 - 1) + left(m // 2)) / 2, dtype=float)


class Finding:
    """A late rank or host: text() says it; message() is the warning line the run prints."""

    def text(self) -> str:
        raise NotImplementedError

    def message(self) -> str:
        return WARNING + self.text()


def why_text(z: float | None, peers: str, over: str = "") -> str:
    """The closing parenthesis of a finding: its robust z, or why there is none (too few peers)."""
    if z is not None:
        return f"robust z {z:.1f}{over}"
    return f"robust z needs {MIN_WORLD_FOR_Z} {peers} or more: compared with the other {peers}' median"


@dataclass(frozen=True)
class Straggler(Finding):
    rank: int
    host: str
    late_points: int
    points: int  # points with per-rank skews
    excess_us: float  # median over the points where it was late
    z: float | None  # median robust z over those points (inf: the others agree exactly); None below 4 ranks

    def text(self) -> str:
        return (f"rank {self.rank} on host {self.host} arrives late: "
                f"+{format_us(self.excess_us)} median arrival skew over the other ranks at "
                f"{self.late_points} of {self.points} points ({why_text(self.z, 'ranks')})")


def usable_points(rows: Iterable[Mapping[str, Any]], world: int) -> tuple[np.ndarray, np.ndarray]:
    """(per-rank skews as a (points x world) matrix, each point's time_us) of every row that
    counts: rows without per-rank skews (broadcast, reduce, sendrecv, old files, nccl-tests imports)
    or of another world size, and rows of fewer than MIN_ITERS iterations, are left out."""
    skews, times = [], []
    for row in rows:
        skew = row.get("rank_skew_us")
        if skew is None or (isinstance(skew, float) and math.isnan(skew)) or len(skew) != world:
            continue
        iters = row.get("iters")
        if iters is not None and not (isinstance(iters, float) and math.isnan(iters)) and iters < MIN_ITERS:
            continue
        skews.append(skew)
        times.append(float(row["time_us"]))
    matrix = np.asarray(skews, dtype=float).reshape(len(skews), world) if skews else np.zeros((0, world))
    return matrix, np.asarray(times, dtype=float)


@dataclass(frozen=True)
class Again:
    """An index (a rank, or a host in host_groups' order) late again: at how many points, its median
    excess over those points and its median z (None below MIN_WORLD_FOR_Z)."""

    late_points: int
    excess_us: float
    z: float | None


def late_again(skew_us: np.ndarray, time_us: np.ndarray) -> dict[int, Again]:
    """Per index (a column of the matrix), how it was late where it was late at enough of the
    points (MIN_SHARE of them, MIN_LATE_POINTS at least); every row counts as a point."""
    j = judge(skew_us, time_us)
    counts = j.hits.sum(axis=0)
    needed = max(MIN_LATE_POINTS, math.ceil(MIN_SHARE * len(j.hits)))
    out = {}
    for i in np.flatnonzero(counts >= needed).tolist():
        at = j.hits[:, i]
        z = None if j.z is None else float(np.median(j.z[at, i]))
        out[i] = Again(int(counts[i]), float(np.median(j.excess[at, i])), z)
    return out


def find(rows: Iterable[Mapping[str, Any]], hosts: Sequence[str]) -> list[Straggler]:
    """Stragglers over result rows (dicts or DataFrame records) with `rank_skew_us` and `time_us`;
    `hosts[r]` is rank r's host."""
    return find_matrix(*usable_points(rows, len(hosts)), hosts)


def find_matrix(skew_us: np.ndarray, time_us: np.ndarray, hosts: Sequence[str]) -> list[Straggler]:
    """find over usable_points' matrix: one column a rank."""
    return [Straggler(rank, hosts[rank], a.late_points, len(skew_us), a.excess_us, a.z)
            for rank, a in late_again(skew_us, time_us).items()]


# ----------------------------------------------------------------------------- slow hosts
# A slow host makes all of its ranks late together. With 2 hosts that is half of the ranks, which
# the rank rule cannot single out (the others' median is itself late, the MAD spans both groups),
# so hosts are compared too: a host's lateness is the least skew of its ranks (every rank of it
# entered at least that late), judged against the other hosts' by the same floors, z and rule over
# points. Only hosts of 2 or more ranks are named this way: a host of one rank is that rank.


@dataclass(frozen=True)
class SlowHost(Finding):
    host: str
    ranks: tuple[int, ...]
    late_points: int
    points: int
    excess_us: float  # its least rank skew over the other hosts' median, median over the late points
    z: float | None  # over hosts; None below MIN_WORLD_FOR_Z hosts

    def text(self) -> str:
        import hostlist

        ranks = hostlist.collect_hostlist([str(r) for r in self.ranks]).strip("[]")
        return (f"host {self.host} arrives late: all {len(self.ranks)} of its "
                f"ranks ({ranks}) at least +{format_us(self.excess_us)} behind the other hosts' ranks "
                f"(median arrival skew) at {self.late_points} of {self.points} points "
                f"({why_text(self.z, 'hosts', ' over the hosts')})")


def host_groups(hosts: Sequence[str]) -> dict[str, list[int]]:
    """host -> its ranks, hosts in order of their first rank."""
    groups: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        groups.setdefault(host, []).append(rank)
    return groups


def find_hosts(rows: Iterable[Mapping[str, Any]], hosts: Sequence[str]) -> list[SlowHost]:
    """Hosts of 2 or more ranks whose ranks all arrive late (see the comment above)."""
    return find_hosts_matrix(*usable_points(rows, len(hosts)), hosts)


def find_hosts_matrix(skew_us: np.ndarray, time_us: np.ndarray, hosts: Sequence[str]) -> list[SlowHost]:
    """find_hosts over usable_points' matrix: a host's column is the least skew of its ranks."""
    groups = host_groups(hosts)
    if len(groups) < 2 or all(len(ranks) == 1 for ranks in groups.values()):
        return []
    order = np.concatenate([np.asarray(ranks) for ranks in groups.values()])  # the ranks host by host
    starts = np.cumsum([0] + [len(ranks) for ranks in groups.values()])[:-1]
    least = np.minimum.reduceat(np.asarray(skew_us, dtype=float)[:, order], starts, axis=1)
    names = list(groups)
    return [SlowHost(names[i], tuple(groups[names[i]]), a.late_points, len(skew_us), a.excess_us, a.z)
            for i, a in late_again(least, time_us).items() if len(groups[names[i]]) >= 2]


def findings(rows: Iterable[Mapping[str, Any]], hosts: Sequence[str]) -> list[SlowHost | Straggler]:
    """The slow hosts, then the straggler ranks on other hosts (none on a quiet run)."""
    return findings_matrix(*usable_points(rows, len(hosts)), hosts)


def findings_matrix(skew_us: np.ndarray, time_us: np.ndarray, hosts: Sequence[str]) -> list[SlowHost | Straggler]:
    """findings over usable_points' matrix (or the same read from files: one row a usable point)."""
    slow = find_hosts_matrix(skew_us, time_us, hosts)
    named = {h.host for h in slow}
    return [*slow, *(s for s in find_matrix(skew_us, time_us, hosts) if s.host not in named)]


def straggler_warnings(rows: Iterable[Mapping[str, Any]], hosts: Sequence[str]) -> list[str]:
    """One stderr line per finding (none on a quiet run)."""
    return [f.message() for f in findings(rows, hosts)]


def rank_hosts(row: Mapping[str, Any]) -> list[str] | None:
    """Rank r's host from a row's `hosts` and `rank_host` columns; None where the file does not say
    (files older than the column, nccl-tests imports)."""
    hosts, index = row.get("hosts"), row.get("rank_host")
    if hosts is None or index is None or isinstance(index, float):
        return None
    hosts = [str(h) for h in hosts]
    try:
        return [hosts[int(i)] for i in index]
    except (IndexError, TypeError, ValueError):
        return None


def run_findings(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], int] | None:
    """One run's findings as text (no warning prefix) and the points they were judged on, from its
    rows as a results file holds them; None where the rows cannot say (no per-rank skews or hosts)."""
    hosts = next((h for h in map(rank_hosts, rows) if h is not None), None)
    if hosts is None:
        return None
    return run_findings_matrix(*usable_points(rows, len(hosts)), hosts)


def run_findings_matrix(skew_us: np.ndarray, time_us: np.ndarray,
                        hosts: Sequence[str]) -> tuple[list[str], int] | None:
    """run_findings over a run's usable points as a matrix (usable_points', or read from its files)."""
    if not len(skew_us):
        return None
    return [f.text() for f in findings_matrix(skew_us, time_us, hosts)], len(skew_us)
