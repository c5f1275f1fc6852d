"""Which links are slow, and is one host to blame? The analysis behind `commbench pairs`.

Input: one bandwidth per measured link (`commbench pairs` rows, median over repetitions). Output:
the links ranked slowest first, the hosts that appear most among the slowest, and the endpoints
(hosts, or ranks when a host runs several) singled out as slow.

The rule that singles out an endpoint looks at its *best* link, per direction: a slow NIC, port
or cable caps every link of its host, while a slow peer caps only the link to that peer, so a
host's fastest link is what the host itself can do. An endpoint is singled out when its best
sending (or receiving) link is below `threshold` x the median of every endpoint's best sending
(receiving) link. Equal links single out nobody; one slow host among many is singled out however
few hosts there are (from 3), and so are two slow hosts of four (where "median of its links"
would blame nobody, since half of every host's peers are slow). A single bad link between two
healthy hosts is at the top of the ranked list but blames neither host. With two endpoints a
slow link cannot be pinned on either end, so nobody is singled out.

Links that could not be measured (rows with a `status` in FAILED) are left out of that ranking
and judged by their pattern instead, in linkfaults.py (docs/PAIRS.md "When links fail"), which
also writes the whole `pairs --from` report.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from commbench.core.linkstatus import FAILED
from commbench.core.columns import LINK_KEY

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_THRESHOLD = 0.8


@dataclass(frozen=True)
class Link:
    """One measured link: src sends to dst (bidir: both ways at once, gbps per direction)."""

    src: str  # endpoint names (hosts, or host/rank)
    dst: str
    src_host: str
    dst_host: str
    gbps: float
    bidir: bool = False
    src_rank: int | None = None
    dst_rank: int | None = None

    def text(self) -> str:
        return f"{self.src} {'<->' if self.bidir else '->'} {self.dst}"


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    send_best: float | None  # GB/s of its fastest link as sender
    recv_best: float | None
    send_ratio: float | None  # send_best / the median endpoint's send_best
    recv_ratio: float | None
    slow_send: bool = False
    slow_recv: bool = False

    @property
    def slow(self) -> bool:
        return self.slow_send or self.slow_recv


@dataclass
class Ranking:
    links: list[Link]  # every link, slowest first
    slowest: list[Link]  # as many as one endpoint takes part in
    median_gbps: float  # over every link
    host_counts: list[tuple[str, int]]  # hosts by how many of `slowest` they are in
    endpoints: list[Endpoint]
    threshold: float
    send_reference: float | None  # the median endpoint's best sending link
    recv_reference: float | None
    note: str | None = None  # why nobody could be singled out, when the data cannot tell
    bidir: bool = False
    per_host: bool = True  # endpoints are hosts (one rank each), not ranks
    singled_out: list[Endpoint] = field(default_factory=list)


def rank_links(links: list[Link], threshold: float = DEFAULT_THRESHOLD) -> Ranking:
    if not links:
        raise ValueError("no links to rank")
    if not 0 < threshold < 1:
        raise ValueError("threshold must be in (0, 1)")
    ordered = sorted(links, key=lambda ln: (ln.gbps, ln.src_rank if ln.src_rank is not None else -1, ln.src, ln.dst))
    bidir = all(ln.bidir for ln in links)
    names = sorted({ln.src for ln in links} | {ln.dst for ln in links})
    host_of = {ln.src: ln.src_host for ln in links} | {ln.dst: ln.dst_host for ln in links}
    p = len(names)
    k = min(len(ordered), (p - 1) if bidir else 2 * (p - 1))
    slowest = ordered[:max(1, k)]
    counts = Counter(h for ln in slowest for h in {ln.src_host, ln.dst_host})
    host_counts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    # Links inside one host (several ranks per host) run over another path (shared memory,
    # NVLink, loopback): a host's network is judged on its links to other hosts.
    several_hosts = len(set(host_of.values())) > 1
    judged = [ln for ln in links if not several_hosts or ln.src_host != ln.dst_host]
    send: dict[str, list[float]] = {n: [] for n in names}
    recv: dict[str, list[float]] = {n: [] for n in names}
    for ln in judged:
        send[ln.src].append(ln.gbps)
        recv[ln.dst].append(ln.gbps)
        if ln.bidir:
            send[ln.dst].append(ln.gbps)
            recv[ln.src].append(ln.gbps)
    send_best = {n: max(v) if v else None for n, v in send.items()}
    recv_best = {n: max(v) if v else None for n, v in recv.items()}
    send_ref = _median([v for v in send_best.values() if v is not None])
    recv_ref = _median([v for v in recv_best.values() if v is not None])

    note = None
    can_tell = p >= 3
    if not can_tell:
        note = "with two endpoints a slow link cannot be pinned on either end: measure at least 3 hosts"
    endpoints = []
    for n in names:
        s_ratio = _ratio(send_best[n], send_ref)
        r_ratio = _ratio(recv_best[n], recv_ref)
        endpoints.append(Endpoint(n, host_of[n], send_best[n], recv_best[n], s_ratio, r_ratio,
                                  slow_send=can_tell and s_ratio is not None and s_ratio < threshold,
                                  slow_recv=can_tell and r_ratio is not None and r_ratio < threshold))
    per_host = all(n == host_of[n] for n in names)
    return Ranking(ordered, slowest, statistics.median(ln.gbps for ln in links), host_counts, endpoints, threshold,
                   send_ref, recv_ref, note, bidir, per_host, [e for e in endpoints if e.slow])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference or not math.isfinite(reference):
        return None
    return value / reference


# --------------------------------------------------------------------------- text


def render(r: Ranking) -> list[str]:
    """The ranked list, the hosts in it, and the verdict, as console lines."""
    return render_links(r) + render_verdict(r)


def render_links(r: Ranking) -> list[str]:
    """The ranked list and the hosts in it (without the verdict: a rail's has its own words)."""
    what = "host" if r.per_host else "endpoint"
    lines = [f"# Slowest links ({len(r.slowest)} of {len(r.links)}, as many as one {what} takes part in; "
             f"the median link {r.median_gbps:.4f} GB/s{' per direction' if r.bidir else ''}):",
             f"#  {'#':>3}  {'link':<40} {'GB/s':>9}  {'of the median link':>18}"]
    for i, ln in enumerate(r.slowest, 1):
        share = f"{ln.gbps / r.median_gbps:.0%}" if r.median_gbps > 0 else "n/a"
        lines.append(f"#  {i:3d}  {ln.text():<40} {ln.gbps:9.4f}  {share:>18}")
    total = len(r.slowest)
    lines.append("# Hosts in these links: " + ", ".join(f"{h} ({c} of {total})" for h, c in r.host_counts))
    return lines


def render_verdict(r: Ranking) -> list[str]:
    """The endpoints singled out as slow, or why none is."""
    what = "host" if r.per_host else "endpoint"
    lines: list[str] = []
    if r.note:
        lines.append(f"# No {what} singled out: {r.note}.")
        return lines
    for e in r.singled_out:
        lines.append(f"# Slow {what}: {_name(e, r)}: {_best_text(e, r)}")
    if not r.singled_out:
        ref = (f"{r.send_reference:.4f} GB/s per direction" if r.bidir else
               f"{_num(r.send_reference)} GB/s sending, {_num(r.recv_reference)} GB/s receiving")
        lines.append(f"# No {what} stands out: every {what}'s best link is at least {r.threshold:.0%} of the "
                     f"median {what}'s best link ({ref}).")
    return lines


def verdict(r: Ranking) -> str | None:
    """One line naming the slow hosts, or None."""
    if not r.singled_out:
        return None
    what = "host" if r.per_host else "endpoint"
    names = ", ".join(_name(e, r) for e in r.singled_out)
    return (f"slow {what}{'s' if len(r.singled_out) > 1 else ''}: {names} (best link below {r.threshold:.0%} of "
            f"the median {what}'s best link; see the ranked links above)")


def _name(e: Endpoint, r: Ranking) -> str:
    return e.name if r.per_host else f"{e.name} (host {e.host})"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _best_text(e: Endpoint, r: Ranking) -> str:
    if r.bidir:
        return (f"its best link {_num(e.send_best)} GB/s per direction = {e.send_ratio:.0%} of the median "
                f"{'host' if r.per_host else 'endpoint'}'s best link ({_num(r.send_reference)} GB/s)")
    parts = []
    for role, best, ratio, ref, slow in (("sending", e.send_best, e.send_ratio, r.send_reference, e.slow_send),
                                         ("receiving", e.recv_best, e.recv_ratio, r.recv_reference, e.slow_recv)):
        if best is None:
            continue
        mark = "" if slow else ", normal"
        parts.append(f"best link {role} {best:.4f} GB/s = {ratio:.0%} of the median "
                     f"{'host' if r.per_host else 'endpoint'}'s best link ({_num(ref)} GB/s){mark}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- results rows


PAIRS_COLLECTIVES = {"sendrecv": False, "sendrecv_bidir": True}
LINK_ENDS = LINK_KEY  # core/columns.py


def pairs_rows(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """The pairs rows of `df` that name their link (measured, failed and confirmation rows), or None.
    When every row qualifies, `df` itself (a pairs run of 1024 hosts is a million rows: no copy)."""
    if df is None or len(df) == 0 or "workload" not in df.columns:
        return None
    pairs = (df["workload"] == "pairs").fillna(False).to_numpy(dtype=bool)
    rows = df if pairs.all() else df[pairs]
    if len(rows) == 0 or any(c not in rows.columns for c in LINK_ENDS):
        return None
    named = rows[list(LINK_ENDS)].notna().all(axis=1).to_numpy(dtype=bool)
    rows = rows if named.all() else rows[named]
    return rows if len(rows) else None


def by_run(rows: pd.DataFrame) -> Iterator[tuple[Any, pd.DataFrame]]:
    """(run_id, rows) per run, in order; a single run is `rows` itself, not a copy."""
    ids = rows["run_id"]
    if len(rows) and ids.notna().all() and ids.nunique() == 1:
        yield ids.iloc[0], rows
        return
    yield from rows.groupby("run_id", sort=False)


def endpoint_names(rows: pd.DataFrame) -> dict[tuple[str, int], str]:
    """(host, rank) -> the endpoint's name: the host when it has one rank in `rows`, else host/rRANK."""
    import pandas as pd

    # distinct ends first: a million rows of a 1024-host run have 1024 of them
    ends = pd.concat([pd.DataFrame({"h": rows[f"{side}_host"].to_numpy(dtype=object),
                                    "r": rows[f"{side}_rank"].to_numpy(dtype=np.int64)})
                      for side in ("src", "dst")]).drop_duplicates()
    pairs = list(zip(ends["h"].tolist(), ends["r"].tolist()))
    per_host = Counter(h for h, _ in pairs)
    return {(h, r): h if per_host[h] == 1 else f"{h}/r{r}" for h, r in pairs}


def column(rows: pd.DataFrame, name: str) -> list[Any]:
    """A column's values with every missing value (None, NaN, pd.NA) as None; all None when absent."""
    if name not in rows.columns:
        return [None] * len(rows)
    values = rows[name]
    missing = values.isna().to_numpy(dtype=bool)
    out = values.astype(object).tolist()
    if missing.any():
        for i in np.flatnonzero(missing).tolist():
            out[i] = None
    return out


def run_key(run_id: object, rail: object) -> str:
    """The key of one run's links in links_by_run: the run id, or "RUN rail R" per rail (--per-rail)."""
    return str(run_id) if rail is None else f"{run_id} rail {rail}"


def runs_and_rails(rows: pd.DataFrame) -> Iterator[tuple[str, str, Any, pd.DataFrame]]:
    """(key, run_id, rail, rows) per run, and per rail within a run whose rows carry rails (run_key)."""
    for run_id, run in by_run(rows):
        rails = list(dict.fromkeys(column(run, "rail")))
        if rails == [None]:
            yield run_key(run_id, None), str(run_id), None, run
            continue
        for rail in rails:
            part = run[run["rail"].isna()] if rail is None else run[run["rail"] == rail]
            yield run_key(run_id, rail), str(run_id), rail, part


def links_by_run(df: pd.DataFrame | None) -> dict[str, list[Link]]:
    """`commbench pairs` rows -> links per run (median busbw over repetitions), and per rail when
    the rows carry rails (keys: run_key). Endpoints are named by host when each host has one, else
    host/rank. Failed rows (status in FAILED) and the rows of the confirmation round are left out:
    the ranking is of what the main rounds measured."""
    out: dict[str, list[Link]] = {}
    rows = pairs_rows(df)
    if rows is None:
        return out
    for key, _, _, run in runs_and_rails(rows):
        name = endpoint_names(run)
        keep = np.array([s not in FAILED and not c for s, c in zip(column(run, "status"), column(run, "confirm"))],
                        dtype=bool) & run["busbw_GBps"].notna().to_numpy(dtype=bool)
        keys = ["src_host", "src_rank", "dst_host", "dst_rank", "collective"]
        run = run.loc[keep, keys + ["busbw_GBps"]]  # the columns a link needs, not every column's copy
        links = []
        med = run.groupby(keys, sort=False)["busbw_GBps"].median()
        levels = [med.index.get_level_values(i).tolist() for i in range(len(keys))]  # plain lists: no tuple a row
        for sh, sr, dh, dr, coll, gbps in zip(*levels, med.tolist()):
            sr, dr = int(sr), int(dr)
            links.append(Link(name[(sh, sr)], name[(dh, dr)], str(sh), str(dh),
                              float(gbps), PAIRS_COLLECTIVES.get(coll, False), sr, dr))
        if links:
            out[key] = links
    return out


def endpoint_order(links: list[Link]) -> list[str]:
    """Endpoint names in rank order (the order of the heat map's rows and columns)."""
    seen: dict[str, int] = {}
    for ln in links:
        seen.setdefault(ln.src, ln.src_rank if ln.src_rank is not None else 0)
        seen.setdefault(ln.dst, ln.dst_rank if ln.dst_rank is not None else 0)
    return sorted(seen, key=lambda n: (seen[n], n))
