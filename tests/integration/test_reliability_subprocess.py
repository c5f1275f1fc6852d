"""`commbench nccl-tests run` against hostile stand-in binaries (issue #23, subprocess output and
time): one that prints without end, one that also ignores SIGTERM (with a child that does too),
one that floods stderr, one that prints one endless line without a newline, one whose `-h` prints
without end and one whose `-h` never answers.

Like tests/integration/test_nccl_tests_run.py the binaries are Python programs with a shebang
that print a recorded nccl-tests output (tests/data/nccl-tests): its header and first three rows,
then they misbehave. commbench runs in a subprocess with its stdout and stderr in files; each test
has a hard deadline, samples commbench's peak RSS with psutil, and checks the exit code, the last
stderr line, no traceback, the sizes of the log and of what was echoed, the rows kept, and that
no process of the binary's group is left.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pandas as pd
import psutil
import pytest

from commbench.core.errors import CommbenchError
from commbench.core.pump import OUTPUT_CAP
from commbench.core.results import read_results

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt"
HARD_DEADLINE = 60.0  # every run ends within this, or the test fails (and kills it)
MEMORY_LIMIT = 1.5 * 1024 ** 3
SLACK = 1024 * 1024  # what commbench's own lines, the cut marks and stderr's tail add to a cap

HOSTILE = r'''#!{python}
# A hostile stand-in for an nccl-tests binary: HELP says how it answers -h, RUN how it runs.
import os, signal, subprocess, sys, time
HELP, RUN, MARK, PIDS, SAMPLE = {help!r}, {run!r}, {mark!r}, {pids!r}, {sample!r}
with open(PIDS, "a") as fh:
    fh.write(f"{{os.getpid()}}\n")
out = sys.stdout
if "-h" in sys.argv[1:]:
    if HELP == "flood":  # a usage text without end (and without -J in it)
        while True:
            out.write("USAGE: all_reduce_perf [-b,--minbytes <min size in bytes>] " * 50 + "\n")
    if HELP == "hang":  # never answers, deaf to SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    print("USAGE: all_reduce_perf\n\t[-b,--minbytes <min size in bytes>]\n\t[-h,--help]")
    sys.exit(0)
if RUN == "flood-deaf":  # ignores SIGTERM, and so does a child it starts in its group
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                      "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                      "while True: sys.stderr.write('child ' * 100 + '\\n')", MARK])
rows = 0
for line in open(SAMPLE).read().splitlines():
    if line[:12].strip().isdigit():
        rows += 1
        if RUN != "ok" and rows > 3:
            break
    out.write(line + "\n")
out.flush()
if RUN in ("flood", "flood-deaf"):
    block = ("flood " * 600 + "\n") * 64
    while True:
        out.write(block)
if RUN == "nccl-info-flood":  # the longest lines still parsed, each one slow to search
    block = "NCCL INFO " * 800 + "\n"
    while True:
        out.write(block)
if RUN == "stderr-flood":
    block = ("warn flood " * 300 + "\n") * 64
    while True:
        sys.stderr.write(block)
if RUN == "bad-rows":  # lines shaped like rows that are not
    for _ in range(500):
        out.write("         256            64     float     sum      -1    fast    0.01    0.01       0\n")
if RUN == "long-line":
    block = "x" * (1 << 20)
    while True:
        out.write(block)
sys.exit(0)
'''


def hostile(tmp_path: Path, run: str, help: str = "plain") -> tuple[Path, str, Path]:
    """The binary, the mark on its child's command line, the file each of its processes adds its pid to."""
    mark = f"commbench-hostile-{uuid.uuid4().hex}"
    pids = tmp_path / "pids"
    path = tmp_path / "bin" / "all_reduce_perf"
    path.parent.mkdir(exist_ok=True)
    path.write_text(HOSTILE.format(python=sys.executable, help=help, run=run, mark=mark, pids=str(pids),
                                   sample=str(SAMPLE)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path, mark, pids


class Run:
    """commbench in a subprocess, its stdout and stderr in files, its peak RSS sampled."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.out_file, self.err_file = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
        with open(self.out_file, "wb") as out, open(self.err_file, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "commbench", *args], stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL)
        self.started = time.monotonic()
        self.peak_rss = 0
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        try:
            me = psutil.Process(self.proc.pid)
            while self.proc.poll() is None:
                self.peak_rss = max(self.peak_rss, me.memory_info().rss)
                time.sleep(0.02)
        except psutil.Error:
            pass

    def wait(self) -> float:
        """The exit, within HARD_DEADLINE (else the test fails); the seconds it took."""
        try:
            self.proc.wait(timeout=max(1.0, HARD_DEADLINE - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"commbench still running after {HARD_DEADLINE:g} s")
        self._sampler.join(timeout=5)
        return time.monotonic() - self.started

    @property
    def stderr(self) -> str:
        return self.err_file.read_text(errors="replace")


def gone(mark: str, pids: Path) -> list[str]:
    """Processes still alive of the binary: by pid, by process group (each was a group's leader) and
    by the mark on its child's command line."""
    recorded = {int(p) for p in pids.read_text().split()} if pids.exists() else set()
    left = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if p.pid in recorded or os.getpgid(p.pid) in recorded or \
                    any(mark in part for part in (p.info["cmdline"] or [])):
                left.append(f"{p.pid} {p.info['cmdline']}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    return left


def no_process_left(mark: str, pids: Path) -> None:
    deadline = time.monotonic() + 5  # a SIGKILLed process may take a moment to leave the table
    while (left := gone(mark, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []
    assert pids.exists()  # the binary really ran


def common_checks(run: Run, out: Path, rows: int, last: str) -> None:
    err = run.stderr
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"commbench: {last}"), err[-2000:]
    assert sum("commbench: " in line and ("timed out" in line or "interrupted" in line)
               for line in err.splitlines()) <= 1
    assert run.peak_rss < MEMORY_LIMIT, run.peak_rss
    assert run.out_file.stat().st_size <= OUTPUT_CAP + SLACK
    assert run.err_file.stat().st_size <= OUTPUT_CAP + SLACK
    log = out.with_suffix(".log")
    assert log.exists() and log.stat().st_size <= OUTPUT_CAP + SLACK
    assert len(pd.read_parquet(out)) == rows


@pytest.mark.parametrize("mode", ["flood", "flood-deaf", "stderr-flood", "long-line", "nccl-info-flood"])
@pytest.mark.failure(
    row="nccl-tests-binary-prints-without",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="an nccl-tests binary that prints without end (`nccl-tests run --timeout 3`)",
    does="times out at 3 s however fast it prints: `all_reduce_perf timed out after 3 s: its process group was "
         "killed; 6 rows kept in FILE` as the last line, exit 3; the rows printed before kept; log and echo cut at "
         "32 MiB with one line saying so; commbench under 1.5 GB; no process of its group left",
    cases="flood",
)
@pytest.mark.failure(
    row="also-ignores-sigterm-child-group",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="... that also ignores SIGTERM, with a child in its group that ignores it and floods stderr",
    does="SIGKILL to the group after the 5 s grace; as above, within --timeout + 5 s + start-up",
    cases="flood-deaf",
)
@pytest.mark.failure(
    row="floods-stderr",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="... that floods stderr",
    does="stderr's echo and the log cut at 32 MiB each; the failure report shows its last 20 lines, each cut at "
         "1000 characters; as above",
    cases="stderr-flood",
)
@pytest.mark.failure(
    row="prints-endless-line-without-newline",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="... that prints one endless line without a newline",
    does="memory holds one 64 KiB line: the line is cut with a mark, the rest dropped up to its newline; as above",
    cases="long-line",
)
def test_a_binary_that_prints_without_end_times_out_and_keeps_its_rows(tmp_path, mode):
    binary, mark, pids = hostile(tmp_path, mode)
    out = tmp_path / "r.parquet"
    run = Run(tmp_path, "nccl-tests", "run", "--timeout", "3", "--out", str(out), str(binary))
    took = run.wait()
    assert run.proc.returncode == 3, run.stderr[-2000:]
    assert took < 3 + 5 + 20  # the timeout, the SIGTERM grace, a start on a busy machine
    common_checks(run, out, 6, "all_reduce_perf timed out after 3 s: its process group was killed; 6 rows kept")
    log = out.with_suffix(".log").read_text(errors="replace")
    if mode in ("flood", "flood-deaf", "stderr-flood"):
        assert log.count("[commbench: output cut here, after 32 MiB; the rest is not kept]") == 1
        echoed = run.err_file if mode == "stderr-flood" else run.out_file
        assert "[commbench: output cut here" in echoed.read_text(errors="replace")
    elif mode == "long-line":
        assert "[commbench: line cut at 64 KiB; the rest of it is dropped]" in log
    no_process_left(mark, pids)


@pytest.mark.failure(
    row="sigterm-nccl-tests-run-no",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="SIGTERM to `nccl-tests run` (no --timeout) while a binary deaf to SIGTERM floods",
    does="exit 143, `interrupted: ...; 6 rows kept`, within the 5 s grace; a second SIGTERM during the grace is "
         "held, not a hard death; no process left",
)
def test_sigterm_stops_a_deaf_flooding_binary_and_keeps_its_rows(tmp_path):
    binary, mark, pids = hostile(tmp_path, "flood-deaf")
    out = tmp_path / "s.parquet"
    run = Run(tmp_path, "nccl-tests", "run", "--out", str(out), str(binary))
    while time.monotonic() - run.started < 30 and run.proc.poll() is None:
        try:  # read_results: the file and its live parts (the file alone holds only the first batch)
            if len(read_results([out])) == 6 and out.with_suffix(".log").stat().st_size > 10 * 1024 * 1024:
                break  # the rows are in and the flood is on
        except (OSError, ValueError, CommbenchError):
            pass
        time.sleep(0.1)
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    run.wait()
    assert run.proc.returncode == 143, run.stderr[-2000:]
    assert time.monotonic() - sent < 5 + 15  # the SIGTERM grace, then SIGKILL
    common_checks(run, out, 6, "interrupted: ")
    no_process_left(mark, pids)


@pytest.mark.failure(
    row="h-probe-does-binary-know",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="the `-h` probe (does the binary know `-J`?) prints without end",
    does="it reads 1 MiB at most and stops the probe; a cut usage text says no `-J`; the run goes on from the text "
         "output, exit 0",
)
def test_a_help_text_without_end_is_cut_and_the_run_goes_on(tmp_path):
    binary, mark, pids = hostile(tmp_path, "ok", help="flood")
    out = tmp_path / "h.parquet"
    run = Run(tmp_path, "nccl-tests", "run", "--timeout", "40", "--out", str(out), str(binary))
    took = run.wait()
    assert run.proc.returncode == 0, run.stderr[-2000:]
    assert took < 40
    assert "Traceback" not in run.stderr and "-J" not in run.stderr  # the cut usage text did not list -J
    assert "50 rows from the text output" in run.out_file.read_text()
    assert run.peak_rss < MEMORY_LIMIT, run.peak_rss
    assert len(pd.read_parquet(out)) == 50
    assert len(pids.read_text().split()) == 2  # the probe and the run
    no_process_left(mark, pids)


@pytest.mark.failure(
    row="h-probe-never-answers-ignores",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="the `-h` probe never answers (and ignores SIGTERM)",
    does="it runs inside --timeout (15 s at most without one): at the deadline its group is killed and `... timed "
         "out after 3 s answering -h ...: nothing was run or written`, exit 3; the binary is not started, no file "
         "left",
)
def test_a_help_probe_that_never_answers_counts_against_the_timeout(tmp_path):
    binary, mark, pids = hostile(tmp_path, "ok", help="hang")
    out = tmp_path / "p.parquet"
    run = Run(tmp_path, "nccl-tests", "run", "--timeout", "3", "--out", str(out), str(binary))
    took = run.wait()
    assert run.proc.returncode == 3, run.stderr
    assert took < 3 + 20
    err = run.stderr.strip().splitlines()
    assert err == ["commbench: all_reduce_perf timed out after 3 s answering -h (asked for its options): "
                   "its process group was killed; nothing was run or written"]
    assert run.peak_rss < MEMORY_LIMIT, run.peak_rss
    assert not out.exists() and not out.with_suffix(".log").exists()
    assert len(pids.read_text().split()) == 1  # the probe only: the binary was not started after the deadline
    no_process_left(mark, pids)


@pytest.mark.failure(
    row="sigterm-while-h-probe-hangs",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="SIGTERM while the `-h` probe hangs",
    does="the probe's group killed, one line `interrupted while asking all_reduce_perf -h ...; nothing was "
         "written`, exit 143, no file",
)
def test_sigterm_during_a_help_probe_that_never_answers(tmp_path):
    binary, mark, pids = hostile(tmp_path, "ok", help="hang")
    out = tmp_path / "q.parquet"
    run = Run(tmp_path, "nccl-tests", "run", "--out", str(out), str(binary))
    while not pids.exists() and time.monotonic() - run.started < 30:
        time.sleep(0.05)
    time.sleep(0.3)
    run.proc.send_signal(signal.SIGTERM)
    run.wait()
    assert run.proc.returncode == 143, run.stderr
    err = run.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("commbench: interrupted while asking all_reduce_perf -h")
    assert not out.exists() and not out.with_suffix(".log").exists()  # nothing was written
    no_process_left(mark, pids)


@pytest.mark.failure(
    row="binary-printing-500-lines-shaped",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="a binary printing 500 lines shaped like rows that are not",
    does="the first 10 are warned about (`... (line skipped)`), then one line says the rest are not shown; the real "
         "rows kept, exit 0",
)
def test_lines_that_look_like_rows_but_are_not_are_warned_about_ten_times(tmp_path):
    binary, mark, pids = hostile(tmp_path, "bad-rows")
    out = tmp_path / "w.parquet"
    run = Run(tmp_path, "nccl-tests", "run", "--timeout", "40", "--out", str(out), str(binary))
    run.wait()
    assert run.proc.returncode == 0, run.stderr[-2000:]
    err = run.stderr.splitlines()
    assert sum(line.endswith("(line skipped)") for line in err) == 10
    assert err.count("commbench: warning: more than 10 lines skipped; the rest are not shown") == 1
    assert "Traceback" not in run.stderr and len(pd.read_parquet(out)) == 6
    no_process_left(mark, pids)
