"""doctor's counter checks: the trouble counters of a host's ports as they stand (since they were
last cleared), and what moved while `doctor --watch S` looked (docs/DOCTOR.md, "Counters").

As they stand, only the NIC's and the port's own counters are judged (RDMA port counters and
hw_counters, perfquery, ethtool -S, and the interfaces' error counters): the stack's drops and
TCP's retransmissions since boot say nothing about the link today. While watching, everything
in the counter table counts.
"""

from __future__ import annotations

import time
from collections import defaultdict

from commbench.net import counters as ct

HINTS = {
    ct.LINK: "the link went down (and up again): a flapping cable, optic, NIC or switch port; check `ip -s link` "
             "and `ethtool IF` (Ethernet) or `ibstat` (InfiniBand), the kernel log (dmesg) and the switch port's log",
    ct.ERROR: "errors on the link: reseat or replace the cable or optic, check the port (ibstat, ethtool -m); "
              "clear the counters (perfquery -R) and watch whether they rise: commbench doctor --watch 60",
    ct.DROP: "packets dropped: a full buffer or queue (congestion, a slow receiver) or a port that went down",
    ct.RETRANSMIT: "packets lost on the path and sent again: look for drops and errors on both ends of the link",
    ct.PAUSE: "pause frames (802.3x / PFC): a receiver stopped this link; a share of its time went to waiting",
    ct.CONGESTION: "congestion: ECN marks, congestion notifications (DCQCN) or credit waits (PortXmitWait); "
                   "normal under load, a problem where one port shows far more than its peers",
}
_PROBLEM = (ct.LINK, ct.ERROR, ct.DROP)  # the rest is reported as a note: it happens on healthy fabrics under load
_STANDING = (ct.IB, ct.IB_HW, ct.PERFQUERY, ct.ETHTOOL)


def to_json(reading: ct.Reading) -> list[dict]:
    """A reading as host facts carry it (JSON: no tuple keys)."""
    return [{"source": s, "place": p, "values": dict(v)} for (s, p), v in reading.items() if v]


def from_json(items: list[dict] | None) -> ct.Reading:
    return {(i["source"], i["place"]): dict(i["values"]) for i in items or []}


def standing(reading: ct.Reading) -> list[ct.Moved]:
    """The trouble counters of a reading that are not zero. A port read from sysfs and from
    perfquery is reported once (sysfs: the same PMA counters)."""
    in_sysfs = {p for (s, p) in reading if s == ct.IB}
    moved = ct.absolute({k: v for k, v in reading.items() if not (k[0] == ct.PERFQUERY and k[1] in in_sysfs)})
    return [m for m in ct.trouble(moved) if m.source in _STANDING or (m.source == ct.NETDEV and m.kind == ct.ERROR)]


def watch(sampler, seconds: float) -> list[ct.Moved]:
    """What moved on the sampler's interfaces and ports in `seconds`, traffic included."""
    before = sampler.read()
    time.sleep(seconds)
    return ct.deltas(before, sampler.read())


def _lines(moved: list[ct.Moved]) -> dict[tuple[str, str], list[ct.Moved]]:
    grouped: dict[tuple[str, str], list[ct.Moved]] = defaultdict(list)
    for m in moved:
        grouped[(m.where, m.kind)].append(m)
    return grouped


def findings(host: str, moved: list[ct.Moved], since: str, make) -> list:
    """One finding per place and kind of trouble: `make(check, host, message, hint, severity)`."""
    out = []
    for (where, kind), items in sorted(_lines(moved).items()):
        named = ", ".join(_named(m) for m in sorted(items, key=lambda m: -m.delta))
        out.append(make("counters", host, f"{host} {where}: {kind} counters {since}: {named}", HINTS[kind],
                        "problem" if kind in _PROBLEM else "note"))
    return out


def _named(m: ct.Moved) -> str:
    c = ct.lookup(m.source, m.name)
    full = " (saturated: the counter stopped at its maximum)" if c is not None and c.saturated(m.delta) else ""
    return f"{ct.display_name(m.source, m.name)} {m.delta:,}{full}"


def watch_summary(moved: list[ct.Moved], seconds: float) -> list[str]:
    """Per place, the traffic seen while watching (bytes/s out and in)."""
    rates: dict[str, dict[str, float]] = defaultdict(lambda: {"out": 0.0, "in": 0.0})
    for m in moved:
        c = ct.lookup(m.source, m.name)
        if m.kind == ct.TRAFFIC and c is not None and c.unit == "bytes" and c.direction:
            rates[m.where][c.direction] += m.delta / seconds
    return [f"{where}: {r['out'] * 8 / 1e6:,.1f} Mbit/s out, {r['in'] * 8 / 1e6:,.1f} Mbit/s in"
            for where, r in sorted(rates.items())]
