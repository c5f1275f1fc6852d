"""net/pcapsummary.py: the counts of a headers-only capture, on pcaps written here with dpkt (issue #37)."""

from __future__ import annotations

import socket

import dpkt
import pytest

from commbench.net import pcapsummary
from commbench.net.pcapsummary import Summary, summarise

A, B = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")
MSS = 1448
SNAP = 128


def segment(src=A, dst=B, sport=40000, dport=50000, seq=1000, ack=0, flags=dpkt.tcp.TH_ACK, win=500,
            payload=0) -> bytes:
    """An Ethernet frame of one TCP segment carrying `payload` bytes (zeros)."""
    tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, win=win, data=b"\0" * payload)
    ip = dpkt.ip.IP(src=src, dst=dst, p=dpkt.ip.IP_PROTO_TCP, data=tcp)
    ip.len = len(bytes(ip))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip))


def udp(dport: int) -> bytes:
    u = dpkt.udp.UDP(sport=12345, dport=dport, data=b"\0" * 100)
    u.ulen = len(bytes(u))
    ip = dpkt.ip.IP(src=A, dst=B, p=dpkt.ip.IP_PROTO_UDP, data=u)
    ip.len = len(bytes(ip))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip))


def write(path, frames: list[bytes], snap: int = SNAP) -> str:
    """A classic pcap as tcpdump -s SNAP writes it: each frame cut to `snap` bytes, its length kept."""
    with open(path, "wb") as f:
        w = dpkt.pcap.Writer(f, snaplen=snap)
        for i, frame in enumerate(frames):
            w.writepkt(frame[:snap], ts=1000.0 + i * 0.001)
    return str(path)


def data(seq: int, **kw) -> bytes:
    return segment(seq=seq, payload=MSS, **kw)


def ack(n: int, win: int = 500) -> bytes:
    return segment(src=B, dst=A, sport=50000, dport=40000, seq=1, ack=n, win=win)


def test_a_clean_stream_has_no_trouble(tmp_path):
    frames = [data(1000 + i * MSS) for i in range(10)] + [ack(1000 + 10 * MSS)]
    s = summarise(write(tmp_path / "clean.pcap", frames))
    assert (s.packets, s.tcp_segments, s.retransmissions, s.dup_acks, s.zero_windows, s.resets) == (11, 11, 0, 0, 0, 0)
    assert s.connections == 1 and s.unread == 0 and s.note is None
    assert s.seconds == pytest.approx(0.010)


def test_a_segment_seen_twice_is_a_retransmission(tmp_path):
    frames = [data(1000), data(1000 + MSS), data(1000)]
    assert summarise(write(tmp_path / "again.pcap", frames)).retransmissions == 1


def test_a_segment_lost_before_the_capture_point_counts_when_its_retransmission_fills_the_gap(tmp_path):
    """The sender's own qdisc dropped 1000+MSS: the capture never saw it; its retransmission comes
    after later segments and is counted, though its bytes were never seen before."""
    frames = [data(1000), data(1000 + 2 * MSS), data(1000 + 3 * MSS), data(1000 + MSS)]
    assert summarise(write(tmp_path / "gap.pcap", frames)).retransmissions == 1


def test_duplicate_acks_zero_windows_and_resets(tmp_path):
    frames = [data(1000), ack(1000 + MSS), ack(1000 + MSS), ack(1000 + MSS), ack(1000 + MSS, win=0),
              segment(flags=dpkt.tcp.TH_RST, seq=1000 + MSS)]
    s = summarise(write(tmp_path / "acks.pcap", frames))
    assert (s.dup_acks, s.zero_windows, s.resets, s.retransmissions) == (2, 1, 1, 0)


def test_an_ack_that_moves_the_window_is_no_duplicate(tmp_path):
    frames = [data(1000), ack(1000 + MSS, win=500), ack(1000 + MSS, win=600)]
    assert summarise(write(tmp_path / "win.pcap", frames)).dup_acks == 0


def test_keepalives_are_not_retransmissions(tmp_path):
    frames = [data(1000), segment(seq=1000 + MSS - 1, payload=1), segment(seq=1000 + MSS - 1, payload=0)]
    assert summarise(write(tmp_path / "keep.pcap", frames)).retransmissions == 0


def test_sequence_numbers_wrap(tmp_path):
    top = (1 << 32) - MSS
    frames = [data(top), data(0), data(MSS), data(0)]
    assert summarise(write(tmp_path / "wrap.pcap", frames)).retransmissions == 1


def test_directions_and_connections_are_kept_apart(tmp_path):
    """The same sequence numbers on another connection (another port) are no retransmission."""
    frames = [data(1000), data(1000, sport=40001), ack(1000 + MSS), ack(1000 + MSS, win=400)]
    s = summarise(write(tmp_path / "two.pcap", frames))
    assert (s.connections, s.retransmissions, s.dup_acks) == (2, 0, 0)


def test_roce_v2_packets_are_counted(tmp_path):
    s = summarise(write(tmp_path / "roce.pcap", [udp(4791), udp(4791), udp(53)]))
    assert (s.roce, s.tcp_segments, s.packets) == (2, 0, 3)
    assert "2 RoCE v2 (UDP 4791)" in s.text()


def test_payload_lengths_come_from_the_ip_header_not_the_captured_bytes(tmp_path):
    """Cut to 128 bytes, a full segment still ends 1448 bytes on: the next one is no retransmission."""
    frames = [data(1000), data(1000 + MSS), data(1000 + MSS)]
    assert summarise(write(tmp_path / "cut.pcap", frames, snap=SNAP)).retransmissions == 1


def test_other_frames_are_counted_as_unread(tmp_path):
    arp = bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\xff" * 6, type=dpkt.ethernet.ETH_TYPE_ARP,
                                       data=b"\0" * 28))
    s = summarise(write(tmp_path / "arp.pcap", [arp, data(1000)]))
    assert (s.packets, s.unread, s.tcp_segments) == (2, 1, 1)


def test_a_file_that_stops_short_keeps_what_was_read(tmp_path):
    path = write(tmp_path / "short.pcap", [data(1000), data(1000 + MSS), data(1000)])
    size = len(open(path, "rb").read())
    with open(path, "r+b") as f:  # a killed tcpdump: the last record's 16-byte header cut after 8 bytes
        f.truncate(size - (16 + SNAP) + 8)
    s = summarise(path)
    assert s.packets == 2 and s.retransmissions == 0
    path = write(tmp_path / "short2.pcap", [data(1000), data(1000 + MSS), data(1000)])
    with open(path, "r+b") as f:  # and inside a record's bytes: its headers are still read
        f.truncate(size - 10)
    s = summarise(path)
    assert s.packets == 3 and s.retransmissions == 1


def test_not_a_capture_says_so(tmp_path):
    path = tmp_path / "x.pcap"
    path.write_bytes(b"hello, this is not a pcap file at all")
    s = summarise(str(path))
    assert s.packets == 0 and s.note and "not a capture file" in s.note


def test_linux_cooked_and_raw_ip_captures(tmp_path):
    tcp = dpkt.tcp.TCP(sport=1, dport=2, seq=5, flags=dpkt.tcp.TH_ACK, data=b"\0" * 10)
    ip = dpkt.ip.IP(src=A, dst=B, p=dpkt.ip.IP_PROTO_TCP, data=tcp)
    ip.len = len(bytes(ip))
    sll = bytes(dpkt.sll.SLL(type=0, hrd=1, hlen=6, hdr=b"\0" * 8, ethtype=dpkt.ethernet.ETH_TYPE_IP, data=ip))
    for linktype, frame in ((pcapsummary.DLT_LINUX_SLL, sll), (pcapsummary.DLT_RAW, bytes(ip))):
        s = pcapsummary.summarise_packets(linktype, [(0.0, frame), (0.5, frame)])
        assert (s.tcp_segments, s.retransmissions, s.unread) == (2, 1, 0), linktype


def test_ipv6_segments(tmp_path):
    tcp = dpkt.tcp.TCP(sport=1, dport=2, seq=5, flags=dpkt.tcp.TH_ACK, data=b"\0" * 10)
    ip6 = dpkt.ip6.IP6(src=b"\0" * 15 + b"\1", dst=b"\0" * 15 + b"\2", nxt=dpkt.ip.IP_PROTO_TCP, hlim=64, data=tcp)
    ip6.plen = len(bytes(tcp))
    frame = bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP6,
                                         data=ip6))
    s = pcapsummary.summarise_packets(pcapsummary.DLT_EN10MB, [(0.0, frame), (0.1, frame)])
    assert (s.tcp_segments, s.retransmissions) == (2, 1)


def test_the_summary_travels_as_a_dict_and_reads_as_one_line():
    s = Summary(packets=812, seconds=1.234, tcp_segments=800, retransmissions=37, dup_acks=12, connections=1)
    back = Summary.from_dict(s.to_dict() | {"unknown_key": 1})
    assert back == s
    assert back.text() == ("812 packets in 1.2 s (1 TCP connection): 37 retransmissions, 12 duplicate ACKs, "
                           "0 zero windows, 0 resets")
