"""The rtnetlink reader on this machine's loopback against what `ip` and `tc` print, and a real
link flap counted (the recorded ports are read in tests/unit/test_counters.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.skipif(not __import__("shutil").which("ip"), reason="iproute2 (ip) is not installed")
def test_rtnetlink_reads_what_ip_and_tc_print():
    from commbench.net.rtnetlink import Rtnl

    rtnl = Rtnl()
    try:
        index = socket.if_nametoindex("lo")
        before = rtnl.link_stats(index)
        shown = json.loads(subprocess.run(["ip", "-s", "-j", "link", "show", "dev", "lo"], capture_output=True,
                                          text=True, check=True).stdout)[0]["stats64"]
        after = rtnl.link_stats(index)
        assert before["rx_packets"] <= shown["rx"]["packets"] <= after["rx_packets"]
        assert before["tx_bytes"] <= shown["tx"]["bytes"] <= after["tx_bytes"]
        assert set(rtnl.root_qdisc_stats(index)) >= {"drops", "overlimits", "requeues"}
        with pytest.raises(OSError):
            rtnl.link_stats(2**31 - 7)  # no such interface: the kernel's ENODEV
    finally:
        rtnl.close()


@pytest.mark.skipif(not __import__("shutil").which("ip") or __import__("os").geteuid() != 0,
                    reason="needs root and iproute2 (ip) to make a veth pair in a network namespace")
def test_rtnetlink_counts_a_real_flap():
    """A veth pair in a namespace of its own, one end taken down and up: both ends count one more
    carrier loss over rtnetlink, as /sys/class/net/IF/carrier_down_count does."""
    import os

    ns = f"cbflap{os.getpid()}"
    read = ("import json, socket; from commbench.net.rtnetlink import Rtnl; r = Rtnl(); "
            "print(json.dumps({n: r.link_stats(socket.if_nametoindex(n)).get('carrier_down_count') "
            "for n in ('fa', 'fb')}))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def counts() -> dict:
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", read], capture_output=True, text=True,
                             env=env, timeout=60, check=True).stdout
        return json.loads(out)

    def ip(*args: str) -> None:
        subprocess.run(["ip", "-n", ns, *args], check=True, timeout=30)

    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        ip("link", "add", "fa", "type", "veth", "peer", "name", "fb")
        ip("link", "set", "fa", "up")
        ip("link", "set", "fb", "up")
        before = counts()
        ip("link", "set", "fb", "down")
        ip("link", "set", "fb", "up")
        after = counts()
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=30)
    assert all(isinstance(v, int) for v in before.values()), before
    assert {n: after[n] - before[n] for n in after} == {"fa": 1, "fb": 1}
