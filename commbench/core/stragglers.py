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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

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
    # scipy.stats here, not at the top: every rank imports this module through harness/runner.py,
    # and scipy.stats is about 0.7 s of a rank's start while only worlds of MIN_WORLD_FOR_Z reach this
    from scipy.stats import median_abs_deviation

    x = np.asarray(values, dtype=float)
    mad = median_abs_deviation(x, scale="normal")
    dev = x - np.median(x)
    if mad > 0:
        return np.asarray(dev / mad, dtype=float)
    return np.where(dev > 0, np.inf, np.where(dev < 0, -np.inf, 0.0))


@dataclass(frozen=True)
class Late:
    """One rank late at one point."""

    rank: int
    excess_us: float  # skew over the other ranks' median skew
    z: float | None  # robust z over the ranks; None below MIN_WORLD_FOR_Z ranks


def late_at_point(skew_us: Sequence[float] | np.ndarray, time_us: float) -> list[Late]:
    """The ranks whose arrival skew stands out at one point (see the module's docstring)."""
    x = np.asarray(skew_us, dtype=float)
    n = x.size
    if n < 2 or not np.all(np.isfinite(x)):
        return []
    floor = max(ABS_FLOOR_US, REL_FLOOR * time_us)
    z = robust_z(x) if n >= MIN_WORLD_FOR_Z else None
    excess = x - median_of_others(x)
    hits = excess >= floor
    if z is not None:
        hits &= z >= Z_MIN
    return [Late(int(r), float(excess[r]), None if z is None else float(z[r])) for r in np.flatnonzero(hits)]


def median_of_others(x: np.ndarray) -> np.ndarray:
    """Per index r, the median of x without x[r] (np.median(np.delete(x, r)), value for value), from
    one sort: a rank's lateness is judged against the others in O(n log n), not O(n^2) (8,192
    ranks: one sort, not 8,192 medians of 8,191 values)."""
    n = x.size
    order = np.argsort(x, kind="stable")
    s = x[order]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)

    def left(j: int) -> np.ndarray:  # the j-th smallest of the others: s[j] below r's place, else s[j + 1]
        return np.asarray(np.where(j < pos, s[j], s[min(j + 1, n - 1)]), dtype=float)

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


def format_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} us"


def usable_points(rows: Iterable[Mapping[str, Any]], world: int) -> list[tuple[np.ndarray, float]]:
    """(per-rank skews, time_us) of every row that counts: rows without per-rank skews
    (broadcast, reduce, sendrecv, old files, nccl-tests imports) or of another world size, and rows
    of fewer than MIN_ITERS iterations, are left out."""
    points = []
    for row in rows:
        skew = row.get("rank_skew_us")
        if skew is None or (isinstance(skew, float) and math.isnan(skew)) or len(skew) != world:
            continue
        iters = row.get("iters")
        if iters is not None and not (isinstance(iters, float) and math.isnan(iters)) and iters < MIN_ITERS:
            continue
        points.append((np.asarray(skew, dtype=float), float(row["time_us"])))
    return points


def late_again(points: list[tuple[np.ndarray, float]]) -> dict[int, list[Late]]:
    """Per index (a rank, or a host in host_groups' order), its Late hits where it was late at
    enough of the points (MIN_SHARE of them, MIN_LATE_POINTS at least)."""
    late: dict[int, list[Late]] = {}
    for values, time_us in points:
        for hit in late_at_point(values, time_us):
            late.setdefault(hit.rank, []).append(hit)
    needed = max(MIN_LATE_POINTS, math.ceil(MIN_SHARE * len(points)))
    return {i: hits for i, hits in sorted(late.items()) if len(hits) >= needed}


def _effect(hits: list[Late]) -> tuple[float, float | None]:
    zs = [h.z for h in hits if h.z is not None]
    return float(np.median([h.excess_us for h in hits])), float(np.median(zs)) if zs else None


def find(rows: Iterable[Mapping[str, Any]], hosts: Sequence[str]) -> list[Straggler]:
    """Stragglers over result rows (dicts or DataFrame records) with `rank_skew_us` and `time_us`;
    `hosts[r]` is rank r's host."""
    points = usable_points(rows, len(hosts))
    return [Straggler(rank, hosts[rank], len(hits), len(points), *_effect(hits))
            for rank, hits in late_again(points).items()]


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
    groups = host_groups(hosts)
    if len(groups) < 2 or all(len(ranks) == 1 for ranks in groups.values()):
        return []
    order = np.concatenate([np.asarray(ranks) for ranks in groups.values()])  # the ranks host by host
    starts = np.cumsum([0] + [len(ranks) for ranks in groups.values()])[:-1]
    points = [(np.minimum.reduceat(skew[order], starts), time_us) for skew, time_us in usable_points(rows, len(hosts))]
    names = list(groups)
    return [SlowHost(names[i], tuple(groups[names[i]]), len(hits), len(points), *_effect(hits))
            for i, hits in late_again(points).items() if len(groups[names[i]]) >= 2]


def findings(rows: Iterable[Mapping[str, Any]], hosts: Sequence[str]) -> list[SlowHost | Straggler]:
    """The slow hosts, then the straggler ranks on other hosts (none on a quiet run)."""
    rows = list(rows)
    slow = find_hosts(rows, hosts)
    named = {h.host for h in slow}
    return [*slow, *(s for s in find(rows, hosts) if s.host not in named)]


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
    points = len(usable_points(rows, len(hosts)))
    return ([f.text() for f in findings(rows, hosts)], points) if points else None
