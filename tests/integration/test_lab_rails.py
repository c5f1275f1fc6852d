"""A multi-rail lab (root): `lab up --rails K` gives every host eth0..eth<K-1>, rail R of every host
on bridge R with a subnet of its own; `lab set --rail` shapes one rail; `lab down` leaves nothing.
And doctor, run across the lab, names the one rail of one host that runs slower than the others."""

from __future__ import annotations

import json
import sys
from functools import partial

import pandas as pd
import pytest

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env, leftovers, ns_run, tbf_rates

pytestmark = NEEDS_LAB

PREFIX = "crl"
ENV = lab_env(PREFIX)
SUBNET = "10.242.0.0/24"  # rail 1 on 10.242.1.0/24


cb = partial(helpers.cb, env=ENV, timeout=600)  # python -m commbench in a subprocess (tests/helpers.py)


def lab_up(nodes: int, rails: int) -> None:
    cb("lab", "down")
    res = cb("lab", "up", "--nodes", str(nodes), "--rails", str(rails), "--rate", "1gbit", "--subnet", SUBNET)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.fixture
def two_by_two():
    lab_up(2, 2)
    yield
    cb("lab", "down")


def addrs(netns: str) -> dict[str, list[str]]:
    links = json.loads(ns_run(netns, "ip", "-j", "addr", "show").stdout)
    return {x["ifname"]: [a["local"] for a in x.get("addr_info", []) if a.get("family") == "inet"] for x in links}


def test_two_rails_have_their_own_subnets_shaping_and_leave_nothing(two_by_two):
    node1, node2 = f"{PREFIX}node1", f"{PREFIX}node2"
    assert {k: v for k, v in addrs(node1).items() if k != "lo"} == {"eth0": ["10.242.0.1"], "eth1": ["10.242.1.1"]}
    assert {k: v for k, v in addrs(node2).items() if k != "lo"} == {"eth0": ["10.242.0.2"], "eth1": ["10.242.1.2"]}
    ping = ns_run(node1, "ping", "-c1", "-W2", "10.242.1.2")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    route = ns_run(node1, "ip", "-j", "route", "get", "10.242.1.2")
    assert json.loads(route.stdout)[0]["dev"] == "eth1"  # rail 1 traffic stays on rail 1
    # the hosts file keeps rail 0's addresses
    hosts = (ENV["COMMBENCH_LAB_DIR"] + "/hosts")
    assert open(hosts).read().splitlines()[1:] == [f"10.242.0.1 {node1}", f"10.242.0.2 {node2}"]

    rows = json.loads(cb("lab", "status", "--json").stdout)["hosts"]
    assert [(r["host"], r["iface"], r["addr"], r["state"], r["mtu"], r["rate_bits"]) for r in rows] == [
        (node1, "eth0", "10.242.0.1", "UP", 1500, 1e9), (node1, "eth1", "10.242.1.1", "UP", 1500, 1e9),
        (node2, "eth0", "10.242.0.2", "UP", 1500, 1e9), (node2, "eth1", "10.242.1.2", "UP", 1500, 1e9)]
    table = cb("lab", "status").stdout
    assert table.count(node1) == 2 and table.count(node2) == 2 and "10.242.1.2" in table

    res = cb("lab", "set", "--node", node2, "--rail", "eth1", "--rate", "200mbit")
    assert res.returncode == 0, res.stderr
    assert tbf_rates(node2) == {"eth0": 1_000_000_000, "eth1": 200_000_000}
    assert tbf_rates(node1) == {"eth0": 1_000_000_000, "eth1": 1_000_000_000}
    assert [r["rate_bits"] for r in json.loads(cb("lab", "status", "--json").stdout)["hosts"]] == [1e9, 1e9, 1e9, 2e8]

    res = cb("lab", "set", "--rail", "1", "--mtu", "9000")  # every host, rail 1 only
    assert res.returncode == 0, res.stderr
    assert [r["mtu"] for r in json.loads(cb("lab", "status", "--json").stdout)["hosts"]] == [1500, 9000, 1500, 9000]

    bad = cb("lab", "set", "--rail", "eth5", "--rate", "1gbit")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "commbench: --rail 'eth5' is not a rail of this lab: its hosts have eth0..eth1 (--rails 2); "
        "pass one of them, e.g. --rail eth1"]

    down = cb("lab", "down")
    assert down.returncode == 0, down.stderr
    for name in ("bridge crlbr0", "bridge crlbr1", "link crlveth1r1", "link crlveth2r1", "netns crlnode2"):
        assert name in down.stdout
    assert leftovers(PREFIX) == []


def test_a_slowed_rail_measures_slower(two_by_two, tmp_path):
    """Quick sanity check that the shaping is real traffic's: 16 MiB all_reduce over eth1 with one
    host's eth1 at 200mbit against eth0 at 1gbit."""
    assert cb("lab", "set", "--node", f"{PREFIX}node2", "--rail", "eth1", "--rate", "200mbit").returncode == 0
    busbw = {}
    for iface in ("eth0", "eth1"):
        out = tmp_path / f"{iface}.parquet"
        res = cb("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", "--iface", iface, "--sizes", "16M",
                 "-n", "3", "-w", "1", "--out", str(out))
        assert res.returncode == 0, res.stdout + res.stderr
        busbw[iface] = float(pd.read_parquet(out).busbw_GBps.iloc[0])
    print(f"\n2 lab hosts, 16 MiB all_reduce busbw GB/s: {busbw} (eth1 of host 2 at 200mbit)")
    assert busbw["eth1"] < 0.4 * busbw["eth0"]  # 0.2 by the rates


DOCTOR = [sys.executable, "-m", "commbench", "doctor"]


def doctor_problems() -> tuple[int, list[tuple[str, str, str]]]:
    res = cb("lab", "run", "--", *DOCTOR, "--json")
    doc = json.loads(res.stdout)
    problems = [(f["check"], f["host"], f["message"]) for f in doc["findings"] if f["severity"] == "problem"]
    return res.returncode, problems


@pytest.fixture
def four_by_two():
    lab_up(4, 2)
    yield
    cb("lab", "down")


def test_doctor_names_the_one_slow_rail_and_where_its_cap_comes_from(four_by_two):
    assert cb("lab", "run", "--", *DOCTOR).returncode == 0  # 4 hosts x 2 rails at 1gbit: healthy
    assert cb("lab", "set", "--node", f"{PREFIX}node3", "--rail", "eth1", "--rate", "200mbit").returncode == 0
    code, found = doctor_problems()
    assert code == 1 and found == [
        ("rail", f"{PREFIX}node3",
         f"{PREFIX}node3 rail eth1: 200 Mbit/s (tbf shaper), the other rails 1 Gbit/s (eth0)")]
    human = cb("lab", "run", "--", *DOCTOR)
    assert human.returncode == 1
    line = next(x for x in human.stdout.splitlines() if x.startswith("PROBLEM"))
    print(f"\n{line}")
    assert f"doctor: 1 problem(s) on {PREFIX}node3 (4 host(s) checked)" in human.stdout

    # an htb left on a NIC caps it too: its root classes' ceiling, read over rtnetlink
    assert cb("lab", "set", "--node", f"{PREFIX}node3", "--rail", "eth1", "--rate", "1gbit").returncode == 0
    node1 = f"{PREFIX}node1"
    for argv in (["qdisc", "replace", "dev", "eth1", "root", "handle", "1:", "htb", "default", "10"],
                 ["class", "add", "dev", "eth1", "parent", "1:", "classid", "1:10", "htb", "rate", "100mbit",
                  "ceil", "300mbit"]):
        assert ns_run(node1, "tc", *argv).returncode == 0
    code, found = doctor_problems()
    assert code == 1 and found == [
        ("rail", node1, f"{node1} rail eth1: 300 Mbit/s (htb shaper), the other rails 1 Gbit/s (eth0)")]
