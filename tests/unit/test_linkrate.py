"""The effective link rate (core/linkrate.py): a root shaper's rate where it caps the link, as the
plot subtitle, the report's network table and compare's "what differs" show it.

The `net` cells below are the ones a real lab run recorded (2 hosts, `commbench lab up --rate 1gbit`,
then `commbench lab set --rate 800mbit`, `commbench lab run -- commbench sweep`): a 10 Gbit/s veth
whose eth0 carries a root tbf, written by net/netinfo.py's host_summary."""

from __future__ import annotations

import json

import pytest

from commbench.analysis.compare.compare import compare_frames
from commbench.analysis.points.runs import describe_run
from commbench.analysis.report import markdown, report
from commbench.analysis.curves import curveplot
from commbench.analysis.report.summary import net_rows
from commbench.cli.app import main
from commbench.core.linkrate import LinkRate, effective_rate, host_rate, net_rates, rate_text
from commbench.net import netinfo

from unit.synthetic import frame, make_rows, write


def recorded_net(rate_bits: int) -> str:
    hosts = {}
    for i, host in enumerate(("cscnode1", "cscnode2"), start=1):
        eth0 = {"addresses": [f"10.246.0.{i}", "fe80::ecf1:43ff:fe47:968e"], "driver": "veth",
                "link_layer": "ethernet", "mtu": 1500, "name": "eth0",
                "shaper": {"kind": "tbf", "rate_bits": rate_bits}, "speed_mbps": 10000, "state": "up"}
        hosts[host] = {"host_net": {"env": {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"},
                                    "ibv_devinfo": "not installed", "interfaces": [eth0], "rdma": []},
                       "iface": "eth0", "link_layer": "ethernet", "mtu": 1500, "operstate": "up",
                       "speed_mbps": 10000}
    return json.dumps(hosts)


SHAPED_1G = "1 Gbit/s (shaped; link 10 Gbit/s)"
SHAPED_800M = "800 Mbit/s (shaped; link 10 Gbit/s)"


def lab_rows(rate_bits: int, label: str, run_id: str, seed: int = 1) -> list[dict]:
    rows = make_rows(collectives=("all_reduce",), sizes=(1 << 20, 1 << 22), placements=(True,), repetitions=5,
                     label=label, run_id=run_id, hosts=("cscnode1", "cscnode2"), backend="gloo",
                     device_name="cpu", mtu=1500, speed_gbps=rate_bits / 1e9, seed=seed)
    for r in rows:
        r["net"] = recorded_net(rate_bits)
    return rows


@pytest.mark.parametrize("iface, want", [
    ({"speed_mbps": 10000, "shaper": {"kind": "tbf", "rate_bits": 1e9}}, (1e9, "tbf shaper")),
    ({"speed_mbps": 10000, "shaper": {"kind": "htb", "rate_bits": 3e8}}, (3e8, "htb shaper")),
    ({"speed_mbps": 1000, "shaper": {"kind": "tbf", "rate_bits": 1e10}}, (1e9, "link speed")),  # above the link
    ({"speed_mbps": 10000}, (1e10, "link speed")),
    ({"speed_mbps": None, "shaper": {"kind": "tbf", "rate_bits": 8e8}}, (8e8, "tbf shaper")),
    ({"speed_mbps": -1, "shaper": {"kind": "tbf", "rate_bits": True}}, (None, "link speed")),  # nonsense
    ({"speed_mbps": "fast", "shaper": "tbf"}, (None, "link speed")),
])
def test_effective_rate_is_the_lower_of_link_speed_and_shaper(iface, want):
    assert effective_rate(iface) == want


def test_rate_reads_with_the_link_speed_when_shaped():
    assert rate_text(8e8) == "800 Mbit/s" and rate_text(4e11) == "400 Gbit/s"
    assert LinkRate(1e9, 1e10, "tbf shaper").text() == SHAPED_1G
    assert LinkRate(1e9, None, "tbf shaper").text() == "1 Gbit/s (shaped)"
    assert LinkRate(1e10, 1e10, "link speed").text() == "10 Gbit/s"
    assert LinkRate(None, None, "link speed").text() == ""


def test_host_rate_finds_the_traffic_interfaces_shaper_in_host_net():
    net = json.loads(recorded_net(800_000_000))
    assert {h: r.text() for h, r in net_rates(net).items()} == {"cscnode1": SHAPED_800M, "cscnode2": SHAPED_800M}
    other = dict(net["cscnode1"], iface="eth1")  # the shaper is eth0's, the traffic went over eth1
    assert host_rate(other).text() == "10 Gbit/s"
    assert net_rates("not a dict") == {} and net_rates({"h": "x"}) == {}


def test_host_summary_records_the_root_shaper(monkeypatch):
    eth0 = {"name": "eth0", "state": "up", "running": True, "mtu": 1500, "speed_mbps": 10000, "driver": "veth",
            "link_layer": "ethernet", "mac": "aa", "addresses": ["10.246.0.1"],
            "shaper": {"kind": "tbf", "rate_bits": 1_000_000_000}}
    eth1 = dict(eth0, name="eth1", addresses=["10.246.1.1"], shaper=None)
    facts = {"interfaces": [eth0, eth1], "rdma": [], "env": {}, "ibv_devinfo": "not installed"}
    monkeypatch.setattr(netinfo, "host_facts", lambda **kw: facts)
    ifaces = {i["name"]: i for i in netinfo.host_summary("eth0", environ={})["interfaces"]}
    assert ifaces["eth0"]["shaper"] == {"kind": "tbf", "rate_bits": 1_000_000_000}
    assert "shaper" not in ifaces["eth1"]  # an unshaped interface keeps the shape it had


def test_plot_subtitle_shows_the_shaped_rate(tmp_path):
    df = frame(lab_rows(1_000_000_000, "before", "20261201-000000-aaaaaa"), tmp_path)
    title = curveplot.build_figure(df).axes[0].get_title(loc="left")
    assert f"ethernet {SHAPED_1G}" in title and "10 Gbit/s link" not in title
    unshaped = frame(make_rows(), tmp_path, "plain.parquet")  # no shaper recorded: the link speed, as before
    assert "400 Gbit/s link" in describe_run(dict(unshaped.iloc[0]))


def test_report_network_table_shows_the_shaped_rate(tmp_path, undrawn):
    df = frame(lab_rows(800_000_000, "after", "20261201-000000-bbbbbb"), tmp_path)
    rows = net_rows(json.loads(df["net"].iloc[0]))
    assert rows == [["cscnode1", "eth0", "1500", "ethernet", SHAPED_800M, "up"],
                    ["cscnode2", "eth0", "1500", "ethernet", SHAPED_800M, "up"]]
    page = report.build_html(df)
    assert f"<td>{SHAPED_800M}</td>" in page and "<td>10 Gbit/s</td>" not in page
    assert f"| {SHAPED_800M} |" in markdown.build_markdown(df, None)


def test_compare_lists_the_rate_change_under_differs(tmp_path, capsys):
    before = write(tmp_path / "before.parquet", lab_rows(1_000_000_000, "before", "20261201-000000-aaaaaa"))
    after = write(tmp_path / "after.parquet", lab_rows(800_000_000, "after", "20261201-000000-bbbbbb", seed=2))
    line = f"link rate: before {SHAPED_1G}, after {SHAPED_800M}, on all 2 hosts"
    from commbench.core.results import read_results

    assert line in compare_frames(read_results([before]), read_results([after])).differences
    with pytest.raises(SystemExit) as exit_:  # the command reads only the columns compare needs: net among them
        main(["compare", str(before), str(after)])
    out = capsys.readouterr().out
    assert exit_.value.code == 1 and f"differs: {line}" in out
    same = compare_frames(read_results([before]), read_results([before]))
    assert not [d for d in same.differences if d.startswith("link rate")]
