"""--bind with real gloo ranks on this machine: the CPUs each rank ran on, as the results file
records them (`rank_cpus`), under the local spawner and under torchrun; the refusals."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from commbench.core import binding
from commbench.core.binding import format_cpulist, parse_cpulist
from helpers import LAUNCHER_VARS  # tests/helpers.py

pytestmark = pytest.mark.integration

ALL_CPUS = os.sched_getaffinity(0)
SWEEP = ("sweep", "--collective", "allreduce", "--sizes", "64K", "-n", "5", "-w", "1")
needs_two = pytest.mark.skipif(len(ALL_CPUS) < 2, reason="needs 2 usable CPUs to give each rank its own")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARS.match(k)}
    env.update(extra)
    return env


def commbench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True,
                          env=env or clean_env(), timeout=180)


def rank_cpus(path) -> list[set[int]]:
    df = pd.read_parquet(path, columns=["rank_cpus"])
    lists = {tuple(v) for v in df.rank_cpus}
    assert len(lists) == 1, lists  # every row of the run repeats the same sets
    return [parse_cpulist(text) for text in lists.pop()]


@needs_two
def test_cores_gives_each_rank_its_own_cpu(tmp_path):
    out = tmp_path / "cores.parquet"
    proc = commbench(*SWEEP, "--nproc", "2", "--bind", "cores", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    first, second = rank_cpus(out)
    expected = sorted(ALL_CPUS)
    half = (len(expected) + 1) // 2
    assert (first, second) == (set(expected[:half]), set(expected[half:]))
    assert not first & second
    if len(ALL_CPUS) == 2:  # this project's 2-core machine: two disjoint single CPUs
        assert len(first) == len(second) == 1
    assert f"cpus {format_cpulist(first)}" in proc.stdout  # the header names each rank's CPUs


@needs_two
def test_auto_is_the_default_and_binds_like_cores_without_gpus(tmp_path):
    out = tmp_path / "auto.parquet"
    proc = commbench(*SWEEP, "--nproc", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    first, second = rank_cpus(out)
    if len(ALL_CPUS) >= 4:  # two CPUs a rank or more: auto pins like cores
        assert first and second and not first & second
    else:  # one CPU a rank would stall a rank's own threads: auto leaves them to the scheduler
        assert first == second == ALL_CPUS
    plan = pd.read_parquet(out, columns=["plan"]).plan.iloc[0]
    assert '"bind": "auto"' in plan


def test_none_leaves_every_rank_on_every_cpu(tmp_path):
    out = tmp_path / "none.parquet"
    proc = commbench(*SWEEP, "--nproc", "2", "--bind", "none", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert rank_cpus(out) == [ALL_CPUS, ALL_CPUS]


def test_more_ranks_than_cpus_share_and_say_so(tmp_path):
    out = tmp_path / "many.parquet"
    n = len(ALL_CPUS) + 1
    proc = commbench(*SWEEP, "--nproc", str(n), "--bind", "cores", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"--bind cores: {n} ranks on {len(ALL_CPUS)} CPU(s): each rank gets one, shared round-robin" in proc.stderr
    cpus = rank_cpus(out)
    assert all(len(c) == 1 for c in cpus) and cpus[0] == cpus[-1]


@pytest.mark.parametrize("given, expect_own", [((), False), (("--bind", "cores"), True)],
                         ids=["launcher-binding-stands", "explicit-bind-rebinds"])
def test_under_torchrun_only_an_explicit_bind_rebinds(tmp_path, given, expect_own):
    if expect_own and len(ALL_CPUS) < 2:
        pytest.skip("needs 2 usable CPUs to give each rank its own")
    out = tmp_path / "tr.parquet"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "commbench", *SWEEP, *given, "--out", str(out)],
                          capture_output=True, text=True, env=clean_env(), timeout=180)
    assert proc.returncode == 0, proc.stderr
    first, second = rank_cpus(out)
    if expect_own:
        assert first and second and not first & second
    else:
        assert first == second == ALL_CPUS


@pytest.mark.parametrize("args, message", [
    (("--bind", "foo"),
     "commbench: --bind 'foo' is not a binding: use one of auto, none, cores, numa (e.g. --bind cores)"),
    (("--bind", "cores=0-1"), "commbench: --bind 'cores=0-1' is not a binding: use one of auto, none, cores, numa "
                              "(e.g. --bind cores)"),
])
@pytest.mark.failure(
    row="bind-foo-bind-cores-0",
    section="Bad input",
    failure="`--bind foo`, `--bind cores=0-1`, `--bind numa` without NUMA information in sysfs",
    does="one line: `--bind 'foo' is not a binding: use one of auto, none, cores, numa (e.g. --bind cores)`, or the "
         "NUMA folder and the fix (`--bind cores` or `--bind none`); exit 2 before any rank starts",
)
def test_a_foreign_value_is_one_line_and_exit_2(tmp_path, args, message):
    proc = commbench(*SWEEP, *args, "--out", str(tmp_path / "x.parquet"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [message]
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.failure(row="bind-foo-bind-cores-0")
def test_numa_without_numa_information_is_one_line_and_exit_2(tmp_path):
    # a machine whose kernel shows no NUMA nodes: an empty tree in place of /sys/devices/system/node
    empty = tmp_path / "node"
    empty.mkdir()
    proc = commbench(*SWEEP, "--bind", "numa", "--out", str(tmp_path / "x.parquet"),
                     env=clean_env(COMMBENCH_TEST_NODE_ROOT=str(empty)))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "commbench: --bind numa: this machine shows no NUMA nodes with usable CPUs "
        "(/sys/devices/system/node/node*/cpulist): use --bind cores or --bind none"]
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_a_child_started_while_pinned_inherits_the_cpus_and_the_parent_is_restored():
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with binding.pinned(one):
        child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str(sorted(one))
    assert os.sched_getaffinity(0) == before
