"""A headers-only packet capture in a few numbers (`pairs --capture`): its packets, TCP
retransmissions, duplicate ACKs, zero windows, resets and RoCE v2 packets (UDP 4791), read from the
.pcap with dpkt. Pure functions over the packets; the file is read once, in order.

Why dpkt and not tshark: tshark counts these natively (tcp.analysis.*) but pulls in Wireshark
(~80 MB of packages) on every host of a cluster; tcpdump writes the capture (net/linkcapture.py) and
dpkt (pure Python, no dependency) reads it, and the .pcap is kept for Wireshark on a workstation.

The rules follow Wireshark's tcp.analysis flags, per direction of each TCP connection:
- retransmission: a segment carrying data that starts below the highest sequence number already
  seen in that direction. Not only "the same bytes seen twice": the capture point (tcpdump on the
  interface) sees a host's packets after its own queue, so a segment its qdisc dropped is never
  seen the first time and its retransmission only fills a gap. A reordered segment counts too
  (Wireshark tells it apart by timing; on one link reordering is rare). A keep-alive (one byte, or
  none, just below the highest sequence) does not count;
- duplicate ACK: a segment without data, SYN, FIN or RST whose acknowledgement number and window
  are those of the previous segment in that direction (a window of 0 is a zero window instead);
- zero window: the receive window advertised as 0 (not on a RST);
- reset: the RST flag;
- RoCE v2: UDP to or from port 4791 (RDMA traffic passes the kernel by; a netdev capture shows it
  only where the NIC mirrors it to the capture).

Payload lengths come from the IP headers (total length), not from the captured bytes: a capture
of 128 bytes a packet keeps the headers and cuts the payload.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

ROCE_PORT = 4791
# link types tcpdump writes for the interfaces commbench captures on (pcap-linktype(7))
DLT_EN10MB, DLT_RAW, DLT_LINUX_SLL, DLT_LINUX_SLL2 = 1, 101, 113, 276
_RAW_ALIASES = {12, 14}  # DLT_RAW as some systems number it
_SEQ = 1 << 32
_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10


@dataclass
class Summary:
    """What a capture holds (see the module docstring for each count)."""

    packets: int = 0
    seconds: float = 0.0  # from its first packet to its last
    tcp_segments: int = 0
    retransmissions: int = 0
    dup_acks: int = 0
    zero_windows: int = 0
    resets: int = 0
    roce: int = 0  # UDP 4791
    connections: int = 0  # TCP connections (one per direction pair)
    unread: int = 0  # packets that were not IPv4/IPv6 or could not be parsed
    note: str | None = None  # why the file could not be read (then the counts are what was read before)

    def text(self) -> str:
        """One line: `812 packets in 1.2 s (3 TCP connections): 37 retransmissions, ...`."""
        head = f"{self.packets:,} packets in {self.seconds:.1f} s ({self.connections} TCP connection" \
               f"{'' if self.connections == 1 else 's'})"
        counts = [f"{self.retransmissions:,} retransmission{'' if self.retransmissions == 1 else 's'}",
                  f"{self.dup_acks:,} duplicate ACK{'' if self.dup_acks == 1 else 's'}",
                  f"{self.zero_windows:,} zero window{'' if self.zero_windows == 1 else 's'}",
                  f"{self.resets:,} reset{'' if self.resets == 1 else 's'}"]
        if self.roce:
            counts.append(f"{self.roce:,} RoCE v2 (UDP {ROCE_PORT})")
        return f"{head}: {', '.join(counts)}" + (f" ({self.note})" if self.note else "")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Summary:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass
class _Way:
    """One direction of a TCP connection: the highest sequence end seen, the last ACK and window."""

    top: int | None = None
    ack: int | None = None
    window: int | None = None


@dataclass
class _Counter:
    summary: Summary = field(default_factory=Summary)
    ways: dict[tuple, _Way] = field(default_factory=dict)
    first: float | None = None
    last: float = 0.0


def summarise(path: str) -> Summary:
    """The summary of a pcap (or pcapng) file; a file that stops short keeps what was read, with a note."""
    import dpkt

    counter = _Counter()
    with open(path, "rb") as f:
        magic = f.read(4)
        f.seek(0)
        try:
            reader = dpkt.pcapng.Reader(f) if magic == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(f)
        except (ValueError, dpkt.dpkt.UnpackError) as exc:
            return Summary(note=f"not a capture file: {exc}")
        try:
            for ts, buf in reader:
                _count(counter, reader.datalink(), float(ts), buf)
        except (ValueError, struct.error, dpkt.dpkt.NeedData, dpkt.dpkt.UnpackError) as exc:
            counter.summary.note = f"the file stops short after {counter.summary.packets} packets: {exc}"
    return _done(counter)


def summarise_packets(linktype: int, packets: Iterable[tuple[float, bytes]]) -> Summary:
    """The summary of (timestamp, captured bytes) packets of one link type, in capture order."""
    counter = _Counter()
    for ts, buf in packets:
        _count(counter, linktype, ts, buf)
    return _done(counter)


def _done(counter: _Counter) -> Summary:
    s = counter.summary
    s.seconds = round(counter.last - counter.first, 6) if counter.first is not None else 0.0
    s.connections = len({tuple(sorted((k[:2], k[2:]))) for k in counter.ways})
    return s


def _count(counter: _Counter, linktype: int, ts: float, buf: bytes) -> None:
    s = counter.summary
    s.packets += 1
    counter.first = ts if counter.first is None else counter.first
    counter.last = ts
    found = _transport(linktype, buf)
    if found is None:
        s.unread += 1
        return
    kind, key, seg, payload = found
    if kind == "udp":
        s.roce += ROCE_PORT in (seg.sport, seg.dport)
        return
    s.tcp_segments += 1
    _tcp(s, counter.ways.setdefault(key, _Way()), seg, payload)


def _tcp(s: Summary, way: _Way, seg, payload: int) -> None:
    flags, seq, window = seg.flags, seg.seq, seg.win
    if flags & _RST:
        s.resets += 1
        return
    if window == 0:
        s.zero_windows += 1
    length = payload + bool(flags & _SYN) + bool(flags & _FIN)  # SYN and FIN take a sequence number each
    if length and way.top is not None and _before(seq, way.top) and not _keepalive(seq, payload, way.top):
        s.retransmissions += 1
    elif (not length and flags & _ACK and way.ack == seg.ack and way.window == window and window != 0
          and way.top is not None):
        s.dup_acks += 1
    end = (seq + length) % _SEQ
    if way.top is None or _before(way.top, end):
        way.top = end
    if flags & _ACK:
        way.ack, way.window = seg.ack, window


def _before(a: int, b: int) -> bool:
    """a comes before b in sequence space (RFC 1982 serial arithmetic on 32 bits)."""
    return 0 < (b - a) % _SEQ < _SEQ // 2


def _keepalive(seq: int, payload: int, top: int) -> bool:
    return payload <= 1 and (seq + 1) % _SEQ == top


def _transport(linktype: int, buf: bytes):
    """("tcp" | "udp", direction key, segment, payload bytes) of a captured packet, or None."""
    import dpkt

    try:
        net = _network(linktype, buf)
    except (dpkt.dpkt.NeedData, dpkt.dpkt.UnpackError, struct.error, ValueError, IndexError):
        return None
    if net is None:
        return None
    seg = net.data  # dpkt parsed the transport header from the captured bytes
    if isinstance(net, dpkt.ip.IP):
        # total length 0: a segmentation-offload super-packet (BIG TCP): its captured bytes are all there is
        carried = net.len - net.hl * 4 if net.len else None
    else:  # IPv6: the transport right after the fixed header (extension headers are not followed)
        carried = net.plen if net.nxt in (dpkt.ip.IP_PROTO_TCP, dpkt.ip.IP_PROTO_UDP) else None
        if carried is None:
            return None
    key_ends = (net.src, net.dst)
    if isinstance(seg, dpkt.tcp.TCP):
        payload = len(seg.data) if carried is None else carried - seg.off * 4
        return "tcp", (key_ends[0], seg.sport, key_ends[1], seg.dport), seg, max(0, payload)
    if isinstance(seg, dpkt.udp.UDP):
        return "udp", (key_ends[0], seg.sport, key_ends[1], seg.dport), seg, max(0, (carried or 8) - 8)
    return None


def _network(linktype: int, buf: bytes):
    """The IPv4 or IPv6 header object of a frame, or None for anything else."""
    import dpkt

    if linktype == DLT_EN10MB:
        frame = dpkt.ethernet.Ethernet(buf)
        net = frame.data
    elif linktype == DLT_LINUX_SLL:
        net = dpkt.sll.SLL(buf).data
    elif linktype == DLT_LINUX_SLL2:
        net = _ip_of(buf[20:])
    elif linktype == DLT_RAW or linktype in _RAW_ALIASES:
        net = _ip_of(buf)
    else:
        return None
    if isinstance(net, bytes):
        net = _ip_of(net)
    return net if isinstance(net, dpkt.ip.IP | dpkt.ip6.IP6) else None


def _ip_of(buf: bytes):
    import dpkt

    if not buf:
        return None
    version = buf[0] >> 4
    return dpkt.ip.IP(buf) if version == 4 else dpkt.ip6.IP6(buf) if version == 6 else None
