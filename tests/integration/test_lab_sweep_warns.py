"""`commbench sweep` across the lab warns, in one line naming each host's value and `commbench pairs`,
when the hosts' links differ (issue #40): one host's MTU and rate; none when equal.
Its own lab: prefix `cfr`, subnet 10.232.1.0/24, 2 hosts."""

from __future__ import annotations

import pytest

from labkit import NEEDS_LAB, lab_env, lab_up, run_commbench

pytestmark = NEEDS_LAB
PREFIX = "cfr"
ENV = lab_env(PREFIX)
SWEEP = ["lab", "run", "--", "commbench", "sweep", "--sizes", "4K", "-n", "2", "-w", "1", "--no-wire"]


def cb(*args: str):
    return run_commbench(ENV, *args, timeout=120)


@pytest.fixture
def lab():
    with lab_up(PREFIX, "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.232.1.0/24"):
        yield


def warned(res) -> list[str]:
    assert res.returncode == 0, res.stdout + res.stderr
    return [line for line in res.stderr.splitlines() if "the hosts' links differ" in line]


def test_sweep_warns_when_one_host_s_mtu_or_rate_differs(lab, tmp_path):
    assert warned(cb(*SWEEP, "--out", str(tmp_path / "equal.parquet"))) == []

    # node 2 at MTU 9000 and 500mbit (one run for both: each costs a sweep's start-up)
    assert cb("lab", "set", "--node", "2", "--mtu", "9000", "--rate", "500mbit").returncode == 0
    lines = warned(cb(*SWEEP, "--out", str(tmp_path / "differ.parquet")))
    assert len(lines) == 1, lines
    assert f"MTU 1500 on {PREFIX}node1, 9000 on {PREFIX}node2" in lines[0]
    assert f"link rate 1 Gbit/s on {PREFIX}node1, 500 Mbit/s on {PREFIX}node2" in lines[0]
    assert "`commbench pairs`" in lines[0]
