"""Counters around every point: one rank per host reads its host's NIC, port and TCP counters just
before the warm-up and just after the timed loop (never inside it), and rank 0 gets every host's
changes in one gather after the loop's own. The row's `wire` columns come from core/wire.py.

What is read on a host: the traffic interface, every RDMA port and the RoCE netdevs behind them,
and the namespace's TCP MIB (net/wiresource.py). A host where nothing can be read sends nothing;
the point is measured all the same.

A link that went down (the `link` kind: an interface's carrier_down_count, an RDMA port's
link_downed) is counted from the previous point's end, not from this point's start: a flap that
fell between two points (while the check ran or the row was written) is still the run's, and the
next point is the first to cross the link after it. Everything else keeps the point's own window,
so that the bytes are the collective's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import torch

from commbench.net import counters as ct
from commbench.net.wiresource import LiveSampler, ib_ports


@dataclass
class WireProbe:
    host: str
    ranks_on_host: int
    sampler: LiveSampler | None  # None: this rank is not its host's reader
    host_of: list[str] = field(default_factory=list)  # index = rank
    before: dict | None = None
    links_seen: dict | None = None  # the reading the link counters were last counted from
    cost_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @classmethod
    def for_rank(cls, ranks: list[dict], rank: int, more: list[str] | None = None) -> WireProbe:
        """The lowest rank on each host reads that host; `ranks` are the gathered rank facts;
        `more`: interfaces a settings axis sends over (GLOO_SOCKET_IFNAME=eth1), where they exist."""
        me = next(r for r in ranks if r["rank"] == rank)
        mates = [r["rank"] for r in ranks if r["host"] == me["host"]]
        sampler = None
        if rank == min(mates):
            try:
                # TCP's counters cover every connection of the namespace: on one host (loopback)
                # they would only show other programs' traffic
                ifaces = list(dict.fromkeys(_ifaces(me) + (more or [])))
                sampler = LiveSampler(ifaces, ib_ports(), tcp=me.get("link_layer") != "loopback")
            except Exception:  # noqa: BLE001 - no netlink here (a sandbox): measure without counters
                pass
        return cls(me["host"], len(mates), sampler, [r["host"] for r in sorted(ranks, key=lambda r: r["rank"])])

    def begin(self) -> None:
        if self.sampler is not None:
            start = time.perf_counter()
            self.before = self._read()
            self.cost_s = time.perf_counter() - start
            if self.links_seen is None:
                self.links_seen = self.before

    def end(self) -> bytes:
        """This host's entry (JSON bytes) since begin(); b"" from a rank that does not read."""
        if self.sampler is None or self.before is None:
            return b""
        start = time.perf_counter()
        after = self._read()
        cost = self.cost_s + time.perf_counter() - start
        before, self.before = self.before, None
        if after is None or before is None:
            return b""
        moved = [m for m in ct.deltas(before, after) if m.kind != ct.LINK]
        moved += [m for m in ct.deltas(self.links_seen or before, after) if m.kind == ct.LINK]
        self.links_seen = after
        return json.dumps(entry(moved, self.ranks_on_host, cost)).encode()

    def _read(self):
        try:
            return self.sampler.read()
        except Exception as exc:  # noqa: BLE001 - an interface vanished mid-run: this point goes without counters
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return None

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()


def _ifaces(me: dict) -> list[str]:
    """The traffic interface and the RoCE netdevs of the host's RDMA ports."""
    names = [me.get("iface")] + [p.get("netdev") for p in (me.get("host_net") or {}).get("rdma") or []]
    return list(dict.fromkeys(n for n in names if n))


def entry(moved: list[ct.Moved], ranks: int, cost_s: float) -> dict:
    """A host's entry of the wire column (core/wire.py)."""
    counters: dict[str, dict[str, int]] = {}
    for m in moved:
        counters.setdefault(m.where, {})[m.name] = m.delta
    out = [m for m in moved if _bytes_direction(m) == "out"]
    return {"counters": counters,
            "trouble": [[m.where, m.name, m.delta, m.kind] for m in ct.trouble(moved)],
            "out_bytes": sum(m.delta for m in out),
            "in_bytes": sum(m.delta for m in moved if _bytes_direction(m) == "in"),
            # sockets (the interfaces' own counters) apart from RDMA (the ports'), for --nccl-debug
            "netdev_out_bytes": sum(m.delta for m in out if m.source == ct.NETDEV),
            "rdma_out_bytes": sum(m.delta for m in out if m.source == ct.IB),
            "ranks": ranks, "cost_ms": round(cost_s * 1e3, 3)}


def _bytes_direction(m: ct.Moved) -> str | None:
    """"out" or "in" for a count of bytes a NIC or an IB port moved; None for any other counter."""
    counter = ct.lookup(m.source, m.name)
    if m.kind != ct.TRAFFIC or m.source not in (ct.NETDEV, ct.IB) or counter is None or counter.unit != "bytes":
        return None
    return counter.direction


def gather(ops, payload: bytes, host_of: list[str], device) -> dict[str, dict] | None:
    """Every rank's entry to every rank (two gathers: lengths, then the padded bytes); the entries
    by host. `ops` is the loop's group operations (harness/pairgroup.py)."""
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    sizes = [int(t.item()) for t in ops.gather(size)]
    longest = max(sizes)
    if longest == 0:
        return None
    buf = torch.zeros(longest, dtype=torch.uint8, device=device)
    if payload:
        buf[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    everyone = ops.gather(buf)
    per_host = {}
    for rank, (n, data) in enumerate(zip(sizes, everyone)):
        if n:
            per_host[host_of[rank]] = json.loads(bytes(data[:n].cpu().tolist()).decode())
    return per_host or None
