"""Parallel groups sharing a host's link (root; issue #38, docs/LAYOUTS.md): on a 2-host lab with 2
ranks a host, `sweep --layout tp=2,dp=2 --group dp --solo` makes the data-parallel groups [0,2] and
[1,3], each a pair of local ranks across the two hosts. With `--iface eth0` both groups cross each
host's one 1 Gbit/s link at once, so each moves at most 0.65 of what it moves alone (about 0.5
measured), and the factor is flagged significant ("contended"). With `--iface eth0,eth1` (one
rail per local rank, rail-aligned) each group has its own link, and the factor stays >= 0.85
(about 1.0 measured).

One lab with 2 rails serves both cases. 16 MiB all_reduce of 2 ranks at 1 Gbit/s is about 0.14 s
an iteration alone, 0.28 s together; -n 5 gives 10 iterations a kind (A B B A), enough for the
factor's interval (more than 6) and a Mann-Whitney p near 1e-4. The whole file takes about 40 s
(lab up and down included); CI's budget for it is 60 s.
"""

from __future__ import annotations

import re
from functools import partial

import pandas as pd
import pytest

import helpers  # tests/helpers.py
from commbench.core.contention import contention
from commbench.core.results import read_results
from labkit import NEEDS_LAB, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cly"
ENV = lab_env(PREFIX)
SUBNET = "10.254.1.0/24"  # rail 1 on 10.254.2.0/24
SWEEP = ["sweep", "--backend", "gloo", "--layout", "tp=2,dp=2", "--group", "dp", "--sizes", "16M", "--solo",
         "-n", "5", "-w", "1", "--timeout", "60"]

cb = partial(helpers.cb, env=ENV, timeout=120)


@pytest.fixture(scope="module")
def lab():
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rails", "2", "--rate", "1gbit", "--subnet", SUBNET)
    assert up.returncode == 0, up.stdout + up.stderr
    yield
    cb("lab", "down")


def run(tmp_path, iface: str) -> tuple[dict[int, dict], str]:
    """`lab run --ranks-per-host 2 -- commbench sweep --layout ... --iface IFACE`: each dp group's
    concurrent row (by group_index) with its solo row's samples added, and the run's stdout."""
    res = cb("lab", "run", "--ranks-per-host", "2", "--", "python", "-m", "commbench", *SWEEP, "--iface", iface,
             "--out", str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    rows = read_results([tmp_path])
    assert len(rows) == 4 and set(rows["group_dim"]) == {"dp"}, rows  # 2 groups x (concurrent, solo)
    groups: dict[int, dict] = {}
    for _, row in rows.iterrows():
        kind = "concurrent" if row["concurrent"] else "solo"
        groups.setdefault(int(row["group_index"]), {})[kind] = row
    assert sorted(groups) == [0, 1] and all(len(g) == 2 for g in groups.values()), rows
    return groups, res.stdout


def factors(groups: dict[int, dict], name: str) -> dict[int, object]:
    """Each group's contention, recomputed from its two rows' iterations (the same as the column)."""
    found = {}
    for index, kinds in sorted(groups.items()):
        c = contention([t * 1e-6 for t in kinds["concurrent"]["samples_us"]],
                       [t * 1e-6 for t in kinds["solo"]["samples_us"]])
        assert kinds["concurrent"]["contention"] == pytest.approx(c.factor), kinds
        assert pd.isna(kinds["solo"]["contention"]), kinds  # the factor is the concurrent row's
        print(f"{name}: dp group {index} [{kinds['concurrent']['group_ranks']}] {c.text()}")
        found[index] = c
    return found


def test_two_dp_groups_share_one_rail_and_not_two(lab, tmp_path):
    groups, out = run(tmp_path / "one", "eth0")  # both local ranks of a host on eth0: the groups share it
    for index, c in factors(groups, "1 rail").items():
        assert c.factor <= 0.65, (index, c, out)
        assert c.verdict == "contended" and c.p_value < 0.05, (index, c, out)
    assert "(contended, Mann-Whitney p=" in out, out

    groups, out = run(tmp_path / "two", "eth0,eth1")  # local rank i on eth<i>: each group its own rail
    for index, c in factors(groups, "2 rails").items():
        assert c.factor >= 0.85, (index, c, out)

    # the views of the two runs (issue #38: compare per group dimension, the report's Layout section)
    done = cb("compare", str(tmp_path / "one"), str(tmp_path / "two"))
    print(done.stdout[-3000:])
    lines = {kind: [line for line in done.stdout.splitlines() if line.startswith(f"dp groups, {kind}:")]
             for kind in ("all at once", "each alone")}
    assert all(len(found) == 1 for found in lines.values()), done.stdout + done.stderr
    # one repetition a side: compare's verdict is inconclusive (it asks for -R 5), the changes are plain
    at_once, alone = (float(re.search(r"\(median ([+-][0-9.]+)%\)", lines[k][0]).group(1)) for k in lines)
    assert at_once >= 50 and abs(alone) <= 10, lines  # measured: +97.8% together, -0.6% alone
    report = tmp_path / "report.html"
    done = cb("report", str(tmp_path / "one"), str(tmp_path / "two"), "--out", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    html = report.read_text()
    assert "Layout" in html and "dp0 [0,2]" in html and "contended" in html, html[:2000]
