"""Bounded ends on three lab hosts (root): how a run is stopped when its ranks cannot stop themselves.

- SIGTERM to `lab run` whose three ranks are deaf (SIGSTOPped): every rank signalled at once,
  waited for together, killed at one shared deadline, and named while waited for and when killed;
- SIGTERM to `lab run` while every link is down (the ranks blocked inside gloo, where Python's own
  handler never runs): each rank leaves by itself 5 s later, saying so; nobody needs killing;
- `lab down` under a running `lab run`: it names what it cuts, the ranks stop and keep their rows.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from functools import partial

import psutil
import pytest

import helpers  # tests/helpers.py
from commbench.core.results import read_results
from labkit import NEEDS_LAB, LabRun, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cx1"
ENV = lab_env(PREFIX)
SUBNET = "10.250.1"
TIMEOUT = 10
HOSTS = [f"{PREFIX}node{i}" for i in (1, 2, 3)]
RANKS = ", ".join(f"rank {r} on {h}" for r, h in enumerate(HOSTS))
SWEEP = ["sweep", "--collective", "allreduce", "-b", "64K", "-e", "64K", "-R", "1000", "-n", "5", "-w", "1",
         "--timeout", str(TIMEOUT)]

cb = partial(helpers.cb, env=ENV, timeout=60)


@pytest.fixture
def lab():
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "3", "--rate", "1gbit", "--subnet", f"{SUBNET}.0/24")
    assert up.returncode == 0, up.stdout + up.stderr
    yield
    cb("lab", "down")


class Run(LabRun):
    """`lab run -- commbench ...` on this file's lab (labkit.LabRun), its ranks known."""

    def __init__(self, *args: str):
        super().__init__(ENV, *args)

    def first_point(self) -> list[psutil.Process]:
        """Wait until a first point is printed; the rank processes."""
        end = time.monotonic() + 90
        while not any(re.match(r"^\s+65536\s", line) for line in self.out):
            assert time.monotonic() < end and self.proc.poll() is None, self.text()
            time.sleep(0.05)
        return psutil.Process(self.proc.pid).children()


def alive(procs: list[psutil.Process]) -> list[int]:
    """The pids still running (a zombie has ended)."""
    left = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.mark.failure(
    row="sigterm-lab-run-deaf-ranks",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="SIGTERM to `commbench lab run` whose 3 ranks are deaf (SIGSTOPped)",
    does="every rank is signalled at once and waited for together: after 1 s `lab run: SIGTERM sent to every rank; "
         "waiting up to 10 s for rank 0 on cx1node1, rank 1 on cx1node2, rank 2 on cx1node3`, at 10 s `killed rank "
         "0 on cx1node1, ...`; exit 143; no process of the run left within 15 s (was 30 s a rank, one after the "
         "other)",
)
def test_sigterm_to_lab_run_with_deaf_ranks_kills_them_together_and_names_them(lab, tmp_path):
    run = Run(*SWEEP, "--out", str(tmp_path / "deaf.parquet"))
    ranks = run.first_point()
    assert len(ranks) == 3, run.text()
    for p in ranks:
        p.send_signal(signal.SIGSTOP)
    started = time.monotonic()
    try:
        run.proc.send_signal(signal.SIGTERM)
        code = run.finish(timeout=30)
    finally:
        for p in ranks:
            if alive([p]):
                p.send_signal(signal.SIGCONT)
    took = time.monotonic() - started
    print(f"deaf ranks: lab run ended {took:.1f} s after SIGTERM")
    err = "".join(run.err)
    assert code == 143, run.text()
    assert took < 15 and not alive(ranks), (took, run.text())
    assert f"commbench: lab run: SIGTERM sent to every rank; waiting up to 10 s for {RANKS}\n" in err, err
    assert re.search(rf"^commbench: lab run: killed {RANKS} \(still running 10 s after SIGTERM", err, re.M), err


@pytest.mark.failure(
    row="sigterm-lab-run-links-down",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="SIGTERM to `commbench lab run` while every host's link is down (the ranks blocked inside gloo)",
    does="each rank leaves by itself 5 s later (`asked to stop (SIGTERM) 5 s ago and still blocked in all_reduce "
         "...; leaving without it`), exit 143, nobody killed; the finished rows stay readable",
)
def test_sigterm_with_every_link_down_ranks_leave_by_themselves(lab, tmp_path):
    out = tmp_path / "cut.parquet"
    run = Run(*SWEEP, "--out", str(out))
    ranks = run.first_point()
    for i in (1, 2, 3):
        subprocess.run(["ip", "link", "set", f"{PREFIX}veth{i}", "down"], check=True)
    time.sleep(1.0)  # every rank now waits inside a collective that no packet reaches
    started = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    code = run.finish(timeout=30)
    took = time.monotonic() - started
    print(f"links down: lab run ended {took:.1f} s after SIGTERM")
    err = "".join(run.err)
    assert code == 143, run.text()
    assert 4 < took < 10 and not alive(ranks), (took, run.text())  # the rank's own 5 s, not lab run's 10 s
    left = re.findall(r"^commbench: rank (\d) on (\S+): asked to stop \(SIGTERM\) \d+ s ago and still blocked in "
                      r".*; leaving without it", err, re.M)
    assert left, err
    assert "lab run: killed" not in err, err
    assert len(read_results([out])) >= 1


@pytest.mark.failure(
    row="lab-down-under-lab-run",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="`commbench lab down` while a `lab run` is running",
    does="one line names what it cuts (`lab down: cutting what still runs on the lab's hosts: `... sweep ...` on "
         "cx1node1, cx1node2, cx1node3, started by `commbench lab run` (pid N)`), SIGTERM to all of it while the "
         "network is still up (SIGKILL 10 s later, named); the ranks keep their rows, `lab run` exits 143; "
         "every process gone within --timeout + 60 s (a few seconds)",
)
def test_lab_down_under_a_running_lab_run_names_it_and_stops_it(lab, tmp_path):
    out = tmp_path / "down.parquet"
    run = Run(*SWEEP, "--out", str(out))
    ranks = run.first_point()
    started = time.monotonic()
    down = cb("lab", "down")
    code = run.finish(timeout=TIMEOUT + 60)
    took = time.monotonic() - started
    print(f"lab down: the run ended {took:.1f} s after lab down started")
    assert down.returncode == 0, down.stdout + down.stderr
    cut = [line for line in down.stderr.splitlines() if "cutting" in line]
    assert len(cut) == 1 and re.match(
        rf"commbench: lab down: cutting what still runs on the lab's hosts: `\S*python\S* -m commbench sweep .*` on "
        rf"{', '.join(HOSTS)}, started by `commbench lab run` \(pid {run.proc.pid}\); SIGTERM now", cut[0]), down.stderr
    assert "killed" not in down.stderr, down.stderr
    assert code == 143, run.text()
    assert took < TIMEOUT + 60 and not alive(ranks) and run.proc.poll() is not None, (took, run.text())
    kept = read_results([out])
    assert len(kept) >= 1 and (kept.wrong == 0).all()
    assert re.search(rf"{len(kept)} finished rows kept in {re.escape(str(out))}", run.text()), run.text()
