"""The `wire` column's format: what each host's counters did during a point (docs/RESULTS.md).

The harness (harness/wireprobe.py) fills one entry per host from the counter snapshots around a point;
this module turns the entries into the row's columns and reads them back, for the live table,
the end-of-run lines, compare and report. No torch, no network: plain JSON.

An entry per host:  {"counters": {where: {counter: delta}}, "trouble": [[where, counter, delta, kind]],
                     "out_bytes": int, "in_bytes": int, "ranks": int, "cost_ms": float}
where `where` names the place as a user reads it ("eth0", "eth0 qdisc", "mlx5_0/1", "tcp").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from commbench.core.inputs import MAX_NESTING, nests_deeper

WIRE_FORMAT = 1
# The order trouble is named in: what breaks or fills first, then what follows from it (a link
# that went down drops what it was sending; a drop makes TCP retransmit; the retransmissions are
# the symptom, the drop the cause). The kinds are net/counters.py's.
CAUSE_ORDER = ("link", "error", "drop", "pause", "congestion", "retransmit")
MAX_DELTA = 2**64  # the most a 64-bit counter can move by; a trouble entry's delta past it is damaged


@dataclass(frozen=True)
class Trouble:
    host: str
    where: str
    counter: str
    delta: int
    kind: str

    def text(self) -> str:
        return f"{self.host} {self.where} {self.counter} +{self.delta:,}"

    def cause_rank(self) -> tuple[int, int, str, str, str]:
        rank = CAUSE_ORDER.index(self.kind) if self.kind in CAUSE_ORDER else len(CAUSE_ORDER)
        return rank, -self.delta, self.host, self.where, self.counter


def columns(per_host: dict[str, dict[str, Any]] | None, bus_bytes: float | None) -> dict[str, Any]:
    """The row's wire columns from every host's entry. `bus_bytes`: the bytes one rank sends
    between the snapshots (size x bus factor x calls), or None where that is not known.
    wire_per_payload is the largest host's out_bytes / bus_bytes; only for hosts with one rank
    (with more, part of the traffic stays inside the host)."""
    if not per_host:
        return {"wire": None, "wire_per_payload": None, "wire_trouble": None}
    ratios = {}
    for host, entry in per_host.items():
        if bus_bytes and entry.get("ranks") == 1 and entry.get("out_bytes"):
            ratios[host] = entry["out_bytes"] / bus_bytes
            entry["per_payload"] = round(ratios[host], 5)
    any_trouble = any(entry.get("trouble") for entry in per_host.values())
    doc = {"format": WIRE_FORMAT, "hosts": per_host}
    return {"wire": json.dumps(doc, sort_keys=True),
            "wire_per_payload": max(ratios.values()) if ratios else None,
            "wire_trouble": any_trouble}


def hosts(value: Any) -> dict[str, dict[str, Any]]:
    """A row's `wire` value back to its entries per host ({} where there is none)."""
    if not isinstance(value, str) or not value:
        return {}
    if nests_deeper(value, MAX_NESTING):  # a damaged or hostile file: json.loads would recurse
        return {}
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return {}
    found = doc.get("hosts") if isinstance(doc, dict) else None
    return found if isinstance(found, dict) else {}


def troubles(value: Any) -> list[Trouble]:
    """The trouble counters that moved during a row's point, causes first (CAUSE_ORDER), then largest."""
    out = []
    for host, entry in hosts(value).items():
        for item in entry.get("trouble") or []:
            try:
                where, counter, delta, kind = item
                moved = _delta(delta)
            except (TypeError, ValueError, OverflowError):  # int(inf) overflows: a 1e400 in the JSON
                continue  # a damaged entry names nothing
            out.append(Trouble(str(host), str(where), str(counter), moved, str(kind)))
    return sorted(out, key=Trouble.cause_rank)


def _delta(value: Any) -> int:
    """A trouble entry's delta as a count: ValueError for one no counter can have moved by (not a
    finite number, or outside 0..MAX_DELTA: a damaged or hostile file), so that no sum overflows."""
    moved = int(value)
    if not 0 <= moved <= MAX_DELTA:
        raise ValueError(f"a delta of {moved} is outside a counter's range")
    return moved


def mark(value: Any, limit: int = 2) -> str:
    """The live table's mark on a point whose trouble counters rose ("" on a clean point)."""
    found = troubles(value)
    if not found:
        return ""
    more = f", +{len(found) - limit} more" if len(found) > limit else ""
    return "  ! wire: " + ", ".join(t.text() for t in found[:limit]) + more


def totals(values: Iterable[Any]) -> list[tuple[Trouble, int]]:
    """Over a run's rows: per host, place and counter, the summed delta and the points it moved in."""
    summed: dict[tuple[Any, ...], list[Any]] = {}
    for value in values:
        for t in troubles(value):
            key = (t.host, t.where, t.counter, t.kind)
            acc = summed.setdefault(key, [0, 0])
            acc[0] += t.delta
            acc[1] += 1
    rows = [(Trouble(h, w, c, d, k), n) for (h, w, c, k), (d, n) in summed.items()]
    return sorted(rows, key=lambda r: (r[0].host, r[0].where, -r[0].delta))


def total_lines(values: Iterable[Any], points: int) -> list[str]:
    """One line per host, place and counter that moved during the run."""
    return [f"commbench: wire: {t.host} {t.where} {t.counter} +{t.delta:,} ({t.kind}) during {n} of {points} "
            f"point(s)" for t, n in totals(values)]


MISMATCH_MIN_BYTES = 1 << 20  # below this, control traffic (bootstrap, heartbeats) could explain it


def transport_lines(transport: str | None, values: Iterable[Any]) -> list[str]:
    """sweep --nccl-debug: the transport NCCL reported against where the bytes went, per host.
    NET/IB while the interfaces carried more than the RDMA ports (or NET/Socket while the
    RDMA ports carried more) is a finding."""
    if not transport:
        return []
    sums: dict[str, list[int]] = {}
    for value in values:
        for host, e in hosts(value).items():
            acc = sums.setdefault(host, [0, 0])
            acc[0] += int(e.get("netdev_out_bytes") or 0)
            acc[1] += int(e.get("rdma_out_bytes") or 0)
    lines = []
    for host, (sock, rdma) in sorted(sums.items()):
        if "NET/IB" in transport and sock > max(rdma, MISMATCH_MIN_BYTES):
            lines.append(f"commbench: wire: NCCL reported {transport}, but {host} sent {sock:,} B over its interfaces "
                         f"and {rdma:,} B over its RDMA ports: the traffic took sockets (check NCCL_IB_HCA, "
                         "NCCL_IB_DISABLE and `commbench doctor`)")
        elif "NET/Socket" in transport and "NET/IB" not in transport and rdma > max(sock, MISMATCH_MIN_BYTES):
            lines.append(f"commbench: wire: NCCL reported {transport}, but {host} sent {rdma:,} B over its RDMA ports "
                         f"and {sock:,} B over its interfaces: another program used the RDMA ports meanwhile, or "
                         "the debug file is not this run's")
    return lines


def out_bytes(value: Any, host: str | None = None) -> dict[str, int]:
    """Bytes each host sent (its traffic interface and RDMA ports) during a row's point."""
    return {h: int(e.get("out_bytes") or 0) for h, e in hosts(value).items() if host in (None, h)}


def is_clean(value: Any) -> bool | None:
    """True: counters were read and no trouble counter moved; False: one did; None: not read."""
    entries = hosts(value)
    if not entries:
        return None
    return not any(e.get("trouble") for e in entries.values())
