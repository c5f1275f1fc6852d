"""The counter table: every NIC, port and network-stack counter commbench reads, with its source,
unit and meaning, and the arithmetic on snapshots of them (deltas, the counters that mean trouble).

A snapshot (`Reading`) maps a place (an interface, an RDMA port, the TCP stack of a network
namespace) to that source's raw counter values; net/wiresource.py takes them. Only the counters in
this table are kept: a driver's hundreds of others are not guessed at. docs/DOCTOR.md ("Counters")
is this table in prose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a counter says, coarsely. The trouble kinds are the ones a healthy point leaves at zero.
TRAFFIC, LINK, ERROR, DROP, RETRANSMIT, PAUSE, CONGESTION, QUEUE, PROBE = (
    "traffic", "link", "error", "drop", "retransmit", "pause", "congestion", "queue", "probe")
TROUBLE = (LINK, ERROR, DROP, RETRANSMIT, PAUSE, CONGESTION)

# The sources, in the order a snapshot reads them.
NETDEV = "netdev"  # the interface's rtnl_link_stats64 (= /sys/class/net/IF/statistics/*) and carrier count
QDISC = "qdisc"  # the interface's root queueing discipline (`tc -s qdisc`)
ETHTOOL = "ethtool"  # the driver's own statistics (`ethtool -S`)
TCP = "tcp"  # the network namespace's TCP MIB (/proc/net/snmp)
IB = "ib"  # /sys/class/infiniband/DEV/ports/P/counters (the PMA port counters)
IB_HW = "ib_hw"  # /sys/class/infiniband/DEV/ports/P/hw_counters (mlx5 RoCE/IB protocol counters)
PERFQUERY = "perfquery"  # `perfquery` / `perfquery -x`: the same PMA counters, by their IB names


@dataclass(frozen=True)
class Counter:
    source: str
    name: str  # the source's own name; for `pattern` entries a regular expression over names
    kind: str
    meaning: str
    unit: str = "events"  # bytes | packets | events | ticks (PortXmitWait: link clock ticks)
    scale: int = 1  # raw x scale = unit (the IB data counters count 4-byte words)
    direction: str | None = None  # traffic: "out" or "in"
    ib_name: str | None = None  # an ib counter's name in the IB spec and in perfquery's output
    legacy: str | None = None  # the name older perfquery versions print (e.g. SymbolErrors)
    bits: int | None = None  # a PMA error counter's width: it stops at 2**bits - 1 (drivers/infiniband/core/sysfs.c)

    def saturated(self, value: int) -> bool:
        return self.bits is not None and value >= (1 << self.bits) - 1
    pattern: bool = False


def _c(source, name, kind, meaning, **kw) -> Counter:
    return Counter(source, name, kind, meaning, **kw)


_NETDEV = [
    _c(NETDEV, "tx_bytes", TRAFFIC, "bytes sent, link headers included", unit="bytes", direction="out"),
    _c(NETDEV, "rx_bytes", TRAFFIC, "bytes received, link headers included", unit="bytes", direction="in"),
    _c(NETDEV, "tx_packets", TRAFFIC, "packets sent", unit="packets", direction="out"),
    _c(NETDEV, "rx_packets", TRAFFIC, "packets received", unit="packets", direction="in"),
    _c(NETDEV, "rx_errors", ERROR, "received packets with any error"),
    _c(NETDEV, "tx_errors", ERROR, "packets the NIC failed to send"),
    _c(NETDEV, "rx_crc_errors", ERROR, "frames with a bad checksum: a bad cable, optic or port"),
    _c(NETDEV, "rx_frame_errors", ERROR, "misaligned frames"),
    _c(NETDEV, "rx_length_errors", ERROR, "frames of a wrong length"),
    _c(NETDEV, "rx_over_errors", DROP, "receive ring overruns"),
    _c(NETDEV, "rx_fifo_errors", DROP, "receive FIFO overruns"),
    _c(NETDEV, "rx_missed_errors", DROP, "frames the host was too slow to take off the NIC"),
    _c(NETDEV, "carrier_down_count", LINK, "times the link lost its carrier (went down): a flapping cable, optic, "
                                           "NIC or switch port (/sys/class/net/IF/carrier_down_count, Linux 4.16+)"),
    _c(NETDEV, "tx_carrier_errors", ERROR, "carrier lost while sending: the link flapped"),
    _c(NETDEV, "tx_aborted_errors", ERROR, "sends aborted by the NIC"),
    _c(NETDEV, "tx_fifo_errors", ERROR, "transmit FIFO underruns"),
    _c(NETDEV, "collisions", ERROR, "collisions (half duplex)"),
    _c(NETDEV, "rx_dropped", DROP, "received packets dropped by the host (no buffer, filtered)"),
    _c(NETDEV, "tx_dropped", DROP, "packets dropped before they were sent"),
]
_QDISC = [
    _c(QDISC, "drops", DROP, "packets the queue dropped: it was full (a shaper or a slow link)"),
    _c(QDISC, "overlimits", QUEUE, "times the queue held a packet back to keep the rate (shaping, not loss)"),
    _c(QDISC, "requeues", QUEUE, "packets the driver handed back to the queue"),
]
_TCP = [
    _c(TCP, "OutSegs", TRAFFIC, "TCP segments sent", unit="packets", direction="out"),
    _c(TCP, "RetransSegs", RETRANSMIT, "TCP segments sent again: something on the path lost them (trouble only "
                                       "beyond the loss probes and 0.1% of the segments sent)"),
    _c(TCP, "TCPLossProbes", PROBE, "tail loss probes: a segment sent again because its ACK was late (2 RTT), "
                                    "which a loaded host's healthy link also does (TcpExt, /proc/net/netstat)"),
    _c(TCP, "TCPDSACKRecvSegs", PROBE, "segments the receiver reported getting twice (D-SACK): retransmissions "
                                       "nothing lost, sent because an ACK was late or segments came reordered "
                                       "(TcpExt, Linux 5.5+)"),
    _c(TCP, "InErrs", ERROR, "TCP segments received with errors"),
    _c(TCP, "InCsumErrors", ERROR, "TCP segments received with a bad checksum"),
]
_IB = [
    _c(IB, "port_xmit_data", TRAFFIC, "data sent (4-byte words)", unit="bytes", scale=4, direction="out",
       ib_name="PortXmitData", legacy="XmtData"),
    _c(IB, "port_rcv_data", TRAFFIC, "data received (4-byte words)", unit="bytes", scale=4, direction="in",
       ib_name="PortRcvData", legacy="RcvData"),
    _c(IB, "port_xmit_packets", TRAFFIC, "packets sent", unit="packets", direction="out",
       ib_name="PortXmitPkts", legacy="XmtPkts"),
    _c(IB, "port_rcv_packets", TRAFFIC, "packets received", unit="packets", direction="in",
       ib_name="PortRcvPkts", legacy="RcvPkts"),
    _c(IB, "symbol_error", ERROR, "bit errors on the physical link: reseat or replace the cable or optic",
       ib_name="SymbolErrorCounter", legacy="SymbolErrors", bits=16),
    _c(IB, "link_error_recovery", ERROR, "times the link retrained after errors",
       ib_name="LinkErrorRecoveryCounter", legacy="LinkRecovers", bits=8),
    _c(IB, "link_downed", LINK, "times the link went down", ib_name="LinkDownedCounter", legacy="LinkDowned", bits=8),
    _c(IB, "port_rcv_errors", ERROR, "received packets with errors (bad CRC, malformed)",
       ib_name="PortRcvErrors", legacy="RcvErrors", bits=16),
    _c(IB, "port_rcv_remote_physical_errors", ERROR, "packets marked bad by a link upstream",
       ib_name="PortRcvRemotePhysicalErrors", legacy="RcvRemotePhysErrors", bits=16),
    _c(IB, "port_rcv_switch_relay_errors", DROP, "packets a switch could not forward",
       ib_name="PortRcvSwitchRelayErrors", legacy="RcvSwRelayErrors", bits=16),
    _c(IB, "port_xmit_discards", DROP, "packets discarded unsent (port down or congested)",
       ib_name="PortXmitDiscards", legacy="XmtDiscards", bits=16),
    _c(IB, "port_xmit_constraint_errors", DROP, "packets not sent because of partition or filter rules",
       ib_name="PortXmitConstraintErrors", legacy="XmtConstraintErrors", bits=8),
    _c(IB, "port_rcv_constraint_errors", DROP, "packets dropped by partition or filter rules",
       ib_name="PortRcvConstraintErrors", legacy="RcvConstraintErrors", bits=8),
    _c(IB, "local_link_integrity_errors", ERROR, "times the local physical error threshold was passed",
       ib_name="LocalLinkIntegrityErrors", legacy="LinkIntegrityErrors", bits=4),
    _c(IB, "excessive_buffer_overrun_errors", DROP, "receive buffer overruns in a row",
       ib_name="ExcessiveBufferOverrunErrors", legacy="ExcBufOverrunErrors", bits=4),
    _c(IB, "VL15_dropped", DROP, "subnet management packets dropped", ib_name="VL15Dropped", bits=16),
    _c(IB, "port_xmit_wait", CONGESTION, "ticks with data to send but no credit from the peer: congestion",
       unit="ticks", ib_name="PortXmitWait", bits=32),
]
_IB_HW = [
    _c(IB_HW, "np_cnp_sent", CONGESTION, "congestion notifications this port sent back (it received ECN marks)"),
    _c(IB_HW, "rp_cnp_handled", CONGESTION, "congestion notifications this port received and slowed down for"),
    _c(IB_HW, "rp_cnp_ignored", CONGESTION, "congestion notifications received and ignored"),
    _c(IB_HW, "np_ecn_marked_roce_packets", CONGESTION, "RoCE packets received with an ECN congestion mark"),
    _c(IB_HW, "out_of_sequence", RETRANSMIT, "packets received out of sequence: something upstream lost packets"),
    _c(IB_HW, "packet_seq_err", RETRANSMIT, "NAKs for sequence errors received: packets were lost"),
    _c(IB_HW, "implied_nak_seq_err", RETRANSMIT, "sequence errors implied by a read response"),
    _c(IB_HW, "duplicate_request", RETRANSMIT, "requests received again (the sender retried)"),
    _c(IB_HW, "local_ack_timeout_err", RETRANSMIT, "ACK timeouts: the sender retransmitted"),
    _c(IB_HW, "rnr_nak_retry_err", RETRANSMIT, "receiver-not-ready retries exhausted"),
    _c(IB_HW, "roce_adp_retrans", RETRANSMIT, "adaptive retransmissions"),
    _c(IB_HW, "roce_slow_restart", RETRANSMIT, "slow restarts after retransmission timeouts"),
    _c(IB_HW, "out_of_buffer", DROP, "packets dropped: no receive buffer posted"),
    _c(IB_HW, "req_cqe_error", ERROR, "requests completed with an error"),
    _c(IB_HW, "resp_cqe_error", ERROR, "responses completed with an error"),
    _c(IB_HW, "rx_icrc_encapsulated", ERROR, "RoCE packets with a bad ICRC"),
]
_ETHTOOL = [
    _c(ETHTOOL, r"(rx|tx)_bytes_phy", TRAFFIC, "bytes on the wire, every protocol (RDMA included)", unit="bytes",
       pattern=True),
    _c(ETHTOOL, r"(rx|tx)_pause(_ctrl_phy)?", PAUSE, "802.3x pause frames: the link was stopped for a while",
       pattern=True),
    _c(ETHTOOL, r"(rx|tx)_prio\d_pause", PAUSE, "PFC pause frames of one priority", pattern=True),
    _c(ETHTOOL, r"(rx|tx)_prio\d_pause_duration", PAUSE, "time a priority was paused", unit="us", pattern=True),
    _c(ETHTOOL, r"(rx|tx)_global_pause", PAUSE, "global (802.3x) pause frames", pattern=True),
    _c(ETHTOOL, r"(rx|tx)_global_pause_duration", PAUSE, "time the link was paused", unit="us", pattern=True),
    _c(ETHTOOL, r"tx_pause_storm_(warning|error)_events", PAUSE, "pause storms the NIC saw", pattern=True),
    _c(ETHTOOL, r"(rx|tx)_discards_phy", DROP, "packets the NIC port discarded (buffer full)", pattern=True),
    _c(ETHTOOL, r"rx_prio\d_discards", DROP, "packets of one priority discarded", pattern=True),
    _c(ETHTOOL, r"rx_out_of_buffer", DROP, "packets dropped: no receive buffer", pattern=True),
    _c(ETHTOOL, r"rx_crc_errors_phy", ERROR, "frames with a bad checksum at the port", pattern=True),
    _c(ETHTOOL, r"rx_(pcs_)?symbol_err(ors)?_phy", ERROR, "symbol errors at the port: a bad cable or optic",
       pattern=True),
    _c(ETHTOOL, r"rx_(corrected|uncorrectable)_bits_phy", ERROR, "bits the FEC had to correct / could not",
       pattern=True),
]

COUNTERS: tuple[Counter, ...] = tuple(_NETDEV + _QDISC + _TCP + _IB + _IB_HW + _ETHTOOL)

_EXACT = {(c.source, c.name): c for c in COUNTERS if not c.pattern}
_EXACT.update({(PERFQUERY, c.ib_name): c for c in _IB if c.ib_name})  # perfquery: the same counters
_EXACT.update({(PERFQUERY, c.legacy): c for c in _IB if c.legacy})
_PATTERNS = [(c.source, re.compile(c.name), c) for c in COUNTERS if c.pattern]


def lookup(source: str, name: str) -> Counter | None:
    """The table's entry for a source's counter, or None (not a counter commbench reads)."""
    found = _EXACT.get((source, name))
    if found is not None:
        return found
    return next((c for s, rx, c in _PATTERNS if s == source and rx.fullmatch(name)), None)


def display_name(source: str, name: str) -> str:
    """How a report names a counter: an IB port counter by both its sysfs and perfquery names."""
    c = lookup(source, name)
    if c is None or not c.ib_name or source not in (IB, PERFQUERY):
        return name
    return f"{c.name} ({c.ib_name})"


# A reading: (source, place) -> {counter name: raw value}. A place is an interface ("eth0"),
# an RDMA port ("mlx5_0/1"), or "tcp" (the namespace's stack).
Reading = dict[tuple[str, str], dict[str, int]]


@dataclass(frozen=True)
class Moved:
    """One counter's change over a point, in its unit."""

    source: str
    place: str
    name: str
    delta: int
    kind: str

    @property
    def where(self) -> str:
        """The place as a user reads it: `eth0`, `eth0 qdisc`, `mlx5_0/1`, `tcp`."""
        return self.place if self.source in (NETDEV, IB, IB_HW, PERFQUERY, TCP) else f"{self.place} {self.source}"


def kept(source: str, values: dict[str, int]) -> dict[str, int]:
    """Only the counters of the table (a driver's others are dropped)."""
    return {k: v for k, v in values.items() if lookup(source, k) is not None}


def deltas(before: Reading, after: Reading) -> list[Moved]:
    """Every counter that changed from `before` to `after`, traffic included, in its unit. A counter
    that went backwards (cleared, or a 32-bit counter that wrapped) tells nothing and is left out."""
    out = []
    for key, now in after.items():
        then = before.get(key)
        if then is None:
            continue
        source, place = key
        for name, value in now.items():
            c = lookup(source, name)
            if c is None or name not in then or value <= then[name]:
                continue
            out.append(Moved(source, place, name, (value - then[name]) * c.scale, c.kind))
    return out


def absolute(reading: Reading) -> list[Moved]:
    """A reading's non-zero counters as if they had moved from zero (since the counters were
    last cleared): what doctor reports about a host it looks at once."""
    return deltas({k: {n: 0 for n in v} for k, v in reading.items()}, reading)


RETRANS_NOISE = 0.001  # TCP retransmissions below this share of the segments sent are not trouble


def trouble(moved: list[Moved]) -> list[Moved]:
    """The trouble counters among `moved`. TCP's retransmissions only where they exceed what the
    stack itself shows was not loss, plus 0.1% of the segments sent: a late ACK (a loaded host, a
    stall of a few ms) makes TCP retransmit on a link that lost nothing, as a tail loss probe or,
    after a stall past the RTO, a whole window the receiver then reports as duplicates (D-SACK).
    The larger of the two is taken, not their sum: a needless probe is D-SACKed as well."""
    tcp = {m.name: m.delta for m in moved if m.source == TCP}
    needless = max(tcp.get("TCPLossProbes", 0), tcp.get("TCPDSACKRecvSegs", 0))
    floor = needless + RETRANS_NOISE * tcp.get("OutSegs", 0)
    return [m for m in moved if m.kind in TROUBLE and not (m.source == TCP and m.name == "RetransSegs"
                                                             and m.delta <= floor)]
