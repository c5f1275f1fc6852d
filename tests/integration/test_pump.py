"""core/pump.py, the one reader of a child's output (issue #23), with real children: the deadline
holds however fast the child prints, a line without end is cut, the bytes read are bounded, the
group is killed whole also when it ignores SIGTERM; and netinfo.run_command, which runs ibv_devinfo
/ nvidia-smi / perfquery on it, gives None for an output over its bound. (The write cap, Capped, is
in tests/unit/test_pump_cap.py.)"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from commbench.core import pump
from commbench.net import netinfo


def script(tmp_path: Path, body: str, name: str = "child") -> Path:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport os, signal, subprocess, sys, time\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(p.status() != psutil.STATUS_ZOMBIE for p in psutil.process_iter()
               if _pgid(p.pid) == pgid)


def gone_soon(pgid: int) -> bool:
    """The group is empty (zombies aside) within 5 s: a SIGKILL takes a moment to land."""
    deadline = time.monotonic() + 5
    while alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


LINE_WITHOUT_END = "block = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(block)"
FLOOD = "block = ('y' * 100 + '\\n') * 1000\nwhile True:\n    sys.stdout.write(block)"


@pytest.mark.failure(
    row="pump-itself-deadline-under-flood",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="the pump itself: a deadline under a flood, a group deaf to SIGTERM, a child that exits and leaves its "
            "pipes to a descendant, the byte limit, the write cap",
    does="the deadline holds within a tick; the group is gone after the grace; reading stops 2 s after the child "
         "ended and the group is killed; `capture` stops at its limit and its timeout; `Capped` writes up to its "
         "cap and then one line",
)
def test_the_deadline_holds_however_fast_the_child_prints(tmp_path):
    child = pump.Child([str(script(tmp_path, FLOOD))], deadline=time.monotonic() + 1.0)
    t0 = time.monotonic()
    n = sum(1 for _ in child.lines())
    took = time.monotonic() - t0
    child.stop(1.0)
    child.close()
    assert child.timed_out and n > 1000 and took < 3
    assert gone_soon(child.pid)


@pytest.mark.failure(row="prints-endless-line-without-newline")
def test_a_line_without_end_is_cut_and_the_rest_of_it_dropped(tmp_path):
    body = "sys.stdout.write('x' * (10 << 20)); sys.stdout.write('\\nnext\\nlast')"
    child = pump.Child([str(script(tmp_path, body))], deadline=time.monotonic() + 20, line_cap=1024)
    lines = [line for _, line in child.lines()]
    child.wait()
    child.stop(0)
    child.close()
    assert lines == [b"x" * 1024 + b" [commbench: line cut at 1 KiB; the rest of it is dropped]\n", b"next\n", b"last"]
    assert child.bytes_read > 10 << 20 and not child.timed_out


@pytest.mark.failure(row="pump-itself-deadline-under-flood")
def test_stderr_lines_are_told_apart_and_a_merged_stderr_is_stdout(tmp_path):
    path = script(tmp_path, "print('o', flush=True); print('e', file=sys.stderr, flush=True)")
    child = pump.Child([str(path)], deadline=time.monotonic() + 20)
    got = sorted(child.lines())
    child.stop(0)
    child.close()
    assert got == [(pump.OUT, b"o\n"), (pump.ERR, b"e\n")]
    assert pump.capture([str(path)], timeout=20, limit=100, stderr="stdout").out in (b"o\ne\n", b"e\no\n")


@pytest.mark.failure(row="pump-itself-deadline-under-flood")
def test_stop_kills_a_group_that_ignores_sigterm(tmp_path):
    body = ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
            "print('ready', flush=True)\ntime.sleep(300)")
    child = pump.Child([str(script(tmp_path, body))], deadline=time.monotonic() + 20)
    assert next(child.lines()) == (pump.OUT, b"ready\n")
    t0 = time.monotonic()
    child.stop(0.5)
    child.close()
    assert time.monotonic() - t0 < 5
    assert gone_soon(child.pid)


@pytest.mark.failure(row="pump-itself-deadline-under-flood")
def test_capture_stops_at_its_limit_and_at_its_timeout(tmp_path):
    got = pump.capture([str(script(tmp_path, FLOOD))], timeout=20, limit=50_000)
    assert got.over_limit and not got.ok and 49_000 < len(got.out) <= 50_000
    t0 = time.monotonic()
    got = pump.capture([str(script(tmp_path, "time.sleep(300)", "sleeper"))], timeout=0.5, limit=100)
    assert got.timed_out and not got.ok and time.monotonic() - t0 < 5
    assert pump.capture([str(tmp_path / "missing")], timeout=1, limit=10) is None


@pytest.mark.failure(
    row="ibv-devinfo-nvidia-smi-perfquery",
    section="Other programs' output and time (nccl-tests binaries, their `-h`, ibv_devinfo, nvidia-smi, perfquery)",
    failure="ibv_devinfo / nvidia-smi / perfquery (doctor, host facts) that hang, print without end, print one "
            "endless line, fail, or print bytes that are not UTF-8",
    does="`netinfo.run_command` stops them at their timeout or at 8 MiB and gives no fact (None) rather than one "
         "from a cut output; bad bytes are replaced",
)
def test_run_command_gives_the_output_or_none_past_its_bound(tmp_path, monkeypatch):
    ok = script(tmp_path, "sys.stdout.buffer.write(b'mtu 4096\\n\\xff\\n')", "ok")
    assert netinfo.run_command([str(ok)]) == "mtu 4096\n\ufffd\n"  # not UTF-8: replaced, not an exception
    monkeypatch.setattr(netinfo, "COMMAND_OUTPUT_CAP", 1 << 20)
    t0 = time.monotonic()
    assert netinfo.run_command([str(script(tmp_path, FLOOD, "flood"))]) is None  # stopped at the bound
    assert netinfo.run_command([str(script(tmp_path, LINE_WITHOUT_END, "line"))]) is None
    assert netinfo.run_command([str(script(tmp_path, "time.sleep(300)", "hang"))], timeout=0.5) is None
    assert time.monotonic() - t0 < 10
    assert netinfo.run_command([str(script(tmp_path, "print('fail'); sys.exit(1)", "fails"))]) is None


@pytest.mark.skipif(not hasattr(os, "getpgid"), reason="process groups")
@pytest.mark.failure(row="pump-itself-deadline-under-flood")
def test_a_child_that_leaves_its_pipes_to_a_descendant_ends_after_the_linger(tmp_path, monkeypatch):
    # The linger shortened from its 2 s (the wait is the same code whatever its length; 2 s of it were
    # most of this file's time): reading still waits it out after the child ended, and stops then.
    monkeypatch.setattr(pump, "LINGER", 0.3)
    body = ("subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
            "print('done', flush=True)")
    child = pump.Child([str(script(tmp_path, body))])
    t0 = time.monotonic()
    got = list(child.lines())
    took = time.monotonic() - t0
    assert got == [(pump.OUT, b"done\n")] and pump.LINGER <= took < pump.LINGER + 5
    assert child.proc.poll() is not None  # the child had ended: it was the linger that stopped the reading
    child.stop(0)
    child.close()
    assert gone_soon(child.pid)
