"""`commbench gate` on real measurements from the lab (root): bands suggested from one run pass a second
run on the same links, and fail once the links are 20% slower.

The runs are conftest.py's `lab_sides` (2 hosts, all_reduce at 4 and 16 MiB, measured once a session and
read by test_lab_compare.py too): bands from the first 1gbit run (base, 3 repetitions), judged on the
1gbit run measured right after it (again) and on the run after `lab set --rate 800mbit` (slow, 5
repetitions).
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import pytest
import yaml

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, first_run, lab_env

pytestmark = NEEDS_LAB

ENV = lab_env("cg9")  # gate itself needs no lab


cb = partial(helpers.cb, env=ENV)  # python -m commbench in a subprocess (tests/helpers.py)


@pytest.fixture(scope="module")
def lab_runs(lab_sides, tmp_path_factory) -> dict[str, Path]:
    """Bands from a first run at 1gbit; a second run at 1gbit; a third after `lab set --rate 800mbit`."""
    files = {"bands": tmp_path_factory.mktemp("lab-gate") / "lab-1gbit.yaml", "first": first_run(lab_sides["base"]),
             "second": first_run(lab_sides["again"]), "slow": first_run(lab_sides["slow"])}
    # --lower 5%: bands no narrower than this machine's run-to-run drift (two sweeps a minute
    # apart on 2 shared cores have differed by 3-5%); the 20% slower link still misses them
    made = cb("gate", "--suggest", str(files["first"]), "--system", "lab-1gbit", "--lower", "5%",
              "--out", str(files["bands"]))
    assert made.returncode == 0, made.stderr
    print("\n" + files["bands"].read_text())
    return files


def test_suggested_bands_describe_the_run(lab_runs):
    doc = yaml.safe_load(lab_runs["bands"].read_text())
    assert doc["version"] == 1 and doc["system"] == "lab-1gbit"
    entries = {e["size"]: e for e in doc["entries"]}
    assert set(entries) == {"4M", "16M"}
    for e in entries.values():
        assert (e["collective"], e["ranks"], e["nnodes"], e["dtype"]) == ("all_reduce", 2, 2, "float32")
        # 1gbit carries at most 0.125 GB/s; TCP over MTU 1500 about 0.119 of it
        assert 0.10 < e["busbw_GBps"] < 0.125
        # a steady link: its repetitions agree within 5%, and the band follows from that spread
        # (3 repetitions: Student's t for 2 degrees of freedom, so sd 3.4% already gives 15%)
        sd = float(re.search(r"sd ([0-9.]+)%", e["basis"]).group(1)) / 100
        assert e["basis"].startswith(f"-{e.get('lower', doc['defaults']['lower']):.1%} from 3 repetitions")
        assert sd < 0.05 and e.get("lower", doc["defaults"]["lower"]) <= 0.15, e
    assert min(e.get("lower", doc["defaults"]["lower"]) for e in entries.values()) < 0.15  # one band is tight


def test_a_second_run_on_the_same_lab_passes(lab_runs):
    res = cb("gate", str(lab_runs["second"]), "--expect", str(lab_runs["bands"]))
    print("\n" + res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "gate: PASS: 2 of 2 entries within their bands (system lab-1gbit)" in res.stdout


def test_a_link_20_percent_slower_fails_naming_the_entries(lab_runs):
    res = cb("gate", str(lab_runs["slow"]), "--expect", str(lab_runs["bands"]))
    print("\n" + res.stdout)
    assert res.returncode == 1, res.stdout + res.stderr
    summary = res.stdout.strip().splitlines()[-1]
    assert summary.startswith("gate: FAIL: 2 of 2 entries missed (system lab-1gbit): ")
    assert "#1 all_reduce float32 4 MiB 2 ranks on 2 nodes: below band (" in summary
    assert "#2 all_reduce float32 16 MiB 2 ranks on 2 nodes: below band (" in summary
    json_res = cb("gate", str(lab_runs["slow"]), "--expect", str(lab_runs["bands"]), "--format", "json")
    ratios = [e["ratio"] for e in json.loads(json_res.stdout)["entries"]]
    assert json_res.returncode == 1 and all(0.75 < r < 0.85 for r in ratios), ratios
