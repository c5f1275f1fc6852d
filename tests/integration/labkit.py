"""What every lab test file shares: the marks that skip without root or iproute2, the environment
that gives a test file its own lab (a name prefix and a state folder of its own, so test files
never touch each other's namespaces), and commbench run as a subprocess in that environment."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import helpers  # tests/helpers.py

NEEDS_LAB = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, veth, tc)"),
    pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                       reason="iproute2 (ip, tc) is not installed: apt-get install iproute2"),
]


def lab_env(prefix: str) -> dict[str, str]:
    return {**os.environ, "COMMBENCH_LAB_PREFIX": prefix, "COMMBENCH_LAB_DIR": f"/run/commbench-lab-{prefix}"}


def run_commbench(env: dict[str, str], *args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return helpers.cb(*args, env=env, timeout=timeout, **kw)


def ns_run(netns: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """A command inside a lab host (ip netns exec, no shell)."""
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, timeout=timeout)


def leftovers(prefix: str) -> list[str]:
    """Namespaces and root-namespace links (bridges and veths) whose names start with `prefix`."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = [x["ifname"] for x in json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                                            text=True).stdout or "[]")]
    return [n for n in netns + links if n.startswith(prefix)]


@contextlib.contextmanager
def lab_up(prefix: str, *up_args: str, timeout: float = 120):
    """A lab of its own for one test: down first (a crashed run's leftovers), up with `up_args`,
    and after the test down again with nothing of the prefix left behind."""
    env = lab_env(prefix)
    run_commbench(env, "lab", "down", timeout=timeout)
    up = run_commbench(env, "lab", "up", *up_args, timeout=timeout)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield env
    finally:
        assert run_commbench(env, "lab", "down", timeout=timeout).returncode == 0
        assert leftovers(prefix) == []


def tbf_rates(netns: str) -> dict[str, int]:
    """Each interface's root tbf rate in bits per second inside a lab host (tc -j qdisc show)."""
    qdiscs = json.loads(ns_run(netns, "tc", "-j", "qdisc", "show").stdout or "[]")
    return {q["dev"]: q["options"]["rate"] * 8 for q in qdiscs if q.get("kind") == "tbf" and q.get("root")}


def first_run(side: Path) -> Path:
    """The run of a side of conftest.py's `lab_sides` that was measured first (its files are named
    by their place in the schedule)."""
    return min(side.glob("*.parquet"), key=lambda p: int(p.stem))


class LabRun:
    """`lab run -- commbench ...` in `env`, its stdout and stderr read as they come."""

    def __init__(self, env: dict[str, str], *args: str, linger: float | None = None):
        self.started = time.monotonic()
        self.elapsed = 0.0
        lab = ["--linger", str(linger)] if linger is not None else []  # `lab run --linger`: its default is 10 s
        self.proc = subprocess.Popen([sys.executable, "-m", "commbench", "lab", "run", *lab, "--", sys.executable,
                                      "-m", "commbench", *args], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(s, sink), daemon=True)
                         for s, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self._readers:
            r.start()

    @staticmethod
    def _read(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    def wait_for(self, pattern: str, timeout: float, where: str = "out") -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(re.search(pattern, line) for line in (self.out if where == "out" else self.err)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in {where}:\n{self.text()}")

    def finish(self, timeout: float) -> int:
        """Its exit code; past `timeout` it and every process it started are killed and the test fails."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running after {timeout} s:\n{self.text()}") from None
        for r in self._readers:
            r.join(5)
        self.elapsed = time.monotonic() - self.started
        return code

    def kill(self) -> None:
        import psutil

        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for p in children:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.kill()

    def text(self) -> str:
        return "".join(self.out) + "\n--- stderr ---\n" + "".join(self.err)
