"""Compare names the host of a difference (issue #40, part 5): 3 lab hosts at 1gbit, a short sweep, host 3
lowered to 300mbit (`lab set --node 3`), the same sweep again; compare's "what differs" line says the rate of
every host before and which host holds the new one after, and the overlay's subtitle says it too.
Its own lab: prefix `qwh`, subnet 10.231.1.0/24."""

from __future__ import annotations

import pytest

from labkit import NEEDS_LAB, lab_env, lab_up, run_commbench

pytestmark = NEEDS_LAB
PREFIX = "qwh"
ENV = lab_env(PREFIX)
SWEEP = ["lab", "run", "--", "commbench", "sweep", "--sizes", "256K", "-n", "3", "-w", "1", "--no-wire"]


def cb(*args: str):
    return run_commbench(ENV, *args, timeout=180)


@pytest.fixture
def lab():
    with lab_up(PREFIX, "--nodes", "3", "--rate", "1gbit", "--subnet", "10.231.1.0/24"):
        yield


def test_compare_names_the_slowed_host_in_what_differs(lab, tmp_path):
    before, after = tmp_path / "before.parquet", tmp_path / "after.parquet"
    assert cb(*SWEEP, "--out", str(before)).returncode == 0
    assert cb("lab", "set", "--node", "3", "--rate", "300mbit").returncode == 0
    assert cb(*SWEEP, "--out", str(after)).returncode == 0
    done = cb("compare", str(before), str(after), "--plot", str(tmp_path / "overlay.png"))
    assert done.returncode in (0, 1, 3), done.stderr
    text = " ".join(done.stdout.split())  # a long line wraps at 120 columns
    assert ("differs: link rate: before 1 Gbit/s (shaped; link 10 Gbit/s) on all 3 hosts; after "
            f"{PREFIX}node3 300 Mbit/s (shaped; link 10 Gbit/s), the others 1 Gbit/s") in text, done.stdout
    assert f"{PREFIX}node1" not in text and f"{PREFIX}node2" not in text  # no other host is named
    assert (tmp_path / "overlay.png").stat().st_size > 10_000
