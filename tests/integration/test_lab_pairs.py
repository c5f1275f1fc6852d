"""`commbench pairs` on four lab hosts at 1gbit (root): with equal links nobody is singled out;
with one host's link at 500mbit, that host is named and its links are the slowest."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cp9"
ENV = lab_env(PREFIX)
SLOW = f"{PREFIX}node3"
PAIRS = ["pairs", "--size", "16M", "-w", "1", "-n", "3"]


cb = partial(helpers.cb, env=ENV)  # python -m commbench in a subprocess (tests/helpers.py)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """The same 4-host lab measured twice: all links at 1gbit, then with one host at 500mbit."""
    out = tmp_path_factory.mktemp("lab-pairs")
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "4", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.243.9.0/24")
    assert up.returncode == 0, up.stdout + up.stderr
    done = {}
    try:
        for name in ("equal", "slow"):
            if name == "slow":
                changed = cb("lab", "set", "--node", SLOW, "--rate", "500mbit")
                assert changed.returncode == 0, changed.stderr
            path = out / f"{name}.parquet"
            done[name] = (cb("lab", "run", "--", sys.executable, "-m", "commbench", *PAIRS, "--out", str(path)), path)
    finally:
        cb("lab", "down")
    return done


def figures(path: Path) -> str:
    df = pd.read_parquet(path).sort_values("busbw_GBps")
    return ", ".join(f"{s[-1]}->{d[-1]} {bw:.4f}" for s, d, bw in zip(df.src_host, df.dst_host, df.busbw_GBps))


def test_equal_links_single_out_nobody(runs):
    res, path = runs["equal"]
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No host stands out" in res.stdout and "Slow host" not in res.stdout
    df = pd.read_parquet(path)
    print(f"\nequal links (GB/s): {figures(path)}")
    assert len(df) == 12 and set(df.workload) == {"pairs"} and set(df.collective) == {"sendrecv"}
    assert set(zip(df.src_rank, df.dst_rank)) == {(s, d) for s in range(4) for d in range(4) if s != d}
    assert set(df.wrong) == {0}
    assert (df.busbw_GBps == df.algbw_GBps).all()


def test_the_slow_host_is_named_and_its_links_are_the_slowest(runs):
    res, path = runs["slow"]
    assert res.returncode == 1, res.stdout + res.stderr  # a host singled out is a bad measured answer
    assert f"Slow host: {SLOW}" in res.stdout
    assert res.stderr.strip().splitlines()[-1].startswith(f"commbench: slow host: {SLOW} ")
    df = pd.read_parquet(path).sort_values("busbw_GBps")
    involved = (df.src_host == SLOW) | (df.dst_host == SLOW)
    assert involved.head(6).all(), df[["src_host", "dst_host", "busbw_GBps"]]  # its 6 directed links are slowest
    slow_bw, fast_bw = df[involved].busbw_GBps.median(), df[~involved].busbw_GBps.median()
    equal = pd.read_parquet(runs["equal"][1]).busbw_GBps.median()
    print(f"\none host at 500mbit (GB/s): {figures(path)}; median {slow_bw:.4f} (slow host's links) vs "
          f"{fast_bw:.4f} (others), ratio {slow_bw / fast_bw:.2f}; all equal: median {equal:.4f}")
    assert set(df.wrong) == {0}

    again = cb("pairs", "--from", str(path))  # the same verdict from the file
    assert again.returncode == 1 and f"Slow host: {SLOW}" in again.stdout
    plotted = cb("plot", str(path), "--out", str(path.with_suffix(".png")))
    assert plotted.returncode == 0 and path.with_suffix(".png").stat().st_size > 10_000
