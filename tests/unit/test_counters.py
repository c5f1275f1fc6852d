"""The counter table, the snapshot readers and doctor's counter checks, on recorded real ports
(tests/data/counters/README.md names every source) and on this machine's loopback."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from commbench.core import wire
from commbench.harness.wireprobe import WireProbe, entry
from commbench.net import counters as ct
from commbench.net import doctorwire, wiresource

DATA = Path(__file__).parent.parent / "data" / "counters"


@pytest.fixture
def doctor(cli):
    """`commbench doctor ARGS` in this process (tests/conftest.py's `cli`)."""
    return lambda *args: cli("doctor", *args)


def test_every_counter_has_a_kind_unit_and_meaning():
    assert len({(c.source, c.name) for c in ct.COUNTERS}) == len(ct.COUNTERS)
    for c in ct.COUNTERS:
        assert c.kind in ct.TROUBLE + (ct.TRAFFIC, ct.QUEUE, ct.PROBE), c
        assert c.unit in ("bytes", "packets", "events", "ticks", "us"), c
        assert c.meaning and c.scale >= 1
        if c.kind == ct.TRAFFIC and c.source in (ct.NETDEV, ct.IB, ct.TCP):
            assert c.direction in ("out", "in"), c
    # the IB data counters count 4-byte words, in sysfs and in perfquery (current and older names)
    for name in ("port_xmit_data", "port_rcv_data"):
        assert ct.lookup(ct.IB, name).scale == 4
    xmit = ct.lookup(ct.IB, "port_xmit_data")
    assert ct.lookup(ct.PERFQUERY, "PortXmitData") is ct.lookup(ct.PERFQUERY, "XmtData") is xmit
    assert ct.lookup(ct.PERFQUERY, "SymbolErrors").name == "symbol_error"
    assert ct.lookup(ct.ETHTOOL, "rx_prio3_pause").kind == ct.PAUSE
    assert ct.lookup(ct.ETHTOOL, "rx_xdp_drop") is None  # not guessed at
    assert ct.lookup(ct.QDISC, "overlimits").kind == ct.QUEUE  # shaping is not trouble


@pytest.mark.parametrize("folder", sorted(p.name for p in DATA.iterdir() if p.is_dir()))
def test_every_recorded_counter_is_read_with_its_unit(folder):
    root = DATA / folder
    reading = wiresource.recorded_reading(root)
    files = [f for f in root.glob("class/infiniband/*/ports/*/*counters/*")]
    assert files
    for f in files:
        source = ct.IB if f.parent.name == "counters" else ct.IB_HW
        c = ct.lookup(source, f.name)
        place = f"{f.parents[3].name}/{f.parents[1].name}"
        if c is None:
            assert f.name not in reading.get((source, place), {})
            continue
        raw = int(f.read_text())
        assert reading[(source, place)][f.name] == raw
        moved = {m.name: m for m in ct.absolute({(source, place): {f.name: raw}})}
        if raw:
            assert moved[f.name].delta == raw * c.scale and moved[f.name].kind == c.kind


def test_perfquery_outputs_map_to_the_sysfs_counters():
    old = wiresource.recorded_reading(DATA / "ib_symbol_errors")[(ct.PERFQUERY, "mlx4_0/1")]
    assert old["SymbolErrors"] == 7836 and old["RcvErrors"] == 24058 and "PortSelect" not in old
    sysfs = wiresource.recorded_reading(DATA / "ib_symbol_errors")[(ct.IB, "mlx4_0/1")]
    assert sysfs["symbol_error"] == old["SymbolErrors"]
    new = wiresource.parse_perfquery((DATA / "ib_clean" / "commands" / "perfquery_mlx5_0_1.txt").read_text())
    assert new["PortXmitData"] == 9049592493976 and new["PortXmitWait"] == 0
    moved = {m.name: m.delta for m in ct.absolute({(ct.PERFQUERY, "mlx5_0/1"): ct.kept(ct.PERFQUERY, new)})}
    assert moved["PortXmitData"] == 4 * 9049592493976  # bytes


def test_ethtool_pause_and_discards():
    values = wiresource.parse_ethtool((DATA / "roce_cnp" / "commands" / "ethtool_-S_eth1.txt").read_text())
    kept = ct.kept(ct.ETHTOOL, values)
    assert kept["tx_pause_ctrl_phy"] == 5745055 and kept["rx_discards_phy"] == 58591428329
    trouble = {m.name: m.kind for m in ct.trouble(ct.absolute({(ct.ETHTOOL, "eth1"): kept}))}
    assert trouble["tx_pause_ctrl_phy"] == ct.PAUSE and trouble["rx_out_of_buffer"] == ct.DROP
    assert "rx_pause_ctrl_phy" not in trouble  # published as 0


def test_snmp_retransmissions():
    text = ("Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab "
            "InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
            "Tcp: 1 200 120000 -1 120 30 2 5 4 81234 79876 17 0 12 0\n")
    assert ct.kept(ct.TCP, wiresource.parse_snmp(text)) == {"OutSegs": 79876, "RetransSegs": 17, "InErrs": 0,
                                                             "InCsumErrors": 0}
    netstat = "TcpExt: SyncookiesSent TCPLossProbes TCPLossProbeRecovery\nTcpExt: 0 9 2\n"
    assert wiresource.tcp_mib(text, netstat) == {"OutSegs": 79876, "RetransSegs": 17, "InErrs": 0,
                                                 "InCsumErrors": 0, "TCPLossProbes": 9}
    assert wiresource.parse_snmp("Ip: 1 2\n") == {}


def test_deltas_skip_counters_that_went_backwards():
    before = {(ct.NETDEV, "eth0"): {"tx_bytes": 100, "rx_crc_errors": 7}, (ct.IB, "mlx5_0/1"): {"port_xmit_data": 10}}
    after = {(ct.NETDEV, "eth0"): {"tx_bytes": 50, "rx_crc_errors": 9}, (ct.IB, "mlx5_0/1"): {"port_xmit_data": 35}}
    moved = {(m.where, m.name): m.delta for m in ct.deltas(before, after)}
    assert moved == {("eth0", "rx_crc_errors"): 2, ("mlx5_0/1", "port_xmit_data"): 100}


def test_host_entry_and_row_columns():
    moved = [ct.Moved(ct.NETDEV, "eth0", "tx_bytes", 1046, ct.TRAFFIC),
             ct.Moved(ct.NETDEV, "eth0", "rx_bytes", 900, ct.TRAFFIC),
             ct.Moved(ct.IB, "mlx5_0/1", "port_xmit_data", 4000, ct.TRAFFIC),
             ct.Moved(ct.QDISC, "eth0", "drops", 3, ct.DROP), ct.Moved(ct.QDISC, "eth0", "overlimits", 50, ct.QUEUE)]
    host = entry(moved, ranks=1, cost_s=0.0012)
    assert host["out_bytes"] == 5046 and host["in_bytes"] == 900 and host["cost_ms"] == 1.2
    assert host["trouble"] == [["eth0 qdisc", "drops", 3, "drop"]]
    clean = entry(moved[:2], ranks=1, cost_s=0.001)
    cols = wire.columns({"h1": host, "h2": clean}, bus_bytes=1000)
    assert cols["wire_trouble"] is True and cols["wire_per_payload"] == pytest.approx(5.046)
    assert wire.mark(cols["wire"]) == "  ! wire: h1 eth0 qdisc drops +3"
    assert [t.text() for t in wire.troubles(cols["wire"])] == ["h1 eth0 qdisc drops +3"]
    assert wire.total_lines([cols["wire"], cols["wire"], None], 3) == [
        "commbench: wire: h1 eth0 qdisc drops +6 (drop) during 2 of 3 point(s)"]
    assert wire.columns(None, 10) == {"wire": None, "wire_per_payload": None, "wire_trouble": None}
    two_ranks = wire.columns({"h1": entry(moved[:2], ranks=2, cost_s=0)}, bus_bytes=1000)
    assert two_ranks["wire_per_payload"] is None and json.loads(two_ranks["wire"])["hosts"]["h1"]["ranks"] == 2


def test_live_sampler_counts_loopback_traffic():
    sampler = wiresource.LiveSampler(["lo"], ports=[])
    try:
        before = sampler.read()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(10):
                s.sendto(b"x" * 1000, ("127.0.0.1", 9))  # discard port; loopback only
        moved = {(m.where, m.name): m.delta for m in ct.deltas(before, sampler.read())}
    finally:
        sampler.close()
    assert moved[("lo", "tx_packets")] >= 10 and moved[("lo", "tx_bytes")] >= 10 * 1028


def test_doctor_root_names_symbol_errors_xmit_wait_and_cnps(doctor):
    res = doctor("--root", str(DATA / "ib_symbol_errors"), "--root", str(DATA / "roce_cnp"),
                 "--root", str(DATA / "ib_symbol_xmitwait"))
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout
    assert ("PROBLEM [counters] ib_symbol_errors mlx4_0/1: error counters since they were last cleared: "
            "port_rcv_errors (PortRcvErrors) 24,058, symbol_error (SymbolErrorCounter) 7,836") in out
    assert "note [counters] ib_symbol_xmitwait mlx5_0/1: congestion counters since they were last cleared: " \
           "port_xmit_wait (PortXmitWait) 12,097,916" in out
    assert "symbol_error (SymbolErrorCounter) 3\n" in out
    assert ("note [counters] vm00 mlx5_0/1: congestion counters since they were last cleared: np_cnp_sent 184, "
            "np_ecn_marked_roce_packets 184, rp_cnp_handled 184") in out
    assert "vm00 eth1 ethtool: pause counters" in out and "tx_pause_ctrl_phy 5,745,055" in out
    # sysfs and perfquery hold the same PMA counters: the port is reported once
    assert out.count("symbol_error (SymbolErrorCounter) 7,836") == 1


def test_doctor_root_clean_port_and_saturated_counters(doctor):
    clean = doctor("--root", str(DATA / "ib_clean"))
    assert clean.returncode == 0 and "[counters]" not in clean.stdout, clean.stdout
    full = doctor("--root", str(DATA / "ib_saturated_cx7"), "--json")
    assert full.returncode == 1
    found = [f for f in json.loads(full.stdout)["findings"] if f["check"] == "counters"]
    assert any(": link counters since they were last cleared: link_downed (LinkDownedCounter) 255 (saturated"
               in f["message"] and f["severity"] == "problem" for f in found)


def test_doctor_watch_rejects_bad_input(doctor):
    res = doctor("--watch", "0")
    assert res.returncode == 2 and "--watch" in res.stderr and "Traceback" not in res.stderr
    res = doctor("--watch", "1", "--root", str(DATA / "ib_clean"))
    assert res.returncode == 2 and "--root" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_doctorwire_json_round_trip():
    reading = wiresource.recorded_reading(DATA / "roce_cnp")
    assert doctorwire.from_json(doctorwire.to_json(reading)) == {k: v for k, v in reading.items() if v}


def _host(netdev_out: int, rdma_out: int) -> dict:
    moved = [ct.Moved(ct.NETDEV, "eth0", "tx_bytes", netdev_out, ct.TRAFFIC),
             ct.Moved(ct.IB, "mlx5_0/1", "port_xmit_data", rdma_out, ct.TRAFFIC)]
    return entry([m for m in moved if m.delta], ranks=1, cost_s=0)


def test_nccl_transport_against_the_bytes():
    sockets = wire.columns({"gpu1": _host(900 << 20, 0), "gpu2": _host(1 << 10, 800 << 20)}, 1 << 30)["wire"]
    lines = wire.transport_lines("NET/IB", [sockets])
    assert len(lines) == 1 and lines[0].startswith("commbench: wire: NCCL reported NET/IB, but gpu1 sent 943,718,400 B "
                                                   "over its interfaces and 0 B over its RDMA ports")
    assert wire.transport_lines("NET/Socket", [sockets]) == [
        "commbench: wire: NCCL reported NET/Socket, but gpu2 sent 838,860,800 B over its RDMA ports and 1,024 B over "
        "its interfaces: another program used the RDMA ports meanwhile, or the debug file is not this run's"]
    assert wire.transport_lines(None, [sockets]) == [] and wire.transport_lines("NET/IB", [None]) == []
    small = wire.columns({"gpu1": _host(1000, 0)}, 1000)["wire"]  # bootstrap traffic only
    assert wire.transport_lines("NET/IB", [small]) == []


def test_doctor_page_lists_every_counter_of_the_table():
    page = (Path(__file__).parent.parent.parent / "docs" / "DOCTOR.md").read_text()
    # a pattern's | is escaped inside a Markdown table
    missing = [c.name for c in ct.COUNTERS if "`" + c.name.replace("|", "\\|") + "`" not in page]
    assert missing == [], "docs/DOCTOR.md, Counters, lacks these counters of net/counters.py"


def test_causes_are_named_before_their_symptoms():
    host = entry([ct.Moved(ct.TCP, "tcp", "RetransSegs", 9000, ct.RETRANSMIT),
                  ct.Moved(ct.QDISC, "eth0", "drops", 12, ct.DROP),
                  ct.Moved(ct.IB_HW, "mlx5_0/1", "np_cnp_sent", 40, ct.CONGESTION)], ranks=1, cost_s=0)
    value = wire.columns({"h": host}, None)["wire"]
    assert [t.counter for t in wire.troubles(value)] == ["drops", "np_cnp_sent", "RetransSegs"]
    assert wire.mark(value) == "  ! wire: h eth0 qdisc drops +12, h mlx5_0/1 np_cnp_sent +40, +1 more"


def test_tcp_retransmissions_are_trouble_only_beyond_probes_and_noise():
    def moved(out_segs, retrans, probes, dsacked=0):
        return [ct.Moved(ct.TCP, "tcp", "OutSegs", out_segs, ct.TRAFFIC),
                ct.Moved(ct.TCP, "tcp", "RetransSegs", retrans, ct.RETRANSMIT),
                ct.Moved(ct.TCP, "tcp", "TCPLossProbes", probes, ct.PROBE),
                ct.Moved(ct.TCP, "tcp", "TCPDSACKRecvSegs", dsacked, ct.PROBE)]

    # measured on a clean lab under CI load: 5 retransmissions among ~12,000 segments of one point
    assert ct.trouble(moved(12000, 5, 0)) == []
    assert ct.trouble(moved(1000, 40, 40)) == []  # every retransmission a loss probe
    assert ct.trouble(moved(1000, 40, 30)) != []  # ten beyond the probes: above 0.1% of 1000
    # a clean lab on a loaded host (CI, stop 29): a window of 45 sent again after a stall, every one
    # of them reported back by the receiver as a duplicate; the same 45 without D-SACKs is loss
    assert ct.trouble(moved(2251, 45, 0, dsacked=45)) == []
    assert [m.name for m in ct.trouble(moved(2251, 45, 0))] == ["RetransSegs"]
    assert ct.trouble(moved(1000, 40, 30, dsacked=30)) != []  # a needless probe is D-SACKed too: not counted twice
    lossy = ct.trouble(moved(36000, 2736, 120))  # a 40 kB tbf queue on the lab
    assert [(m.name, m.delta) for m in lossy] == [("RetransSegs", 2736)]
    # other sources are not thinned
    drops = [ct.Moved(ct.QDISC, "eth0", "drops", 1, ct.DROP)]
    assert ct.trouble(drops + moved(12000, 5, 0)) == drops


def test_a_link_that_went_down_is_named_first():
    """A flap is the cause of what follows it: the drops while it was down, TCP's retransmissions."""
    host = entry([ct.Moved(ct.TCP, "tcp", "RetransSegs", 900, ct.RETRANSMIT),
                  ct.Moved(ct.QDISC, "eth0", "drops", 12, ct.DROP),
                  ct.Moved(ct.NETDEV, "eth0", "carrier_down_count", 1, ct.LINK)], ranks=1, cost_s=0)
    value = wire.columns({"h": host}, None)["wire"]
    assert [t.counter for t in wire.troubles(value)] == ["carrier_down_count", "drops", "RetransSegs"]
    assert wire.mark(value).startswith("  ! wire: h eth0 carrier_down_count +1, h eth0 qdisc drops +12")


def test_a_flap_is_a_problem_while_watching_but_not_as_it_stands(tmp_path):
    """carrier_down_count since boot is not judged (a link that came up at boot has counted one);
    one that rises while doctor --watch looks is a problem, with the flapping link's hint."""
    tree = tmp_path / "host"
    (tree / "class" / "net" / "eth0" / "statistics").mkdir(parents=True)
    (tree / "class" / "net" / "eth0" / "statistics" / "rx_crc_errors").write_text("0\n")
    (tree / "class" / "net" / "eth0" / "carrier_down_count").write_text("3\n")
    reading = wiresource.recorded_reading(tree)
    assert reading[(ct.NETDEV, "eth0")] == {"rx_crc_errors": 0, "carrier_down_count": 3}
    assert doctorwire.standing(reading) == []
    later = {(ct.NETDEV, "eth0"): {"rx_crc_errors": 0, "carrier_down_count": 4}}
    made = doctorwire.findings("h", ct.trouble(ct.deltas(reading, later)), "rose in 5 s",
                               lambda *a: a)
    assert made == [("counters", "h", "h eth0: link counters rose in 5 s: carrier_down_count 1",
                     doctorwire.HINTS[ct.LINK], "problem")]
    assert "flapping cable" in doctorwire.HINTS[ct.LINK]


def test_a_flap_between_two_points_is_counted_at_the_next_point_and_bytes_keep_their_window():
    """The link counter is counted from the previous point's end: a carrier lost while the check ran
    or the row was written is the next point's (it is the first to cross the link after it); the
    bytes stay the point's own, so that they match the collective's."""
    def snap(down: int, sent: int) -> ct.Reading:
        return {(ct.NETDEV, "eth0"): {"carrier_down_count": down, "tx_bytes": sent}}

    readings = iter([snap(1, 0), snap(1, 100),      # point 1: nothing happens
                     snap(2, 150), snap(2, 250),    # the link went down and up before point 2 began
                     snap(2, 300), snap(3, 400)])   # point 3: it went down during the point

    class Sampler:
        def read(self):
            return next(readings)

    probe = WireProbe("h", 1, Sampler())
    entries = []
    for _ in range(3):
        probe.begin()
        entries.append(json.loads(probe.end()))
    assert [e["trouble"] for e in entries] == [[], [["eth0", "carrier_down_count", 1, "link"]],
                                               [["eth0", "carrier_down_count", 1, "link"]]]
    assert [e["counters"]["eth0"]["tx_bytes"] for e in entries] == [100, 100, 100]
