"""Issue #23: a real lab whose state file is not what `lab up` wrote (root only).

A damaged file (cut short, binary, a wrong type) is refused by every command with one line and
exit 2, and nothing of the lab is removed; a hand-edited file that lists a foreign namespace, a
foreign link, files outside the state folder and a process that is not the lab's daemon makes
`lab down` remove the lab's own and none of those. The lab: prefix cq6, /run/commbench-lab-cq6,
10.246.6.0/24.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import partial
from pathlib import Path

import psutil
import pytest

from commbench.lab import processes
import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cq6"
SUBNET = "10.246.6.0/24"
ENV = lab_env(PREFIX)
STATE_DIR = Path(ENV["COMMBENCH_LAB_DIR"])
STATE = STATE_DIR / "state.json"
ROOT = Path(__file__).resolve().parents[2]
VICTIM_NS, VICTIM_LINK = "victcq6", "victcq6d0"  # not the lab's prefix: never the lab's to remove


cb = partial(helpers.cb, env=ENV, timeout=120, cwd=ROOT)  # python -m commbench in a subprocess (tests/helpers.py)


def leftovers() -> list[str]:
    left = [f"netns {n}" for n in os.listdir("/var/run/netns") if n.startswith(PREFIX)] \
        if os.path.isdir("/var/run/netns") else []
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout)
    left += [f"link {link['ifname']}" for link in links if link["ifname"].startswith(PREFIX)]
    if os.path.lexists(STATE_DIR):
        left.append(f"dir {STATE_DIR}")
    return left


def exists(kind: str, name: str) -> bool:
    if kind == "netns":
        return os.path.exists(f"/var/run/netns/{name}")
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True).returncode == 0


def one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def lab_up():
    if STATE.is_file():
        cb("lab", "down")
    if os.path.isfile(STATE_DIR):
        os.unlink(STATE_DIR)
    assert leftovers() == [], "a previous test left its lab behind"
    up = cb("lab", "up", "--nodes", "2", "--subnet", SUBNET)
    assert up.returncode == 0, up.stderr
    good = STATE.read_text()
    yield good
    if os.path.isfile(STATE_DIR):
        os.unlink(STATE_DIR)
    STATE_DIR.mkdir(exist_ok=True)
    STATE.write_text(good)
    cb("lab", "down")
    assert leftovers() == []


@pytest.mark.parametrize("damage", ["cut-short", "binary", "mtu-a-string"])
@pytest.mark.failure(row="lab-state-file-cut-short")
def test_a_damaged_state_file_of_a_real_lab_is_refused_and_nothing_is_removed(lab_up, damage):
    good = lab_up
    doc = json.loads(good)
    doc["nodes"][0]["mtu"] = "big"
    bad = {"cut-short": good[: len(good) // 2].encode(), "binary": bytes(range(256)),
           "mtu-a-string": json.dumps(doc).encode()}[damage]
    STATE.write_bytes(bad)
    for args in (["lab", "status"], ["lab", "down"], ["lab", "set", "--mtu", "9000"], ["lab", "slurm", "down"],
                 ["lab", "exec", f"{PREFIX}node1", "--", "true"], ["lab", "up", "--nodes", "2", "--subnet", SUBNET]):
        one_line(cb(*args), str(STATE), "damaged", "delete")
    assert STATE.read_bytes() == bad
    assert exists("netns", f"{PREFIX}node1") and exists("netns", f"{PREFIX}node2") and exists("link", f"{PREFIX}br0")
    STATE.write_text(good)  # put back, `lab down` removes exactly the lab
    assert cb("lab", "down").returncode == 0 and leftovers() == []


@pytest.mark.failure(row="state-folder-file-lies-under")
def test_a_state_folder_that_is_a_file_creates_nothing():
    if STATE.is_file():
        cb("lab", "down")
    assert leftovers() == []
    STATE_DIR.write_text("not a folder\n")
    try:
        for args in (["lab", "up", "--nodes", "2", "--subnet", SUBNET], ["lab", "down"], ["lab", "status"]):
            one_line(cb(*args), str(STATE_DIR), "is a file, not a folder")
        assert STATE_DIR.read_text() == "not a folder\n"
        assert not exists("netns", f"{PREFIX}node1") and not exists("link", f"{PREFIX}br0")
    finally:
        os.unlink(STATE_DIR)


@pytest.mark.failure(row="state-file-listing-namespace-link")
@pytest.mark.failure(row="recorded-daemon-pid-now-used")
def test_lab_down_of_an_edited_state_file_removes_only_the_lab_s_own(lab_up, tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("keep me")
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        subprocess.run(["ip", "netns", "add", VICTIM_NS], check=True)
        subprocess.run(["ip", "link", "add", VICTIM_LINK, "type", "veth", "peer", "name", VICTIM_LINK[:-1] + "1"],
                       check=True)
        doc = json.loads(lab_up)
        doc["created"] += [["netns", VICTIM_NS], ["link", VICTIM_LINK], ["bridge", VICTIM_LINK],
                           ["netns", f"{PREFIX}node1x"]]
        doc["files"] += [str(precious), str(tmp_path), f"{STATE_DIR}/../{tmp_path.name}", "/etc/hostname-no-such"]
        start = psutil.Process(sleeper.pid).create_time()
        doc["daemons"] += [{"name": "munged", "pid": sleeper.pid, "start": start},
                           {"name": "sshd", "pid": 1, "start": psutil.Process(1).create_time()}]
        STATE.write_text(json.dumps(doc))
        down = cb("lab", "down")
        assert down.returncode == 0, down.stderr
        lines = down.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("commbench: lab down left ") and "Traceback" not in down.stderr
        for text in (f"netns '{VICTIM_NS}'", f"link '{VICTIM_LINK}'", f"file '{precious}'", "process 'sshd'"):
            assert text in lines[0], (text, lines[0])
        assert leftovers() == []  # the lab's own: gone
        assert exists("netns", VICTIM_NS) and exists("link", VICTIM_LINK)
        assert precious.read_text() == "keep me" and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "netns", "del", VICTIM_NS], capture_output=True)
        subprocess.run(["ip", "link", "del", VICTIM_LINK], capture_output=True)


@pytest.mark.skipif(any(shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") is None
                        for t in ("munged", "slurmctld", "slurmd", "sinfo")),
                    reason="Slurm and munge are not installed: apt-get install slurm-wlm munge")
@pytest.mark.failure(
    row="real-daemons-slurmctld-slurmd-run",
    section="The lab's own records",
    failure="the real daemons (`slurmctld` and `slurmd` run as `slurmctld-wlm` / `slurmd-wlm` through Debian's "
            "alternatives)",
    does="still pass the check (argv[0] or the process name matches) and `lab down` stops every one, no process left",
)
def test_the_real_daemons_pass_the_pid_start_and_program_check_and_are_stopped(lab_up):
    up = cb("lab", "slurm", "up", timeout=180)
    assert up.returncode == 0, up.stderr
    daemons = json.loads(STATE.read_text())["daemons"]
    assert sorted(d["name"] for d in daemons) == ["munged", "slurmctld", f"slurmd {PREFIX}node1",
                                                 f"slurmd {PREFIX}node2"]
    assert all(processes.running(d) is not None for d in daemons)  # slurmctld runs as slurmctld-wlm: still ours
    down = cb("lab", "down", timeout=120)
    assert down.returncode == 0 and down.stderr == "", down.stderr
    assert all(f"process {d['name']} (pid {d['pid']})" in down.stdout for d in daemons)
    assert not any(psutil.pid_exists(d["pid"]) and psutil.Process(d["pid"]).status() != psutil.STATUS_ZOMBIE
                   and abs(psutil.Process(d["pid"]).create_time() - d["start"]) < 0.01 for d in daemons)
    assert leftovers() == []
