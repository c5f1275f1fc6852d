"""A rank lost mid-sweep under torchrun and across lab hosts, a lab link taken down mid-sweep, and
SIGTERM to `commbench lab run` (what scancel does): the survivors stop within --timeout + 15 s, say
why, keep a valid file with every finished point, and leave no process behind.

The local spawner's cases (kill -9 of a rank, Ctrl-C, SIGTERM) are in test_sweep_ranks.py. The lab
tests use their own instance (prefix `cro`, subnet 10.229.0.0/24) and never touch another.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pandas as pd
import psutil
import pytest

import helpers  # tests/helpers.py
from test_sweep_ranks import (LONG_SWEEP, assert_no_processes_left, clean_env, kept_rows, kill_quietly, start,
                              wait_for_rows)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]



def needs_lab(test):
    """Root and iproute2, and the module's lab instance."""
    test = pytest.mark.usefixtures("lab")(test)
    test = pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                              reason="iproute2 (ip, tc) is not installed: apt-get install iproute2")(test)
    return pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, veth, tc)")(test)


def rank_pids(stdout: str) -> dict[int, int]:
    """rank -> pid, from rank 0's header."""
    return {int(r): int(p) for r, p in re.findall(r"^#\s+Rank\s+(\d+) Pid\s+(\d+)", stdout, re.MULTILINE)}


def wait_for_ranks(stdout: Path, n: int, proc: subprocess.Popen, timeout: float = 90) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited early with {proc.returncode}"
        pids = rank_pids(stdout.read_text())
        if len(pids) == n:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"no header with {n} ranks after {timeout} s")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(text in a for a in (p.info["cmdline"] or [])):
            found.append(p)
    return found


def assert_valid_results(out: Path, before: int, err: str) -> pd.DataFrame:
    df = pd.read_parquet(out)
    assert before <= len(df) < 100, (before, len(df))  # every finished point; it really was cut short
    assert (df.wrong == 0).all() and df.time_us.notna().all()
    assert kept_rows(err, out) == len(df)
    assert not re.search(r'File ".*/commbench/', err), err  # no traceback from a rank
    return df


# ---------------------------------------------------------------- torchrun


@pytest.mark.failure(
    row="rank-killed-mid-sweep-under",
    section="Lost ranks and broken links",
    failure="a rank killed mid-sweep under torchrun",
    does="rank 0's collective fails at once and it says `collective failed: lost rank 1 on HOST (pid N, ADDR)`, "
         "keeps the file and ends with 3 (143 if torchrun's own SIGTERM reaches it first); torchrun stops the rest "
         "and exits with its own code (1), naming rank 1 and SIGKILL; all within --timeout + 15 s; no orphan",
)
@pytest.mark.failure(
    row="launcher-s-sigterm-after-rank",
    section="Lost ranks and broken links",
    failure="a launcher's SIGTERM after a rank already failed (torchrun stops survivors at once)",
    does="ignored: the rank finishes its report (rows kept) and exits with its own code 3, not killed by the signal",
    note="torchrun reports rank 0's exitcode",
)
def test_torchrun_rank_killed_mid_sweep(tmp_path):
    out = tmp_path / "torchrun.parquet"
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(stdout, "w") as so, open(stderr, "w") as se:
        proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                                 "-m", "commbench", *LONG_SWEEP, "--timeout", "20", "--out", str(out)],
                                stdout=so, stderr=se, env=clean_env(), start_new_session=True)
    try:
        pids = wait_for_ranks(stdout, 2, proc)
        before = wait_for_rows(proc, out, stderr)
        os.kill(pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        code = proc.wait(60)
        elapsed = time.monotonic() - t0
    finally:
        kill_quietly(proc)
    err = stderr.read_text()
    assert code != 0, err  # torchrun's own code (1): a worker failed
    assert elapsed < 20 + 15, elapsed
    assert_valid_results(out, before, err)
    # torchrun names the lost rank; rank 0 ends with 3 (its collective failed) unless torchrun's SIGTERM
    # reached it first (143), and when it reports the failure itself it names the lost rank too.
    assert re.search(rf"rank\s*: 1 \(local_rank: 1\)\s*\n\s*exitcode\s*: -9 \(pid: {pids[1]}\)", err), err
    rank0 = re.search(rf"exitcode\s*: (-?\d+) \(pid: {pids[0]}\)", err)
    assert rank0 and int(rank0.group(1)) in (3, 143), err
    if int(rank0.group(1)) == 3:
        lost = rf"commbench: rank 0 on \S+: collective failed: lost rank 1 on \S+ \(pid {pids[1]}, "
        assert re.search(lost, err), err
    # no orphans: torchrun starts each worker in its own session, so look for them by pid and by argv
    deadline = time.monotonic() + 10
    while (any(alive(p) for p in pids.values()) or processes_mentioning(str(out))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids.values()) and processes_mentioning(str(out)) == []
    assert_no_processes_left(proc.pid)


# ---------------------------------------------------------------- a stopped rank that wakes up


@pytest.mark.failure(
    row="rank-sigstopped-past-timeout-then",
    section="Lost ranks and broken links",
    failure="a rank SIGSTOPped past --timeout, then resumed after its peers left (local ranks and `pairs` in the lab)",
    does="rank 0: `roll call: rank 1 on HOST is hung`, exit 3. The resumed rank sees its heartbeat thread come back "
         "late (a beat due every 0.5 s, 5 s or more and half --timeout late: it did not run) and says so instead of "
         "naming the peers it finds gone: `collective failed after this process was suspended for 8 s (SIGSTOP, a "
         "debugger or a frozen host), longer than --timeout 3 s: the other ranks went on without it`; never `lost "
         "rank 0`; the late answers to its peers' control-plane reads (their sockets closed) print nothing. torch's "
         "own C++ warnings stay visible (c10d's failed store read of the peer that left, with its native frames): "
         "TORCH_CPP_LOG_LEVEL=ERROR hides them, and every other C++ warning with them (README, the lab's DNS note)",
)
def test_a_rank_stopped_past_timeout_names_itself_on_waking_not_the_peer_that_left(tmp_path):
    """SIGSTOP rank 1 of a local sweep: rank 0 names it hung and stops; rank 1, continued after rank
    0 has gone, finds its peer's connection closed. That is its own absence, and it says so: no
    "lost rank 0", and no traceback from the queued control-plane reads it answers late."""
    out = tmp_path / "stopped.parquet"
    proc, stdout, stderr = start([*LONG_SWEEP, "--timeout", "3", "--out", str(out)], tmp_path)
    try:
        pids = wait_for_ranks(stdout, 2, proc)
        before = wait_for_rows(proc, out, stderr)
        os.kill(pids[1], signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 30
            while not re.search(r"roll call: rank 1 on \S+ is hung", stderr.read_text()):
                assert time.monotonic() < deadline, stderr.read_text()
                time.sleep(0.1)
            time.sleep(3)  # rank 0 leaves; rank 1 stays stopped past SUSPENDED_S
        finally:
            os.kill(pids[1], signal.SIGCONT)
        code = proc.wait(60)
    finally:
        kill_quietly(proc)
    err = stderr.read_text()
    assert code == 3, err
    assert_valid_results(out, before, err)
    m = re.search(r"^commbench: rank 1 on \S+: collective failed after this process was suspended for (\d+) s "
                  r"\(SIGSTOP, a debugger or a frozen host\), longer than --timeout 3 s: the other ranks went on "
                  r"without it: ", err, re.MULTILINE)
    assert m and int(m.group(1)) >= 5, err
    assert not re.search(r"rank 0 on \S+ (?:\(\S+\) )?is (?:gone|hung|unreachable)|lost (?:rank 0|a rank)", err), err
    assert "Traceback" not in err, err
    assert_no_processes_left(proc.pid)


# ---------------------------------------------------------------- the lab

PREFIX = "cro"
SUBNET = "10.229.0.0/24"
LAB_ENV = clean_env(COMMBENCH_LAB_PREFIX=PREFIX, COMMBENCH_LAB_DIR=f"/run/commbench-lab-{PREFIX}")
TIMEOUT = 5  # 2 ranks join well within it; a link taken down costs one TIMEOUT, a roll call and lab run's 10 s linger


cb = partial(helpers.cb, env=LAB_ENV)  # python -m commbench in a subprocess (tests/helpers.py)


@pytest.fixture(scope="module")
def lab():
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--subnet", SUBNET)
    assert up.returncode == 0, up.stderr
    try:
        yield
    finally:
        subprocess.run(["ip", "link", "set", f"{PREFIX}veth2", "up"], capture_output=True)
        cb("lab", "down")


def host_mtus() -> dict[str, int]:
    return {h["host"]: h["mtu"] for h in json.loads(cb("lab", "status", "--json").stdout)["hosts"]}


def lab_sweep(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path, Path, Path]:
    out = tmp_path / "lab.parquet"
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(stdout, "w") as so, open(stderr, "w") as se:
        proc = subprocess.Popen([sys.executable, "-m", "commbench", "lab", "run", "--", sys.executable, "-m",
                                 "commbench", *LONG_SWEEP, "--timeout", str(TIMEOUT), *extra, "--out", str(out)],
                                stdout=so, stderr=se, env=LAB_ENV, start_new_session=True)
    return proc, out, stdout, stderr


@needs_lab
@pytest.mark.failure(
    row="rank-second-lab-host-killed",
    section="Lost ranks and broken links",
    failure="the rank on the second lab host killed mid-sweep",
    does="rank 0: `lost rank 1 on cronode2 (pid N, 10.229.0.2)`, exit 3 within --timeout + 15 s (at once: the peer's "
         "kernel resets the connection); `lab run` exits 3; file valid",
)
def test_lab_rank_on_the_second_host_killed(tmp_path):
    proc, out, stdout, stderr = lab_sweep(tmp_path)
    try:
        pids = wait_for_ranks(stdout, 2, proc)
        before = wait_for_rows(proc, out, stderr)
        assert pids[1] in {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        os.kill(pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        code = proc.wait(TIMEOUT + 30)
        elapsed = time.monotonic() - t0
    finally:
        kill_quietly(proc)
    err = stderr.read_text()
    assert code == 3, err
    assert elapsed < TIMEOUT + 15, elapsed
    assert "Traceback" not in err
    assert re.search(rf"commbench: rank 0 on {PREFIX}node1: collective failed: lost rank 1 on {PREFIX}node2 "
                     rf"\(pid {pids[1]}, 10\.229\.0\.2\)", err), err
    assert_valid_results(out, before, err)
    assert_no_processes_left(proc.pid)


@needs_lab
@pytest.mark.failure(
    row="link-taken-down-mid-sweep",
    section="Lost ranks and broken links",
    failure="a link taken down mid-sweep (the lab's bridge port of host 2)",
    does="no error comes back, so every collective is bounded by --timeout: `collective failed: no answer within "
         "--timeout 10 s (a rank, its host or the link stopped responding)`, exit 3 on every rank and from `lab "
         "run`, within --timeout + 15 s, also on the fresh connections an `--mtu` pass opens (torch's own default "
         "there is 30 minutes); file valid; the MTU the run set is put back",
)
@pytest.mark.failure(row="mtu-change-left-behind")
def test_lab_link_taken_down_mid_sweep(tmp_path):
    # with an MTU axis as well: the MTU set for the pass is put back on this exit path too
    proc, out, stdout, stderr = lab_sweep(tmp_path, "--mtu", "9000", "--iface", "eth0")
    try:
        wait_for_ranks(stdout, 2, proc)
        before = wait_for_rows(proc, out, stderr)
        assert host_mtus() == {f"{PREFIX}node1": 9000, f"{PREFIX}node2": 9000}
        subprocess.run(["ip", "link", "set", f"{PREFIX}veth2", "down"], check=True)  # host 2's switch port
        t0 = time.monotonic()
        code = proc.wait(TIMEOUT + 30)
        elapsed = time.monotonic() - t0
    finally:
        subprocess.run(["ip", "link", "set", f"{PREFIX}veth2", "up"], check=True)
        kill_quietly(proc)
    err = stderr.read_text()
    assert code == 3, err
    assert elapsed < TIMEOUT + 15, elapsed
    assert "Traceback" not in err
    assert re.search(rf"commbench: rank 0 on {PREFIX}node1: collective failed: no answer within --timeout "
                     rf"{TIMEOUT} s", err), err
    assert_valid_results(out, before, err)
    assert_no_processes_left(proc.pid)
    assert host_mtus() == {f"{PREFIX}node1": 1500, f"{PREFIX}node2": 1500}


@needs_lab
@pytest.mark.failure(
    row="sigterm-commbench-lab-run-what",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="SIGTERM to `commbench lab run` (what scancel or a time limit sends)",
    does="forwarded to every rank; ranks stop and keep the file; `lab run` exits 143; the MTU a `--mtu` run set is "
         "restored",
)
@pytest.mark.failure(row="mtu-change-left-behind")
def test_lab_run_sigterm_stops_the_ranks(tmp_path):
    proc, out, stdout, stderr = lab_sweep(tmp_path, "--mtu", "9000", "--iface", "eth0")
    try:
        pids = wait_for_ranks(stdout, 2, proc)
        before = wait_for_rows(proc, out, stderr)
        os.kill(proc.pid, signal.SIGTERM)  # lab run only, as scancel or a job's time limit would
        code = proc.wait(30)
    finally:
        kill_quietly(proc)
    err = stderr.read_text()
    assert code == 143, err
    assert "Traceback" not in err
    assert_valid_results(out, before, err)
    assert not any(alive(p) for p in pids.values())
    assert_no_processes_left(proc.pid)
    assert host_mtus() == {f"{PREFIX}node1": 1500, f"{PREFIX}node2": 1500}


SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scancel", "scontrol")


def _missing_slurm_tools() -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin"
    return [t for t in SLURM_TOOLS if shutil.which(t, path=path) is None]


@needs_lab
@pytest.mark.skipif(bool(_missing_slurm_tools()), reason=f"Slurm/munge not installed "
                    f"({', '.join(_missing_slurm_tools())} missing): apt-get install slurm-wlm munge")
@pytest.mark.failure(
    row="scancel-lab-slurm-job-mid",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="`scancel` of a lab Slurm job mid-sweep (the shipped slurm/commbench.sbatch)",
    does="Slurm sends SIGTERM to every task: each rank stops at its point and exits 143 (srun reports it per task), "
         "rank 0 keeps the file with every finished point; every process of the job is gone within --timeout + 15 s",
)
def test_lab_slurm_job_scancelled_mid_sweep(tmp_path):
    up = cb("lab", "slurm", "up")
    assert up.returncode == 0, up.stderr
    conf = re.search(r"SLURM_CONF=(\S+)", up.stdout).group(1)
    try:
        results = tmp_path / "results"
        args = " ".join([a for a in LONG_SWEEP if a != "sweep"] + ["--timeout", str(TIMEOUT)])
        env = {**{k: v for k, v in LAB_ENV.items() if not k.startswith("SLURM_")},
               "COMMBENCH_ARGS": args, "RESULTS_DIR": str(results), "COMMBENCH": f"{sys.executable} -m commbench"}
        sub = subprocess.run([sys.executable, "-m", "commbench", "lab", "slurm", "submit", str(ROOT / "slurm" /
                              "commbench.sbatch")], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        job = re.search(r"Submitted batch job (\d+)", sub.stdout).group(1)
        out, log = results / f"slurm-{job}.parquet", tmp_path / f"slurm-{job}.out"
        deadline = time.monotonic() + 90
        before = 0
        while before == 0 and time.monotonic() < deadline:
            try:
                before = len(pd.read_parquet(out))
            except (OSError, ValueError):
                time.sleep(0.2)
        assert before >= 1, log.read_text() if log.exists() else "no job output"
        cancel = subprocess.run([sys.executable, "-m", "commbench", "lab", "exec", f"{PREFIX}node1", "--", "scancel",
                                 job], env={**LAB_ENV, "SLURM_CONF": conf}, capture_output=True, text=True, timeout=60)
        assert cancel.returncode == 0, cancel.stderr
        t0 = time.monotonic()
        while time.monotonic() - t0 < TIMEOUT + 15 and (processes_mentioning(str(out))
                                                        or log.read_text().count("Exited with exit code") < 2):
            time.sleep(0.2)
        elapsed = time.monotonic() - t0
        text = log.read_text()
        assert elapsed < TIMEOUT + 15, text
        assert processes_mentioning(str(out)) == []  # every rank of the job ended
        # Slurm's SIGTERM reached both ranks: each stopped at its point, rank 0 kept the file
        assert f"{PREFIX}node1: task 0: Exited with exit code 143" in text, text
        assert f"{PREFIX}node2: task 1: Exited with exit code 143" in text, text
        assert "Traceback" not in text
        assert_valid_results(out, before, text)
    finally:
        cb("lab", "slurm", "down")
