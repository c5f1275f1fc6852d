"""`--env` on a two-rail lab (root): the grid once per GLOO_SOCKET_IFNAME, measured side by side in
one run. Two hosts with eth0 and eth1 at 1gbit each, host 2's eth1 shaped to 200mbit: the eth1
setting must run at most 0.3 x eth0's bus bandwidth, every row carries its setting, the wire
counters show the bytes on the rail the setting named, plot draws a line per setting and compare
gives a verdict per setting (two runs), and the two settings of one run compare side by side.
Then eth0,eth1 (both rails at 1gbit): does gloo stripe?"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial

import pandas as pd
import pytest

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cev"
ENV = lab_env(PREFIX)
SUBNET = "10.244.0.0/24"  # rail 1 on 10.244.1.0/24
NODE2 = f"{PREFIX}node2"


cb = partial(helpers.cb, env=ENV, timeout=600)  # python -m commbench in a subprocess (tests/helpers.py)


@pytest.fixture(scope="module")
def rails():
    cb("lab", "down")
    res = cb("lab", "up", "--nodes", "2", "--rails", "2", "--rate", "1gbit", "--subnet", SUBNET)
    assert res.returncode == 0, res.stdout + res.stderr
    yield
    cb("lab", "down")


def sweep(out, axis: str, *more: str) -> subprocess.CompletedProcess:
    return cb("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", "--env", axis, "--sizes", "8M",
              "--placement", "in", "-w", "1", "-n", "3", "--out", str(out), *more)


def rail_bytes(wire: str) -> dict[str, dict[str, int]]:
    """Each host's bytes sent per interface during a point, from the row's wire column."""
    hosts = json.loads(wire)["hosts"]
    return {h: {where: c.get("tx_bytes", 0) for where, c in e["counters"].items() if "tx_bytes" in c}
            for h, e in hosts.items()}


def test_a_slow_rail_measured_beside_a_fast_one(rails, tmp_path):
    assert cb("lab", "set", "--node", NODE2, "--rail", "eth1", "--rate", "200mbit").returncode == 0
    runs = [tmp_path / "one.parquet", tmp_path / "two.parquet"]
    for out in runs:
        res = sweep(out, "GLOO_SOCKET_IFNAME=eth0|eth1", "-R", "2")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "# Settings: GLOO_SOCKET_IFNAME=eth1" in res.stdout
    df = pd.read_parquet(runs[0])
    e0, e1 = "GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth1"
    assert list(zip(df.repetition, df.settings)) == [(0, e0), (0, e1), (1, e1), (1, e0)]  # balanced turns
    busbw = df.groupby("settings").busbw_GBps.median()
    print(f"\n2 hosts x 2 rails, host 2 eth1 at 200mbit, 8 MiB all_reduce busbw: {busbw.to_dict()}")
    assert busbw["GLOO_SOCKET_IFNAME=eth1"] <= 0.3 * busbw["GLOO_SOCKET_IFNAME=eth0"]
    for setting, wire in zip(df.settings, df.wire):
        rail, other = ("eth1", "eth0") if setting.endswith("eth1") else ("eth0", "eth1")
        for host, sent in rail_bytes(wire).items():
            assert sent[rail] > 16 << 20 and sent.get(other, 0) < 1 << 20, (setting, host, sent)

    png = tmp_path / "rails.png"
    res = cb("plot", str(runs[0]), "--out", str(png))
    assert res.returncode == 0 and png.stat().st_size > 10_000, res.stdout + res.stderr

    res = cb("compare", str(runs[0]), str(runs[1]), "--format", "json")
    assert res.returncode in (0, 1, 3), res.stdout + res.stderr
    points = json.loads(res.stdout)["points"]
    assert sorted(p["key"]["settings"] for p in points) == ["GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth1"]
    assert all(p["verdict"] for p in points)

    # the two settings of one run, side by side: eth1 against eth0
    res = cb("compare", str(runs[0]), str(runs[0]), "--before-setting", "GLOO_SOCKET_IFNAME=eth0",
             "--after-setting", "GLOO_SOCKET_IFNAME=eth1", "--allow-within-run", "--format", "json")
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["verdict"] == "regression", res.stdout + res.stderr
    assert [p["ratio"] < 0.3 for p in doc["points"]] == [True]


def test_both_rails_named_at_once(rails, tmp_path):
    assert cb("lab", "set", "--node", NODE2, "--rail", "eth1", "--rate", "1gbit").returncode == 0
    out = tmp_path / "both.parquet"
    res = sweep(out, "GLOO_SOCKET_IFNAME=eth0|eth0,eth1", "-n", "8")
    assert res.returncode == 0, res.stdout + res.stderr
    df = pd.read_parquet(out)
    assert list(df.settings) == ["GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth0,eth1"]
    one, both = df.busbw_GBps
    sent = rail_bytes(df.wire.iloc[1])
    share = {h: s.get("eth1", 0) / max(1, s.get("eth0", 0) + s.get("eth1", 0)) for h, s in sent.items()}
    print(f"\nGLOO_SOCKET_IFNAME=eth0,eth1 vs eth0 (both rails 1gbit): busbw {both:.4f} vs {one:.4f} GB/s "
          f"(x{both / one:.2f}); eth1's share of the bytes sent: {share}")
    # gloo makes one device per interface and gives each process-group operation to one of them in
    # turn: the bytes are shared between the rails, but one collective never uses both at once
    assert all(0.3 < s < 0.7 for s in share.values()), sent
    assert both < 1.3 * one
