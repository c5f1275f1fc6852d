"""Where a setup difference holds (issue #40, part 5): compare's "what differs", the report's
comparison and the overlay plot's subtitle name the host (and rail) whose link rate, MTU or
interface changed, from the hosts' `net` cells (analysis/points/hostfacts.py)."""

from __future__ import annotations

import json

import pytest

from commbench.analysis.compare.compare import compare_frames
from commbench.analysis.points import hostfacts
from commbench.analysis.curves import curveplot
from commbench.cli.app import main
from commbench.core.results import read_results

from unit.synthetic import make_rows, write

HOSTS = ("cbnode1", "cbnode2", "cbnode3", "cbnode4")
SLOW = "link rate: before 1 Gbit/s on all 4 hosts; after cbnode3 300 Mbit/s, the others 1 Gbit/s"


def rows(run_id: str, label: str, mbps: dict[str, int] | None = None, mtu: dict[str, int] | None = None,
         rails: bool = False, seed: int = 1) -> list[dict]:
    """One run on HOSTS at 1 Gbit/s; `mbps`/`mtu`: a host's own link speed or MTU; `rails`: each host has
    eth1 beside eth0 (its speed from `mbps`, eth0 stays 1 Gbit/s)."""
    out = make_rows(collectives=("all_reduce",), sizes=(1 << 20, 1 << 22), placements=(True,), repetitions=5,
                    label=label, run_id=run_id, hosts=HOSTS, backend="gloo", device_name="cpu", mtu=1500,
                    speed_gbps=1.0, seed=seed)
    net = json.loads(out[0]["net"])
    for host, facts in net.items():
        speed = (mbps or {}).get(host, 1000)
        facts["mtu"] = (mtu or {}).get(host, 1500)
        if rails:
            eth0 = {"name": "eth0", "speed_mbps": 1000, "mtu": 1500, "link_layer": "ethernet"}
            facts["host_net"] = {"interfaces": [eth0, dict(eth0, name="eth1", speed_mbps=speed)]}
        else:
            facts["speed_mbps"] = speed
    for r in out:
        r["net"] = json.dumps(net)
    return out


@pytest.fixture
def slowed(tmp_path):
    before = write(tmp_path / "before.parquet", rows("20261201-000000-aaaaaa", "before"))
    after = write(tmp_path / "after.parquet", rows("20261201-000000-bbbbbb", "after", {"cbnode3": 300}, seed=2))
    return before, after


def test_compare_names_the_slowed_host(slowed, capsys):
    before, after = slowed
    with pytest.raises(SystemExit):
        main(["compare", str(before), str(after)])
    assert f"differs: {SLOW}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["compare", str(before), str(after), "--format", "markdown"])
    assert f"- {SLOW}" in capsys.readouterr().out


def test_report_and_plot_subtitle_name_the_slowed_host(slowed, tmp_path):
    before, after = slowed
    page = tmp_path / "report.html"
    main_exit = None
    try:
        main(["report", str(after), "--baseline", str(before), "--out", str(page)])
    except SystemExit as exc:
        main_exit = exc.code
    assert main_exit in (None, 0)
    assert f"<li>{SLOW}</li>" in page.read_text()  # the report's comparison: "Setup differences"
    b, a = read_results([before]), read_results([after])
    title = curveplot.build_comparison_figure(b, a).axes[0].get_title(loc="left")
    assert "before: " in title and "1 Gbit/s link" in title
    assert "after: " in title and "cbnode3 300 Mbit/s, the others 1 Gbit/s" in title


def test_a_rail_of_one_host_is_named_with_its_interface(tmp_path):
    b = read_results([write(tmp_path / "b.parquet", rows("20261201-000000-aaaaaa", "b", rails=True))])
    a = read_results([write(tmp_path / "a.parquet", rows("20261201-000000-bbbbbb", "a", {"cbnode2": 100},
                                                          rails=True, seed=2))])
    assert ("link rate: before 1 Gbit/s on eth1 of all 4 hosts; after cbnode2 eth1 100 Mbit/s, the others 1 Gbit/s"
            in compare_frames(b, a).differences)


def test_an_mtu_changed_on_one_host_is_named_though_rank_0s_column_is_the_same(tmp_path):
    b = read_results([write(tmp_path / "b.parquet", rows("20261201-000000-aaaaaa", "b"))])
    a = read_results([write(tmp_path / "a.parquet", rows("20261201-000000-bbbbbb", "a", mtu={"cbnode4": 9000},
                                                          seed=2))])
    assert "mtu: before 1500 on all 4 hosts; after cbnode4 9000, the others 1500" in compare_frames(b, a).differences


def test_a_change_on_every_host_says_so_and_no_change_says_nothing(tmp_path):
    b = read_results([write(tmp_path / "b.parquet", rows("20261201-000000-aaaaaa", "b"))])
    fast = {h: 10000 for h in HOSTS}
    a = read_results([write(tmp_path / "a.parquet", rows("20261201-000000-bbbbbb", "a", fast, seed=2))])
    assert "link rate: before 1 Gbit/s, after 10 Gbit/s, on all 4 hosts" in compare_frames(b, a).differences
    same = read_results([write(tmp_path / "s.parquet", rows("20261201-000000-cccccc", "b", seed=3))])
    assert not [d for d in compare_frames(b, same).differences if d.startswith(("link rate", "mtu"))]


@pytest.mark.parametrize("values, want", [
    ({"n1": "1 Gbit/s", "n2": "1 Gbit/s"}, "1 Gbit/s on all 2 hosts"),
    ({"n1": "1 Gbit/s"}, "n1 1 Gbit/s"),
    ({"n1": "1 Gbit/s", "n2": "1 Gbit/s", "n3": "2 Gbit/s", "n4": "2 Gbit/s", "n5": "1 Gbit/s"},
     "n[3-4] 2 Gbit/s, the others 1 Gbit/s"),
    ({"n1": "a", "n2": "b"}, "n1 a, n2 b"),
    ({}, ""),
])
def test_where_text(values, want):
    assert hostfacts.where_text(values) == want
