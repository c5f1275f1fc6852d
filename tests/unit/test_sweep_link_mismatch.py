"""sweep's warning when the hosts' traffic links differ in MTU or rate (issue #40): one line, naming
each host's value and `commbench pairs`; nothing for one host or equal links."""

from __future__ import annotations

from commbench.workloads.sweep import link_mismatch


def host(mtu=1500, speed=10000, shaper_bps=None, iface="eth0") -> dict:
    nic = {"name": iface, "mtu": mtu, "speed_mbps": speed}
    if shaper_bps:
        nic["shaper"] = {"kind": "tbf", "rate_bits": shaper_bps}
    return {"iface": iface, "mtu": mtu, "speed_mbps": speed, "host_net": {"interfaces": [nic]}}


def test_equal_links_and_one_host_say_nothing():
    assert link_mismatch({"a": host(), "b": host()}) is None
    assert link_mismatch({"a": host(mtu=9000)}) is None
    assert link_mismatch({}) is None


def test_an_mtu_that_differs_is_named_per_host_with_pairs():
    line = link_mismatch({"a": host(), "b": host(mtu=9000)})
    assert line == ("the hosts' links differ (MTU 1500 on a, 9000 on b): the slowest sets every collective's pace; "
                    "`commbench pairs` measures each pair of hosts and names the slow one (docs/PAIRS.md)")


def test_a_link_speed_that_differs_is_named():
    line = link_mismatch({"a": host(speed=100000), "b": host(speed=25000)})
    assert line is not None and "link rate 100 Gbit/s on a, 25 Gbit/s on b" in line and "MTU" not in line
    assert link_mismatch({"a": host(speed=100000), "b": host(speed=100000 - 1000)}) is None  # within 5%


def test_a_shaper_that_caps_one_host_is_its_rate():
    line = link_mismatch({"a": host(shaper_bps=1e9), "b": host(shaper_bps=5e8)})  # lab veths: 10 Gbit/s shaped
    assert line is not None and "link rate 1 Gbit/s on a, 500 Mbit/s on b" in line
