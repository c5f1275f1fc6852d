"""`lab run`'s supervision of its ranks on SIGTERM and Ctrl-C, with real processes and no root: the
signal reaches every rank, each ends on its own, and `lab run` exits with the signal's code."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest


SUPERVISED = textwrap.dedent("""
    import subprocess, sys
    from commbench.lab.ranklaunch import wait_all
    child = '''
    import signal, sys, time
    def stop(signum, frame):
        print(signal.Signals(signum).name, flush=True)
        sys.exit(143 if signum == signal.SIGTERM else 130)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("up", flush=True)
    time.sleep(60)
    '''
    procs = [subprocess.Popen([sys.executable, "-c", child], stdout=open(f"{sys.argv[1]}.{i}", "w")) for i in range(2)]
    sys.exit(wait_all(procs))
""")


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
@pytest.mark.failure(row="sigterm-commbench-lab-run-what", note="no root needed")
def test_lab_run_forwards_the_signal_to_every_rank_and_waits(tmp_path, sig, code):
    marks = tmp_path / "rank"
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISED, str(marks)])
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"rank.{i}").exists() and "up" in (tmp_path / f"rank.{i}").read_text()
                      for i in range(2)):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(sig)  # to `lab run` only, as scancel or kill would
        assert proc.wait(30) == code
    finally:
        if proc.poll() is None:
            proc.kill()
    for i in range(2):  # each rank got the signal and ended on its own (it wrote its name), none left
        assert (tmp_path / f"rank.{i}").read_text().split() == ["up", sig.name]
