"""tests/helpers.py's run_group with real processes: on a timeout the whole group is killed, a
launcher's workers too (the rest of helpers.py is held in tests/unit/test_helpers.py)."""

from __future__ import annotations

import os

from helpers import run_group


def test_run_group_kills_the_whole_group_on_a_timeout(tmp_path):
    """A launcher that times out takes its workers with it (torchrun's ranks once outlived a test)."""
    import subprocess
    import sys
    import time

    import pytest


    pid_file = tmp_path / "worker.pid"
    launcher = ("import subprocess, sys, time; w = subprocess.Popen(['sleep', '60']); "
                f"open({str(pid_file)!r}, 'w').write(str(w.pid)); time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired):
        run_group([sys.executable, "-c", launcher], timeout=3)
    worker = int(pid_file.read_text())
    for _ in range(50):  # the orphan is reaped by init once killed
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the worker {worker} outlived its launcher's timeout")
    assert run_group([sys.executable, "-c", "print('ok')"], timeout=30).stdout == "ok\n"
