"""Open MPI for real (Debian's openmpi-bin, mpirun 4.1): `commbench sweep` on 2 and 3 local ranks,
its output redirected to a file, and a 2-host job across the lab with mpirun's remote agent pointed
at `commbench lab rsh`, the way mpirun starts ranks on a cluster over ssh (one rank a host, and 2 a
host with one host's ranks late: the slow-host warning); `nccl-tests run --launcher mpirun` the same
way with a stand-in binary.

Open MPI hands its ranks a pseudo-terminal even when mpirun's output goes to a file: before
core/progress.py, rank 0 drew its live bar into the log (escape sequences around every line). The
lab tests use their own lab (prefix `mpx`, subnet 10.245.0.0/24, state in /run/commbench-lab-mpx).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commbench.core.launch import free_port
from labkit import NEEDS_LAB, lab_env, run_commbench

MPIRUN = shutil.which("mpirun")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(MPIRUN is None, reason="Open MPI is not installed: apt-get install openmpi-bin"),
]

SWEEP = ["sweep", "--collective", "all_reduce", "-b", "1K", "-e", "64K", "-w", "1", "-n", "3"]
SIZES = 7  # 1K..64K, factor 2; all_reduce in place only with gloo
C10D_HOSTNAME = "hostname of the client socket cannot be retrieved"
ROOT_OK = ["--allow-run-as-root"] if os.geteuid() == 0 else []

PREFIX = "mpx"
LAB = lab_env(PREFIX)
HOSTS = [f"{PREFIX}node1", f"{PREFIX}node2"]
FIRST_ADDR = "10.245.0.1"
AGENT = f"{sys.executable} -m commbench lab rsh"  # Open MPI splits plm_rsh_agent at spaces


def terminal_env() -> dict[str, str]:
    """A person's shell: a real TERM, no CI, no launcher; a free rendezvous port."""
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    env.update({"TERM": "xterm-256color", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    return env


def mpirun_local(np_: int, out: Path, log: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [MPIRUN, *ROOT_OK, "--oversubscribe", "-np", str(np_), "-x", "MASTER_ADDR", "-x", "MASTER_PORT",
            "-x", "PATH", sys.executable, "-m", "commbench", *SWEEP, "--out", str(out), *extra]
    with open(log, "wb") as stdout:  # a file, as `mpirun ... > mpi.log`
        return subprocess.run(argv, env=terminal_env(), stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=180)


def check_rows(out: Path, world: int, hosts: set[tuple] | None = None) -> pd.DataFrame:
    df = pd.read_parquet(out)
    assert len(df) == SIZES and set(df.world_size) == {world} and set(df.launcher) == {"mpi"}
    assert sorted(df.size_bytes) == [1024 << i for i in range(SIZES)] and set(df.wrong) == {0}
    if hosts is not None:
        assert set(df.hosts.map(tuple)) == hosts
    return df


def test_two_ranks_log_to_a_file_in_plain_text(tmp_path):
    out, log = tmp_path / "np2.parquet", tmp_path / "mpi.log"
    proc = mpirun_local(2, out, log)
    assert proc.returncode == 0, proc.stderr
    text = log.read_bytes()
    assert b"\x1b" not in text, text[:300]  # before: 24 lines of cursor and colour codes
    assert b"launcher mpi  ranks 2" in text and f"({SIZES} rows)".encode() in text
    assert C10D_HOSTNAME not in proc.stderr
    check_rows(out, 2)


def test_three_ranks_and_progress_on_draws_on_mpiruns_terminal(tmp_path):
    """--progress on: the bar is drawn on the pseudo-terminal Open MPI hands its ranks, so the
    check above looks at a log that would hold escapes if auto did not turn the bar off."""
    out, log = tmp_path / "np3.parquet", tmp_path / "mpi.log"
    proc = mpirun_local(3, out, log, "--progress", "on")
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" in log.read_bytes()
    check_rows(out, 3)


# --- 2 hosts across the lab: mpirun inside the first host, its remote agent `commbench lab rsh`

needs_lab = pytest.mark.usefixtures("lab")


@pytest.fixture(scope="module")
def lab():
    for mark in NEEDS_LAB[1:]:  # root, iproute2
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    run_commbench(LAB, "lab", "down")
    up = run_commbench(LAB, "lab", "up", "--nodes", "2", "--rate", "1gbit", "--subnet", "10.245.0.0/24")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield
    finally:
        run_commbench(LAB, "lab", "down")


def on_first_host(*argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in LAB.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    return run_commbench(env, "lab", "exec", HOSTS[0], "--", *argv, timeout=timeout)


def lab_mpirun_args() -> list[str]:
    return [*ROOT_OK, "--mca", "plm_rsh_agent", AGENT, "--host", ",".join(HOSTS)]


@needs_lab
def test_two_lab_hosts_through_mpiruns_remote_agent(tmp_path):
    out = tmp_path / "lab.parquet"
    proc = on_first_host(MPIRUN, *lab_mpirun_args(), "-np", "2", "-x", f"MASTER_ADDR={FIRST_ADDR}",
                         "-x", f"MASTER_PORT={free_port()}", "-x", "PATH", "-x", "GLOO_SOCKET_IFNAME=eth0",
                         sys.executable, "-m", "commbench", *SWEEP, "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launcher mpi  ranks 2 (2 node(s) x 1)" in proc.stdout
    assert f" on {HOSTS[1]:>10s} " in proc.stdout  # rank 1 ran inside the second host
    assert C10D_HOSTNAME not in proc.stderr  # before the lab's nsswitch.conf: one line per peer
    df = check_rows(out, 2, {tuple(HOSTS)})
    assert set(df.nnodes) == {2} and set(df.iface) == {"eth0"}


def two_by_two(out: Path, *x: str) -> subprocess.CompletedProcess:
    """4 ranks, 2 on each lab host (ranks 0-1 on the first, 2-3 on the second), as a 2-node job
    with 2 GPUs a node would run."""
    hosts = ",".join(f"{h}:2" for h in HOSTS)
    return on_first_host(MPIRUN, *ROOT_OK, "--mca", "plm_rsh_agent", AGENT, "--host", hosts, "-np", "4",
                         "-x", f"MASTER_ADDR={FIRST_ADDR}", "-x", f"MASTER_PORT={free_port()}", "-x", "PATH",
                         "-x", "GLOO_SOCKET_IFNAME=eth0", *x, sys.executable, "-m", "commbench", "sweep",
                         "--collective", "all_reduce,all_gather", "--sizes", "4K,64K", "-n", "10", "-w", "2",
                         "--out", str(out))


@needs_lab
def test_a_slow_host_is_named_once_with_its_ranks_and_a_quiet_one_is_not(tmp_path):
    """Both ranks of the second host reach every collective 20 ms late (the test-only delay): half
    of the ranks, which no rank-by-rank rule can single out. The warning names the host."""
    proc = two_by_two(tmp_path / "slow.parquet", "-x", "COMMBENCH_TEST_FAULT=delay:2+3:20")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "straggler" in ln]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"commbench: warning: straggler: host {HOSTS[1]} arrives late: all 2 of its "
                               "ranks (2-3) at least +")
    assert "at 6 of 6 points" in lines[0]  # all_reduce 2 sizes, all_gather 2 sizes x 2 placements
    effect_ms = float(lines[0].split("at least +", 1)[1].split(" ms", 1)[0])
    assert effect_ms >= 16
    df = pd.read_parquet(tmp_path / "slow.parquet")
    for skew, where in zip(df.rank_skew_us, df.rank_host):
        assert min(skew[2], skew[3]) >= 16_000 > max(skew[0], skew[1])
        assert list(where) == [0, 0, 1, 1]  # each rank's host, as an index into hosts
    assert set(df.hosts.map(tuple)) == {tuple(HOSTS)}
    # the report judges the file again: the same finding, as a fact of the run
    report = run_commbench(LAB, "report", str(tmp_path / "slow.parquet"), "--out", str(tmp_path / "slow.html"))
    assert report.returncode == 0, report.stderr
    assert f"host {HOSTS[1]} arrives late: all 2 of its ranks (2-3)" in (tmp_path / "slow.html").read_text()

    quiet = two_by_two(tmp_path / "quiet.parquet")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "straggler" not in quiet.stdout + quiet.stderr


RECORDED = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_gather_v2.19.6_2node_roce.txt"
STAND_IN = r'''#!{python}
# A stand-in for an MPI build of all_gather_perf under mpirun: every rank notes the host it runs on;
# rank 0 waits for all of them and prints the recorded 2-host output (tests/data/nccl-tests,
# spark-101/102 over RoCE) with the Rank lines naming the hosts the ranks really ran on.
import os, socket, sys, time
MARKS, RECORDED = {marks!r}, {recorded!r}
if "-h" in sys.argv[1:]:
    print("USAGE: all_gather_perf\n\t[-b,--minbytes <min size in bytes>] \n\t[-h,--help]")
    sys.exit(0)
rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
with open(os.path.join(MARKS, "rank%d" % rank), "w") as f:
    f.write(socket.gethostname())
if rank != 0:
    sys.exit(0)
deadline = time.monotonic() + 60
while len(os.listdir(MARKS)) < size and time.monotonic() < deadline:
    time.sleep(0.05)
hosts = [open(os.path.join(MARKS, "rank%d" % r)).read() for r in range(size)]
for line in open(RECORDED).read().splitlines():
    if line.startswith("#  Rank"):
        r = int(line.split()[2])
        head, tail = line.split(" on ", 1)
        line = "%s on %10s %s" % (head, hosts[r], tail.split(None, 1)[1])
    print(line, flush=True)
'''


@needs_lab
def test_nccl_tests_run_under_mpirun_across_two_lab_hosts(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    binary = tmp_path / "bin" / "all_gather_perf"
    binary.parent.mkdir()
    binary.write_text(STAND_IN.format(python=sys.executable, marks=str(marks), recorded=str(RECORDED)))
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "nccl.parquet"
    launcher_args = [f"--launcher-arg={a}" for a in lab_mpirun_args()]
    proc = on_first_host(sys.executable, "-m", "commbench", "nccl-tests", "run", "--launcher", "mpirun", "--np", "2",
                         *launcher_args, "--out", str(out), str(binary), "--", "-b", "512M", "-e", "16G", "-f", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.read_text() for p in marks.iterdir()) == HOSTS  # one rank on each lab host
    assert "# Collective test concluded: all_gather_perf" in proc.stdout
    df = pd.read_parquet(out)
    assert len(df) == 12 and set(df.collective) == {"all_gather"} and set(df.world_size) == {2}
    assert set(df.hosts.map(tuple)) == {tuple(HOSTS)}
    r = df[(df.size_bytes == 17179869184) & ~df.in_place].iloc[0]
    assert r.time_us == pytest.approx(361820) and r.algbw_GBps == pytest.approx(47.48)
