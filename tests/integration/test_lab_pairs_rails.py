"""`commbench pairs --per-rail` with real gloo ranks: on four lab hosts with two rails each (root),
rail eth1 of one host at a fifth of the rate is named as that host's rail and nothing else; every
row carries its rail, and a run without --per-rail has none; with that rail taken down, its links
fail fast and that host's rail is named as unreachable, nothing else. Without the lab (no root
needed): three local ranks on the loopback rail, and the refusal of a rail that a host lacks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from commbench.workloads import pairrails
import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env



def lab(test):
    """The lab's marks (root, iproute2) on one test: the loopback test of this file needs neither."""
    for mark in NEEDS_LAB:
        test = mark(test)
    return test

PREFIX = "cpr"
ENV = lab_env(PREFIX)
SUBNET = "10.243.0.0/24"  # rail 1 on 10.243.1.0/24
SLOW = f"{PREFIX}node3"
DEAD_PORT = f"{PREFIX}veth3r1"  # node3's rail 1 on the bridge side
# a fifth of the rate on one rail of one host (docs/PAIRS.md, "Rails")
FAST_RATE, SLOW_RATE = "1gbit", "200mbit"
PAIRS = ["pairs", "--size", "4M", "-w", "1", "-n", "2"]


cb = partial(helpers.cb, env=ENV)  # python -m commbench in a subprocess (tests/helpers.py)


def lab_pairs(*args: str, out: Path) -> subprocess.CompletedProcess:
    return cb("lab", "run", "--", sys.executable, "-m", "commbench", *args, "--out", str(out))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """One lab, 4 hosts x 2 rails, rail eth1 of node3 at a fifth: --per-rail, a plain run (only its
    rail column is looked at: the smallest run that gives every link a row), then --per-rail with
    that rail down."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces, veth, tc)")
    out = tmp_path_factory.mktemp("lab-pairs-rails")
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "4", "--rails", "2", "--rate", FAST_RATE, "--mtu", "1500", "--subnet", SUBNET)
    assert up.returncode == 0, up.stdout + up.stderr
    done = {}
    began = time.monotonic()
    try:
        slowed = cb("lab", "set", "--node", SLOW, "--rail", "eth1", "--rate", SLOW_RATE)
        assert slowed.returncode == 0, slowed.stdout + slowed.stderr
        plain = ["pairs", "--size", "256K", "-w", "1", "-n", "1"]
        dead = [*PAIRS, "--per-rail", "--timeout", "5", "-n", "1"]
        for name, args in (("rails", [*PAIRS, "--per-rail"]), ("plain", plain), ("dead", dead)):
            if name == "dead":  # eth1 of node3 loses its carrier: its bridge-side port (lab/state.py port_name)
                down = subprocess.run(["ip", "link", "set", DEAD_PORT, "down"], capture_output=True, text=True)
                assert down.returncode == 0, down.stderr
            start = time.monotonic()
            done[name] = lab_pairs(*args, out=out / f"{name}.parquet"), out / f"{name}.parquet"
            print(f"\n{name}: {time.monotonic() - start:.1f} s")
    finally:
        cb("lab", "down")
        print(f"lab up, three runs, lab down: {time.monotonic() - began:.1f} s")
    return done


def figures(df: pd.DataFrame) -> str:
    return ", ".join(f"{r.rail} {r.src_host[-1]}->{r.dst_host[-1]} {r.busbw_GBps:.4f}"
                     for r in df.sort_values(["rail", "busbw_GBps"]).itertuples())


@lab
def test_the_slow_rail_of_one_host_is_named_and_nothing_else(runs):
    res, path = runs["rails"]
    assert res.returncode == 1, res.stdout + res.stderr
    slow_lines = [ln for ln in res.stdout.splitlines() if ln.startswith("# Slow ")]  # not "# Slowest links"
    assert len(slow_lines) == 1 and slow_lines[0].startswith(f"# Slow rail: host {SLOW} rail eth1: "), slow_lines
    assert "its other rails (eth0) are normal" in slow_lines[0]
    print(f"\n{slow_lines[0]}")
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"commbench: slow rail: host {SLOW} rail eth1: ") and "; " not in last.split(" (")[0]
    df = pd.read_parquet(path)
    print(f"\n--per-rail, {SLOW} eth1 at {SLOW_RATE}, the rest {FAST_RATE} (GB/s): {figures(df)}")
    assert len(df) == 24 and sorted(df.rail.unique()) == ["eth0", "eth1"]
    assert (df.groupby("rail").size() == 12).all() and set(df.wrong) == {0}
    involved = (df.src_host == SLOW) | (df.dst_host == SLOW)
    slow = df[involved & (df.rail == "eth1")].busbw_GBps.median()
    fast = df[~(involved & (df.rail == "eth1"))].busbw_GBps.median()
    print(f"{SLOW}'s eth1 links: median {slow:.4f} GB/s; every other link {fast:.4f}; ratio {slow / fast:.2f}")
    assert slow < 0.4 * fast  # a fifth of the rate; wide margin for a loaded 2-core machine
    eth0 = df[df.rail == "eth0"].busbw_GBps
    assert eth0.min() > 0.6 * eth0.median()  # its other rail (and every host's eth0) is not slow

    again = cb("pairs", "--from", str(path))  # the same verdict from the file
    assert again.returncode == 1 and f"# Slow rail: host {SLOW} rail eth1" in again.stdout
    assert "Slow host" not in again.stdout


@lab
def test_a_run_without_per_rail_has_no_rail(runs):
    res, path = runs["plain"]
    df = pd.read_parquet(path)
    assert len(df) == 12 and df.rail.isna().all(), df.rail.unique()
    assert "Rail" not in res.stdout and "Slow rail" not in res.stdout


@lab
def test_a_dead_rail_of_one_host_is_named_as_that_rail_fast(runs):
    res, path = runs["dead"]
    assert res.returncode == 1, res.stdout + res.stderr
    named = [ln for ln in res.stdout.splitlines() if ln.startswith(("# Unreachable", "# Hung", "# Failing",
                                                                     "# Failed link:", "# Slow "))]
    assert len(named) == 1 and named[0].startswith(f"# Unreachable host: {SLOW} rail eth1 (every link failed: "
                                                   "3 of 3, unreachable; confirmed"), named
    assert res.stderr.strip().splitlines()[-1].startswith(f"commbench: host {SLOW} rail eth1: unreachable")
    df = pd.read_parquet(path)
    main = df[df.confirm.isna()]
    failed = main[main.status.notna()]
    assert len(main) == 24 and set(failed.rail) == {"eth1"} and len(failed) == 6
    assert ((failed.src_host == SLOW) | (failed.dst_host == SLOW)).all()
    assert main[main.status.isna()].busbw_GBps.min() > 0.05  # every other link measured


# ----------------------------------------------------------------------------- without the lab


def local_pairs(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "SLURM_PROCID")}
    return subprocess.run([sys.executable, "-m", "commbench", "pairs", "--per-rail", "--size", "256K", "-w", "1",
                           "-n", "2", "--out", str(tmp_path / "lo.parquet"), *args],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)


@pytest.mark.integration
def test_three_local_ranks_on_the_loopback_rail(tmp_path):
    """Real gloo ranks bound to lo (the only rail this machine's ranks can use without a lab)."""
    res = local_pairs(tmp_path, "--rails", "lo", "--nproc", "3")
    out = tmp_path / "lo.parquet"
    assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: loopback noise may single out a rank
    df = pd.read_parquet(out)
    assert len(df) == 6 and set(df.rail) == {"lo"} and set(df.wrong) == {0}
    assert "rail after rail: lo" in res.stdout and "# Rail lo: 6 links" in res.stdout


@pytest.mark.integration
def test_a_rail_that_the_host_lacks_is_one_line_exit_2(tmp_path):
    res = local_pairs(tmp_path, "--rails", "lo,nosuch7", "--nproc", "2")
    assert res.returncode == 2, res.stdout + res.stderr
    said = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert said[0] == (f"commbench: --rails nosuch7: host {os.uname().nodename} has no interface nosuch7 with an "
                       f"IPv4 address (it has: {', '.join(sorted(pairrails.local_rails()))}); name rails that every "
                       "host has"), said
    assert "Traceback" not in res.stderr and len(pd.read_parquet(tmp_path / "lo.parquet")) == 0  # nothing measured
