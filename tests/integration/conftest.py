"""Lab measurements that more than one test file reads (root only; the tests that use them carry
labkit's NEEDS_LAB marks, so without root they skip before anything here runs).

`lab_sides`: real 2-host all_reduce runs under four lab settings, measured once a session and read
by test_lab_compare.py (compare's verdicts) and test_lab_gate.py (bands suggested from the first
1gbit run, judged on the second and on the 800mbit one). The fixture changes its lab's links between
the runs and takes the lab down before it returns, so the tests only read files: its lab (prefix
`cc`, subnet 10.234.0.0/24) is its own, as every test file's is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from labkit import lab_env, run_commbench

SIDES_PREFIX = "cc"
SIDES_ENV = lab_env(SIDES_PREFIX)
SIDES_SWEEP = ["--collective", "allreduce", "--sizes", "4M,16M", "-n", "5", "-w", "2"]

# The runs in the order they are measured: (side, lab settings changed before it, repetitions). Each side is a
# folder of runs, each run a file named by its place in this schedule. The order is balanced (base, again,
# jumbo, jumbo, again, base), so a machine that drifts during the fixture (other load on 2 cores) moves every
# side's mean time alike: one CI run that measured the sides one after the other found "the same lab twice"
# 3% slower and jumbo frames 2% faster, not 4%.
SIDES_SCHEDULE = [
    ("base", None, 3), ("again", None, 3), ("jumbo", ["--mtu", "9000"], 3), ("jumbo", None, 3),
    ("again", ["--mtu", "1500"], 3), ("base", None, 3), ("slow", ["--rate", "800mbit"], 5),
]

# Tests that run with nothing beside them (CI's last pytest line, `-m serial`): every lab test (link rates and
# timings measured on 2 cores), Slurm and Open MPI, and those that time a run against a limit or a ratio. The
# rest of the tier runs two at a time (`-n 2 -m "not serial"`), as the unit tier does.
SERIAL_FILES = ("test_lost_rank.py", "test_default_precision.py", "test_reliability_subprocess.py",
                "test_settings_ranks.py", "test_reliability_labsecrets.py", "test_reliability_labstate.py",
                "test_arrival_timing.py", "test_control_timing.py")


# Serial files whose tests mostly wait (for a dead link's timeout, a stopped rank, a drained node, a deaf
# binary) and judge what the user is told, not a rate a busy core would move: CI runs them two files at a
# time (`-m pairwise -n 2 --dist loadfile`), each file on its own lab (its own prefix and subnet:
# tests/unit/test_lab_files.py holds them unique), before the rest of `serial` one at a time. Their few
# rate checks ask for 85-90% of a 1gbit link, which one other lab's waiting test leaves them.
PAIRWISE_FILES = ("test_lab_faults.py", "test_lost_rank.py", "test_lab_ends.py", "test_lab_arrival.py",
                  "test_lab_wire.py", "test_reliability_subprocess.py", "test_lab_check.py",
                  "test_reliability_labsecrets.py", "test_reliability_labstate.py", "test_lab_state_folder.py",
                  "test_lab_sweep_warns.py")


def is_serial(path: Path) -> bool:
    name = path.name
    return name.startswith("test_lab") or "mpirun" in name or "slurm" in name or name in SERIAL_FILES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if is_serial(path):
            item.add_marker(pytest.mark.serial)
            if path.name in PAIRWISE_FILES:
                item.add_marker(pytest.mark.pairwise)


QUIET_SPREAD = 1.10  # the slowest repetition of a side at a size over its fastest, on a quiet machine 1.02-1.04


def _cb(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_commbench(SIDES_ENV, *args, timeout=timeout)


@pytest.fixture(scope="session")
def lab_sides(tmp_path_factory) -> dict[str, Path]:
    """Real 2-host runs, a folder a side: 1gbit at MTU 1500 (base and again, six repetitions each),
    1gbit at MTU 9000 (jumbo), and 800mbit (slow). A schedule that a disturbed machine spread by more
    than QUIET_SPREAD within a side at some size is measured once more (one CI run saw 140-194 ms for one setting,
    where a 4% effect is the question): the tests are about verdicts on a quiet lab."""
    out = tmp_path_factory.mktemp("lab-sides")
    _cb("lab", "down")
    up = _cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.234.0.0/24")
    assert up.returncode == 0, up.stderr
    try:
        for attempt in range(2):
            sides = _measure(out / f"attempt{attempt}")
            if max(spread(folder) for folder in sides.values()) <= QUIET_SPREAD:
                break
    finally:
        _cb("lab", "down")
    return sides


def _measure(out: Path) -> dict[str, Path]:
    assert _cb("lab", "set", "--mtu", "1500", "--rate", "1gbit").returncode == 0
    for i, (side, change, reps) in enumerate(SIDES_SCHEDULE):
        if change:
            assert _cb("lab", "set", *change).returncode == 0
        (out / side).mkdir(parents=True, exist_ok=True)
        res = _cb("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", *SIDES_SWEEP, "-R", str(reps),
                  "--label", side, "--out", str(out / side / f"{i}.parquet"))
        assert res.returncode == 0, res.stdout + res.stderr
    return {side: out / side for side, _, _ in SIDES_SCHEDULE}


def spread(folder: Path) -> float:
    """The widest spread of a side's repetitions at any size: the gate's bands cover 4 MiB as well as
    16 MiB (one CI run spread 4 MiB by 17.5% while 16 MiB stayed quiet)."""
    df = pd.concat([pd.read_parquet(f) for f in folder.glob("*.parquet")])
    return float(df.groupby("size_bytes").time_us.agg(lambda t: t.max() / t.min()).max())
