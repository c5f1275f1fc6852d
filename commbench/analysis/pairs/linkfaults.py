"""The verdict when links fail: which host or link the pattern of failed `commbench pairs` links
points at (suspects) and the confirmation round that checks it (confirm_plan, faults); faultstext.py
says it. The rules are in docs/PAIRS.md, "When links fail".

A run's rows are judged in the order they were stored, which is the order their links were
measured (the confirmation round's rows, confirm true, come last): a host that went down during
the run worked before its first failed link and failed every link since, and is named as one host,
not as several failed links.

Rows with rails (pairs --per-rail) are judged rail by rail: a rail's failed links name a host's
rail (`Unreachable host: n3 rail eth1`) or a link on a rail, never the host's other rails, and the
slow rails are ranked by railrank.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from commbench.analysis.pairs import linkrank, railrank
from commbench.analysis.pairs.linkrank import PAIRS_COLLECTIVES, column, endpoint_names, pairs_rows
from commbench.core.linkstatus import FAILED
from commbench.core import wire
from commbench.core import linkstatus
from commbench.core.linkstatus import UNOBSERVED

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


# --------------------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class Culprit:
    """What the pattern of failed links points at.

    kind: "host" (an endpoint: a host, or host/rN with several ranks per host), "link" ("A <-> B")
    or "undecided" (a failed link with only two endpoints: either end may be to blame). status: the
    dominant failure status of its failed rows. evidence: one-line reasons. confirmed: True when
    the confirmation round failed again, False when it recovered (then it is no longer named),
    None when no confirmation ran for it or the round could not decide (evidence says why).
    worked_before: a host that failed during the run (rule a, its second form): how many of its
    links worked before its first failure (0 otherwise). via: a host that the confirmation round
    found behind a suspect link (that link's name; None otherwise)."""

    kind: str
    name: str
    status: str
    evidence: tuple[str, ...]
    confirmed: bool | None = None
    worked_before: int = 0
    via: str | None = None
    rail: str | None = None  # pairs --per-rail: the rail it failed on
    lossy: bool = False  # its transfers timed out while the wire lost packets: named Lossy, not Hung

    @property
    def label(self) -> str:
        """Its name with its rail: what a verdict names."""
        return self.name if self.rail is None else f"{self.name} rail {self.rail}"


@dataclass
class FaultVerdict:
    culprits: list[Culprit]
    failed: list[dict]  # per failed link and round: src, dst, status, error, confirm (True or None), bidir
    undecided: str | None = None  # why no verdict can be reached for (some) failed links
    unobserved: int = 0  # links rank 0 never learnt the outcome of: it was cut off from both ends (not failed)

    @property
    def named(self) -> list[Culprit]:
        """Hosts and links to blame: kind host or link, not refuted by the confirmation round."""
        return [c for c in self.culprits if c.kind in ("host", "link") and c.confirmed is not False]

    @property
    def exit_code(self) -> int:
        """1: something is named; 3: no verdict (undecided) and nothing named; 0: otherwise."""
        if self.named:
            return 1
        return 3 if self.undecided else 0


class _Row(NamedTuple):
    """One row of a link (a tuple: a million of them are built for a 1024-host run)."""

    src: str
    dst: str
    status: str | None
    error: str | None
    confirm: bool
    bidir: bool
    seq: int = 0  # its place in the run's rows: the order the links were measured
    wire: str | None = None  # a failed row's counters during the attempt (kept for failed rows only)

    @property
    def failed(self) -> bool:
        return self.status in FAILED


@dataclass
class _Mesh:
    """One round set (main or confirmation) of one run as endpoint pairs: a pair's rows are both
    directions and every repetition, in measurement order; a pair failed when any of its rows failed."""

    rank: dict[str, int] = field(default_factory=dict)
    host: dict[str, str] = field(default_factory=dict)
    pairs: dict[tuple[str, str], list[_Row]] = field(default_factory=dict)
    by_end: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    bad: set = field(default_factory=set)  # the failed pairs
    several_hosts: bool = False  # set once every row is in
    per_host: bool = True
    last_ok: dict[tuple[str, str], int] = field(default_factory=dict)  # a pair's last row that worked (seq)
    unseen: set = field(default_factory=set)  # {a, b} of links whose rows are `unobserved`: no evidence either way
    _judged: dict[str, list] = field(default_factory=dict)  # judged(), once the rows are in

    def key(self, a: str, b: str) -> tuple[str, str]:
        return (a, b) if (self.rank[a], a) <= (self.rank[b], b) else (b, a)

    def add(self, row: _Row) -> None:
        k = self.key(row.src, row.dst)
        rows = self.pairs.get(k)
        if rows is None:
            rows = self.pairs[k] = []
            for e in set(k):
                self.by_end.setdefault(e, []).append(k)
        rows.append(row)
        if row.status in FAILED:
            self.bad.add(k)
        else:
            self.last_ok[k] = row.seq  # rows come in measurement order: the last one is the latest

    def endpoints(self) -> list[str]:
        return sorted(self.by_end, key=lambda e: (self.rank[e], e))

    def order(self, keys: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        return sorted(keys, key=lambda k: (self.rank[k[0]], self.rank[k[1]], k))

    def judged(self, e: str) -> list[tuple[str, str]]:
        """e's links that judge it: with several hosts, its links to other hosts only (asked only
        once every row is in, so kept: the rules ask it of every endpoint several times)."""
        got = self._judged.get(e)
        if got is None:
            got = self._judged[e] = [k for k in self.by_end.get(e, [])
                                     if not self.several_hosts or self.host[k[0]] != self.host[k[1]]]
        return got

    def works(self, e: str) -> bool:
        return any(k not in self.bad for k in self.judged(e))


def other_end(k: Sequence[str], e: str) -> str:
    """The end of link `k` that is not `e`."""
    return k[1] if k[0] == e else k[0]


def _meshes(df: pd.DataFrame | None) -> tuple[_Mesh | None, _Mesh | None]:
    """(main rounds, confirmation round) of the one pairs run in `df`; (None, None) without pairs rows."""
    rows = pairs_rows(df)
    if rows is None:
        return None, None
    if "run_id" in rows.columns and rows["run_id"].nunique() > 1:
        raise ValueError("the failure pattern is judged per run: pass the rows of one run (see faults_by_run)")
    names = endpoint_names(rows)
    main, conf = _Mesh(), _Mesh()
    ends = [_end_names(rows, side, names) for side in ("src", "dst")]
    bidir = [PAIRS_COLLECTIVES.get(c, False) for c in column(rows, "collective")]
    status, error, confirm, wires = (column(rows, c) for c in ("status", "error", "confirm", "wire"))
    where = {n: (str(h), int(r)) for (h, r), n in names.items()}
    for mesh in (main, conf):  # every endpoint's rank for the keys; kept below for those with rows
        mesh.rank = {n: r for n, (_, r) in where.items()}
    # one pass over the rows, the columns read once each (not a pandas lookup a row)
    for seq, (a, b, st, err, conf_row, bi, w) in enumerate(zip(*ends, status, error, confirm, bidir, wires)):
        err = None if err is None else " ".join(str(err).split())
        if st == UNOBSERVED:  # rank 0 was cut off from both ends: neither a failure nor a success
            (conf if conf_row else main).unseen.add(frozenset((a, b)))
            continue
        (conf if conf_row else main).add(_Row(a, b, st, err, bool(conf_row), bi, seq, w if st in FAILED else None))
    for mesh in (main, conf):
        mesh.rank = {e: where[e][1] for e in mesh.by_end}
        mesh.host = {e: where[e][0] for e in mesh.by_end}
        mesh.several_hosts, mesh.per_host = len(set(mesh.host.values())) > 1, all(e == h for e, h in mesh.host.items())
    return main, conf


def _end_names(rows: pd.DataFrame, side: str, names: dict[tuple[str, int], str]) -> np.ndarray:
    """Each row's endpoint name on one side, as an object array of shared strings (looked up by
    pandas, not a (host, rank) tuple a row)."""
    import numpy as np
    import pandas as pd

    known = pd.MultiIndex.from_tuples(list(names), names=["h", "r"])
    at = known.get_indexer(pd.MultiIndex.from_arrays(
        [rows[f"{side}_host"].to_numpy(dtype=object), rows[f"{side}_rank"].to_numpy(dtype="int64")], names=["h", "r"]))
    return np.asarray(list(names.values()) + [None], dtype=object)[at]  # every row's end is in names: no -1


def _dominant(rows: list[_Row]) -> str:
    counts = Counter(r.status for r in rows if r.failed)
    return max(FAILED, key=lambda s: (counts[s], -FAILED.index(s))) if counts else "error"


def _reason(rows: list[_Row]) -> list[str]:
    """The most common error message of the failed rows, and what the wire did during them, as
    evidence lines (none without either)."""
    errors = Counter(r.error for r in rows if r.failed and r.error)
    return ([f"error: {errors.most_common(1)[0][0]}"] if errors else []) + _wire_lines(rows)


def _wire_lines(rows: list[_Row], shown: int = 4) -> list[str]:
    """The trouble counters that moved during the failed attempts, summed (causes first): packets
    lost on the way while a transfer timed out say that the data path starved it, not a hung process."""
    moved = sorted(wire.totals(r.wire for r in rows if r.failed and r.wire), key=lambda t: t[0].cause_rank())
    if not moved:
        return []
    more = f", +{len(moved) - shown} more" if len(moved) > shown else ""
    return ["wire during the failed transfers: " + ", ".join(t.text() for t, _ in moved[:shown]) + more
            + (f" ({LOSSY_TEXT})" if _lossy(rows) else "")]


LOSSY_KINDS = frozenset({"link", "drop", "retransmit"})
LOSSY_TEXT = "packets were lost on the data path: a sick link, NIC or queue, not a hung process"


def _lossy(rows: list[_Row]) -> bool:
    """Timed-out attempts during which the wire lost packets (drops, retransmissions, a flap)."""
    return any(t.kind in LOSSY_KINDS for r in rows if r.status == linkstatus.TIMEOUT and r.wire
               for t in wire.troubles(r.wire))


def _listed(names: list[str], shown: int = 8) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _pair_text(mesh: _Mesh, k: tuple[str, str], first: str | None = None) -> str:
    """The failed pair as text, `first` first: A <-> B (both directions, or bidir), A -> B (one way)."""
    a, b = k if first in (None, k[0]) else (k[1], k[0])
    rows = mesh.pairs[k]
    if any(r.bidir for r in rows):
        return f"{a} <-> {b}"
    out = any(r.failed and r.src == a for r in rows)
    back = any(r.failed and r.src == b for r in rows)
    if out == back:
        return f"{a} <-> {b}"
    return f"{a} -> {b}" if out else f"{b} -> {a}"


def _judge(mesh: _Mesh) -> tuple[list[Culprit], list[tuple[str, str]], list[str]]:
    """The rules on the main rounds: (culprits, the failed links that no rule explains, the
    endpoints that stopped working during the run but cannot be told from a peer that did too).

    a) an endpoint whose links (to other hosts) all failed, with at least two distinct peers of
       which at least two work with someone -> host; or one whose every link measured since its
       first failure failed (at least two, to distinct peers that each work with someone, one of
       which at least did not stop working that way too) -> host; b) a failed link, neither end
       named by a), both ends working with someone -> link; c) two endpoints -> every failed
       link undecided."""
    bad = mesh.order(mesh.bad)
    if not bad:
        return [], [], []
    ends = mesh.endpoints()
    what = "hosts" if mesh.per_host else "endpoints"
    if len(ends) == 2:
        return [_culprit(mesh, "undecided", k, [f"with 2 {what} a failed link cannot be pinned on either end "
                                                 f"(2 {what} cannot be told apart): measure at least 3 hosts"])
                for k in bad], [], []
    works = {e for e in ends if mesh.works(e)}
    hosts = [own] if (own := _observer(mesh)) else []
    hosts += [c for e in ends if e not in {h.name for h in hosts} and (c := _dead_host(mesh, e, works, what))]
    later, unsure = _failed_during(mesh, [e for e in ends if e not in {c.name for c in hosts}], works, what)
    hosts = sorted(hosts + later, key=lambda c: (mesh.rank[c.name], c.name))
    named = {c.name for c in hosts}
    links, left = [], []
    for k in bad:
        if named & set(k):
            continue
        if k[0] in works and k[1] in works and not (set(unsure) & set(k)):
            links.append(_culprit(mesh, "link", k, [f"{k[0]} and {k[1]} each work with other {what}"]))
        else:
            left.append(k)
    return hosts + links, left, unsure


def _observer(mesh: _Mesh) -> Culprit | None:
    """Rank 0's endpoint, cut off: rows are `unobserved` and each of its links failed since its first failure."""
    e0 = next((e for e in mesh.endpoints() if mesh.rank[e] == 0), "")
    links = mesh.judged(e0) if mesh.unseen else []
    seen = links and (_since_failure(mesh, e0) or ((links, []) if all(k in mesh.bad for k in links) else None))
    if not seen:
        return None
    since, before = seen
    rows = [r for k in since for r in mesh.pairs[k]]
    status, n, m = _dominant(rows), len(since), len(mesh.unseen)
    return Culprit("host", e0, status, (
        f"rank 0's own {'host' if mesh.per_host else 'endpoint'}, which collects the rows: every link since its "
        f"first failure failed: {n} of {n} ({status}): " + _listed([_pair_text(mesh, k, e0) for k in since]),
        f"{m} link{'s' if m > 1 else ''} among the others could not be observed from it (status {UNOBSERVED}): "
        "it was cut off from both ends, they were not cut off from each other",
        *_reason(rows)), worked_before=len(before), lossy=_lossy(rows))


def _dead_host(mesh: _Mesh, e: str, works: set[str], what: str) -> Culprit | None:
    """Rule a): every link of e failed, with two peers or more of which two work with someone."""
    links = mesh.judged(e)
    if not links or any(k not in mesh.bad for k in links):  # at once for the (many) hosts that work
        return None
    links = mesh.order(links)
    peers = [other_end(k, e) for k in links]
    witnesses = [p for p in peers if p in works]
    if len(set(peers)) < 2 or len(witnesses) < 2:
        return None
    rows = [r for k in links for r in mesh.pairs[k]]
    status = _dominant(rows)
    return Culprit("host", e, status, (
        f"{len(links)} of {len(links)} links failed ({status}): " + _listed([_pair_text(mesh, k, e) for k in links]),
        f"{_listed(witnesses)} {'each work' if len(witnesses) > 1 else 'works'} with other {what}",
        *_reason(rows)), lossy=_lossy(rows))


def _since_failure(mesh: _Mesh, e: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
    """(e's links measured since its first failed row, its links that worked before that row) when
    every row of e's judged links from its first failed one on failed; None when none failed, a
    later row worked, or nothing worked before."""
    judged = mesh.judged(e)
    failed = [k for k in judged if k in mesh.bad]
    if not failed:
        return None
    # Without a sort for the common case (every peer of a dead host): a row that worked after e's first failure.
    first_bad = min(r.seq for k in failed for r in mesh.pairs[k] if r.failed)
    if max(map(lambda k: mesh.last_ok.get(k, -1), judged)) > first_bad:
        return None
    rows = sorted((r for k in judged for r in mesh.pairs[k]), key=lambda r: r.seq)
    first = next((i for i, r in enumerate(rows) if r.failed), None)
    if not first or not all(r.failed for r in rows[first:]):  # None, or 0: nothing worked before
        return None
    since = list(dict.fromkeys(mesh.key(r.src, r.dst) for r in rows[first:]))
    return since, list(dict.fromkeys(mesh.key(r.src, r.dst) for r in rows[:first]))


def _failed_during(mesh: _Mesh, ends: list[str], works: set[str], what: str) -> tuple[list[Culprit], list[str]]:
    """Rule a), second form: (the hosts that went down during the run, the endpoints that look so
    but every one of whose peers since looks so too: which of them went down cannot be told)."""
    found = {}
    for e in ends:
        seen = _since_failure(mesh, e)
        if seen and len(seen[0]) >= 2 and all(other_end(k, e) in works for k in seen[0]):
            found[e] = seen
    hosts, unsure = [], []
    for e, (since, before) in found.items():
        witnesses = sorted({other_end(k, e) for k in since} - set(found), key=lambda p: (mesh.rank[p], p))
        if not witnesses:
            unsure.append(e)
            continue
        rows = [r for k in since for r in mesh.pairs[k]]
        status = _dominant(rows)
        hosts.append(Culprit("host", e, status, (
            f"every link since its first failure failed: {len(since)} of {len(since)} ({status}): "
            + _listed([_pair_text(mesh, k, e) for k in since])
            + f"; it worked before ({len(before)} link{'s' if len(before) > 1 else ''}: "
            + _listed([f"{e} <-> {other_end(k, e)}" for k in before]) + ")",
            f"{_listed(witnesses)} {'each work' if len(witnesses) > 1 else 'works'} with other {what}",
            *_reason(rows)), worked_before=len(before), lossy=_lossy(rows)))
    return hosts, unsure


def _culprit(mesh: _Mesh, kind: str, k: tuple[str, str], why: list[str]) -> Culprit:
    rows = mesh.pairs[k]
    status = _dominant(rows)
    return Culprit(kind, f"{k[0]} <-> {k[1]}", status,
                   (f"link failed ({status}): {_pair_text(mesh, k)}", *why, *_flapping(rows), *_reason(rows)),
                   lossy=_lossy(rows))


def _flapping(rows: list[_Row]) -> list[str]:
    """An evidence line when a direction of the link worked again after it had failed."""
    failed_ways = set()
    for r in rows:  # in measurement order
        if r.failed:
            failed_ways.add((r.src, r.dst))
        elif (r.src, r.dst) in failed_ways:
            n = sum(1 for x in rows if x.failed)
            return [f"it worked again after failing (flapping): {n} of {len(rows)} measurements failed"]
    return []


def suspects(df: pd.DataFrame | None) -> list[Culprit]:
    """The culprits the main rounds' failure pattern points at (rows with confirm true are left
    out), confirmed=None: hosts first, then links, then undecided links, each in rank order.
    `df`: the rows of one pairs run, in measurement order (other workloads' rows are ignored)."""
    main, _ = _meshes(df)
    return [] if main is None else _judge(main)[0]


def _ends(c: Culprit) -> list[str]:
    return [c.name] if c.kind == "host" else c.name.split(" <-> ")


def confirm_plan(df: pd.DataFrame | None, culprits: list[Culprit]) -> list[tuple[int, int]]:
    """The confirmation round: (rank, rank) pairs, the lower rank first, in a fixed order, none twice.

    `df`: the main rounds' rows of one run (confirm rows are ignored); `culprits`: suspects(df).
    Each host is paired with two endpoints that passed (every link worked but those to a suspect
    host; on another host than the suspect's),
    each link is measured again and each of its ends paired with one endpoint that passed;
    undecided culprits get nothing. Endpoints that passed are taken in rank order, in turn."""
    main, _ = _meshes(df)
    if main is None:
        return []
    blamed = {e for c in culprits if c.kind in ("host", "link") for e in _ends(c)}
    unknown = sorted(blamed - set(main.rank))
    if unknown:
        raise ValueError(f"confirm_plan: {unknown[0]} is not an endpoint of these rows")
    dead = {c.name for c in culprits if c.kind == "host"}
    good = [e for e in main.endpoints()  # every link worked, but those to a suspect host
            if e not in blamed and all(k not in main.bad or dead & set(k) for k in main.by_end[e])]
    cursor = 0

    def against(e: str, n: int) -> list[tuple[str, str]]:
        nonlocal cursor
        pool = [g for g in good if not main.several_hosts or main.host[g] != main.host[e]]
        picked = [pool[(cursor + i) % len(pool)] for i in range(min(n, len(pool)))]
        cursor += len(picked)
        return [(e, g) for g in picked]

    plan: list[tuple[int, int]] = []
    for c in {(c.kind, c.name): c for c in culprits}.values():  # each culprit once
        if c.kind == "host":
            wanted = against(c.name, 2)
        elif c.kind == "link":
            a, b = _ends(c)
            wanted = [(a, b)] + against(a, 1) + against(b, 1)
        else:
            continue
        for x, y in wanted:
            pair = (min(main.rank[x], main.rank[y]), max(main.rank[x], main.rank[y]))
            if pair not in plan:
                plan.append(pair)
    return plan


def _noted(c: Culprit, confirmed: bool | None, line: str | None) -> Culprit:
    return c if line is None else replace(c, confirmed=confirmed, evidence=c.evidence + (line,))


def _confirm_host(c: Culprit, conf: _Mesh) -> Culprit:
    links = conf.order(conf.by_end.get(c.name, []))
    if not links:
        return c
    worked = [other_end(k, c.name) for k in links if k not in conf.bad]
    if worked:
        return _noted(c, False, f"confirmation round: worked with {_listed(worked)}: it recovered, not named")
    return _noted(c, True, f"confirmation round: failed again against {_listed([other_end(k, c.name) for k in links])}")


def _confirm_link(c: Culprit, conf: _Mesh, blamed: set[str]) -> Culprit:
    """Refuted when the link works again; the host of one end when that end failed against every
    endpoint that passed while the other end worked with one; confirmed when it failed again and
    each end worked with another endpoint; else inconclusive (still named)."""
    a, b = _ends(c)
    if a not in conf.by_end and b not in conf.by_end:
        return c
    k = conf.key(a, b) if a in conf.rank and b in conf.rank else None
    if k in conf.pairs and k not in conf.bad:
        return _noted(c, False, "confirmation round: the link worked when measured again: it recovered, not named")
    tried = {e: [j for j in conf.order(conf.by_end.get(e, [])) if j != k and other_end(j, e) not in blamed]
             for e in (a, b)}
    passed = {e: [other_end(j, e) for j in tried[e] if j not in conf.bad] for e in (a, b)}
    failing = [e for e in (a, b) if tried[e] and not passed[e]]
    if len(failing) == 1 and passed[b if failing[0] == a else a]:
        return _end_to_blame(c, failing[0], b if failing[0] == a else a, k in conf.pairs, tried, passed, conf)
    if k not in conf.pairs:
        return _noted(c, None, "confirmation round: the link was not measured again, so it is neither confirmed "
                               "nor refuted")
    worked = {e: [other_end(j, e) for j in conf.order(conf.by_end[e]) if j != k and j not in conf.bad] for e in (a, b)}
    alone = [e for e in (a, b) if not worked[e]]
    if alone:
        return _noted(c, None, f"confirmation round: the link failed again, but {' and '.join(alone)} worked with no "
                               "other endpoint either: inconclusive")
    return _noted(c, True, "confirmation round: the link failed again; " + "; ".join(
        f"{e} worked with {_listed(worked[e])}" for e in (a, b)))


def _end_to_blame(c: Culprit, end: str, other: str, measured: bool, tried: dict, passed: dict,
                  conf: _Mesh) -> Culprit:
    """The suspect link `c` becomes the host `end`: it failed against every endpoint that passed."""
    rows = [r for j in tried[end] for r in conf.pairs[j]]
    n = len(tried[end])
    again = "the link failed again" if measured else "the link was not measured again"
    line = (f"confirmation round: {again}; {end} failed against every endpoint that passed ({n} of {n}: "
            f"{_listed([other_end(j, end) for j in tried[end]])}) while {other} worked with {_listed(passed[other])}: "
            f"{end} is to blame, not the link")
    return Culprit("host", end, _dominant(rows), c.evidence + (line,), True, via=c.name)


def _failed_links(main: _Mesh, conf: _Mesh) -> list[dict]:
    groups: dict[tuple[str, str, bool], list[_Row]] = {}
    for mesh in (main, conf):
        for k in mesh.order(mesh.bad):
            for r in mesh.pairs[k]:
                if r.failed:
                    groups.setdefault((r.src, r.dst, r.confirm), []).append(r)
    out = []
    for (src, dst, confirm), rows in groups.items():
        errors = Counter(r.error for r in rows if r.error)
        out.append({"src": src, "dst": dst, "status": _dominant(rows),
                    "error": errors.most_common(1)[0][0] if errors else None,
                    "confirm": True if confirm else None, "bidir": rows[0].bidir})
    return out


def _why_undecided(main: _Mesh, culprits: list[Culprit], left: list[tuple[str, str]],
                   unsure: list[str]) -> str | None:
    if not main.bad:
        return None
    judged = {k for e in main.by_end for k in main.judged(e)}
    if any(c.kind == "undecided" for c in culprits):
        return "with two endpoints a failed link cannot be pinned on either end: measure at least 3 hosts"
    if judged <= main.bad:
        between = " between hosts" if not main.per_host and main.several_hosts else ""
        return (f"every link{between} failed ({len(judged)} of {len(judged)}): no two endpoints worked together, "
                "so none can be blamed; check that the hosts are up and can reach each other")
    if unsure:
        why = (f"{_listed(unsure)} each failed every link since their first failure, and so did each of their "
               "peers since then: which of them stopped working during the run cannot be told")
        rest = [k for k in left if not set(unsure) & set(k)]
        return why + (f"; also cannot tell which end of {_listed([_pair_text(main, k) for k in rest])} is to blame"
                      if rest else "")
    if left:
        return (f"cannot tell which end of {len(left)} failed link{'s' if len(left) > 1 else ''} is to blame: "
                f"{_listed([_pair_text(main, k) for k in left])} (an end works with nobody who works with others)")
    return None


_KIND_ORDER = {"host": 0, "link": 1, "undecided": 2}


def faults(df: pd.DataFrame | None) -> FaultVerdict:
    """faults_on_rows() of one pairs run; with rails, of each rail's rows on their own, so a failed
    rail of a host names that rail (Culprit.rail) and leaves the host's other rails alone."""
    rows = pairs_rows(df)
    if rows is None or not railrank.has_rails(rows):
        return faults_on_rows(df)
    culprits, failed, undecided, unobserved = [], [], [], 0
    for rail in dict.fromkeys(column(rows, "rail")):
        part = rows[rows["rail"].isna()] if rail is None else rows[rows["rail"] == rail]
        v = faults_on_rows(part)
        culprits += [replace(c, rail=rail) for c in v.culprits]
        failed += [f | {"rail": rail} for f in v.failed]
        unobserved += v.unobserved
        if v.undecided:
            undecided.append(f"rail {rail}: {v.undecided}")
    return FaultVerdict(culprits, failed, "; ".join(undecided) or None, unobserved)


def faults_on_rows(df: pd.DataFrame | None) -> FaultVerdict:
    """The verdict from the failure pattern of one pairs run: suspects() from the main rounds, then
    the confirmation rows (confirm true) decide `confirmed`. A host is confirmed when all its
    confirmation links failed again and refuted when any worked; a link is refuted when its
    re-measure worked, becomes the host of one end when that end failed against every endpoint
    that passed while the other end worked, and is confirmed when it failed again while each end
    worked with another endpoint. Without confirmation rows a culprit keeps confirmed=None and is
    named. `df`: the rows of one run, in measurement order."""
    main, conf = _meshes(df)
    if main is None or conf is None:  # both or neither
        return FaultVerdict([], [])
    culprits, left, unsure = _judge(main)
    blamed = {e for c in culprits if c.kind in ("host", "link") for e in _ends(c)}
    decided: dict[tuple[str, str], Culprit] = {}
    for c in culprits:
        d = (_confirm_host(c, conf) if c.kind == "host" else _confirm_link(c, conf, blamed) if c.kind == "link"
             else c)
        decided.setdefault((d.kind, d.name), d)  # two links of one end that both point at its host: once
    ordered = sorted(decided.values(), key=lambda c: _KIND_ORDER.get(c.kind, 3))
    return FaultVerdict(ordered, _failed_links(main, conf), _why_undecided(main, ordered, left, unsure),
                        len(main.unseen | conf.unseen))


def faults_by_run(df: pd.DataFrame | None) -> dict[str, FaultVerdict]:
    """faults() of every pairs run in `df`, by run id (pairs --from exits with the worst exit_code)."""
    rows = pairs_rows(df)
    if rows is None:
        return {}
    return {str(run_id): faults(run) for run_id, run in linkrank.by_run(rows)}
