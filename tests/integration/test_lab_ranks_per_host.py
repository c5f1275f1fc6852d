"""Several ranks a lab host, each on its own rail (root; issue #38 part 4): on a 2-host, 2-rail lab,
`lab run --ranks-per-host 2` starts 4 ranks numbered block-wise, and `--iface eth0,eth1` puts local
rank 0 on eth0 and local rank 1 on eth1 of its host. gloo connects a pair to one end's address, so
the pair of local ranks 1 (rank 1 on host 1, rank 3 on host 2) talks over rail 1 only: eth1's byte
counters move by that pair's share of all_to_all; with `--iface eth0` for every rank they stay
still. A list longer than a host's ranks is refused on one line, exit 2.

The whole file takes about 20 s (lab up and down included); CI's budget for it is 60 s.
"""

from __future__ import annotations

import json
import re
from functools import partial

import pytest

import helpers  # tests/helpers.py
from commbench.core.results import read_results
from labkit import NEEDS_LAB, lab_env, ns_run

pytestmark = NEEDS_LAB

PREFIX = "crh"
ENV = lab_env(PREFIX)
SUBNET = "10.253.1.0/24"  # rail 1 on 10.253.2.0/24
HOSTS = [f"{PREFIX}node1", f"{PREFIX}node2"]
SWEEP = ["sweep", "--backend", "gloo", "--collective", "all_to_all", "-b", "1M", "-e", "1M", "-n", "3", "-w", "1",
         "--timeout", "30"]
MB = 1 << 20

cb = partial(helpers.cb, env=ENV, timeout=120)


@pytest.fixture(scope="module")
def lab():
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rails", "2", "--rate", "1gbit", "--subnet", SUBNET)
    assert up.returncode == 0, up.stdout + up.stderr
    yield
    cb("lab", "down")


def tx_bytes() -> dict[tuple[str, str], int]:
    """(host, interface) -> bytes sent, from the kernel inside each lab host (ip -s -j link)."""
    found = {}
    for host in HOSTS:
        for link in json.loads(ns_run(host, "ip", "-s", "-j", "link", "show").stdout):
            if link["ifname"] in ("eth0", "eth1"):
                found[(host, link["ifname"])] = link["stats64"]["tx"]["bytes"]
    return found


def run(tmp_path, iface: str) -> tuple[dict[tuple[str, str], int], object, str]:
    """`lab run --ranks-per-host 2 -- commbench sweep ... --iface IFACE`: each interface's bytes sent
    during it, its one row, its stdout."""
    before = tx_bytes()
    res = cb("lab", "run", "--ranks-per-host", "2", "--", "python", "-m", "commbench", *SWEEP, "--iface", iface,
             "--out", str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    after = tx_bytes()
    rows = read_results([tmp_path])
    assert len(rows) == 1, res.stdout
    return {k: after[k] - before[k] for k in after}, rows.iloc[0], res.stdout


def test_four_ranks_on_two_hosts_each_local_rank_on_its_own_rail(lab, tmp_path):
    sent, row, out = run(tmp_path / "rails", "eth0,eth1")
    assert row["world_size"] == 4 and row["ranks_per_node"] == 2 and list(row["hosts"]) == HOSTS
    # block-wise, each rank on its local rank's interface (the header's "Using devices" lines)
    seen = re.findall(r"Rank\s+(\d) Pid\s+\d+ on\s+(\S+) .* iface (eth\d)", out)
    assert seen == [(str(r), HOSTS[r // 2], f"eth{r % 2}") for r in range(4)], out
    # all_to_all of 1 MiB: 256 KiB a pair and iteration; the local ranks 1's pair over rail 1, both ways
    for host in HOSTS:
        assert sent[(host, "eth1")] > MB and sent[(host, "eth0")] > MB, sent
    wire = json.loads(row["wire"])["hosts"]  # the run's own counters cover both rails of each host
    assert all(wire[h]["counters"]["eth1"]["tx_bytes"] > 256 * 1024 for h in HOSTS), wire

    sent, row, out = run(tmp_path / "one", "eth0")  # the control: one interface for every rank
    assert row["world_size"] == 4 and "iface eth1" not in out
    for host in HOSTS:
        assert sent[(host, "eth1")] < 64 * 1024 < MB < sent[(host, "eth0")], sent


def test_a_list_longer_than_a_host_s_ranks_is_refused_on_one_line(lab, tmp_path):
    res = cb("lab", "run", "--", "python", "-m", "commbench", *SWEEP, "--iface", "eth0,eth1", "--out", str(tmp_path))
    lines = set(res.stderr.strip().splitlines())  # every rank says it, in the same words
    assert res.returncode == 2, res.stdout + res.stderr
    assert lines == {"commbench: --iface eth0,eth1 names 2 interfaces for 1 rank(s) on this host (lab): local rank "
                     "i takes the i-th, so give at most 1, e.g. --iface eth0, or start 2 ranks a host"}, res.stderr
    assert not list(tmp_path.glob("*.parquet"))
