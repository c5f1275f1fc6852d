"""The lab in a folder of the user's own (root; issue #39, class 5): COMMBENCH_LAB_DIR names a folder
that already holds a `hosts` and an `nsswitch.conf` of the user's. `lab up` writes only files it
makes new (its pair goes in a folder of its own inside), its hosts still resolve each other by name,
and `lab down` removes only what it made: the user's files and the folder stay as they were.

Prefix chx, subnet 10.254.9.0/24, 2 hosts; the file takes about 5 s (lab up and down included).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, leftovers

pytestmark = NEEDS_LAB

PREFIX = "chx"
SUBNET = "10.254.9.0/24"


@pytest.mark.failure(
    row="lab-user-files",
    section="The lab's state folder",
    failure="COMMBENCH_LAB_DIR a folder of the user's holding their own `hosts` and `nsswitch.conf` "
            "(`lab up` wrote both without looking and `lab down` deleted them)",
    does="`lab up` makes each of its files new (O_EXCL, never over a file) and records it once made; when the names "
         "are taken its pair goes in a new `lab-etc-XXXXXXXX/` folder inside, which `lab run`, `lab exec`, `lab rsh` "
         "and `lab slurm` mount from the records (lab/state.py hosts_file); the hosts resolve each other by name; "
         "`lab down` removes that folder and leaves the user's files and folder byte for byte; the state file's "
         "temporary is its own (mkstemp), never a `state.tmp` of the user's",
)
def test_lab_up_and_down_in_a_folder_of_the_user_s_own_keep_their_files(tmp_path):
    folder = tmp_path / "mylab"
    folder.mkdir()
    mine = {"hosts": "10.9.9.9 my-own-host\n", "nsswitch.conf": "hosts: files dns # mine\n",
            "state.tmp": "my notes\n"}
    for name, text in mine.items():
        (folder / name).write_text(text)
    env = {**os.environ, "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": str(folder)}
    cb = partial(helpers.cb, env=env, timeout=60)
    try:
        up = cb("lab", "up", "--nodes", "2", "--subnet", SUBNET)
        assert up.returncode == 0, up.stdout + up.stderr
        for name, text in mine.items():
            assert (folder / name).read_text() == text, name
        made = [p for p in folder.iterdir() if p.name.startswith("lab-etc-")]
        assert len(made) == 1 and sorted(os.listdir(made[0])) == ["hosts", "nsswitch.conf"]
        assert f"{PREFIX}node2" in (made[0] / "hosts").read_text()
        peer = cb("lab", "exec", f"{PREFIX}node1", "--", "getent", "hosts", f"{PREFIX}node2")
        assert peer.returncode == 0 and "10.254.9.2" in peer.stdout, peer.stdout + peer.stderr
        mount = cb("lab", "exec", f"{PREFIX}node1", "--", "cat", "/etc/hosts")
        assert "my-own-host" not in mount.stdout and f"{PREFIX}node1" in mount.stdout
    finally:
        down = cb("lab", "down")
    assert down.returncode == 0, down.stderr
    assert sorted(os.listdir(folder)) == sorted(mine)  # the lab's folder and state file gone, the user's kept
    for name, text in mine.items():
        assert (folder / name).read_text() == text, name
    assert leftovers(PREFIX) == []


def test_the_default_state_folder_keeps_its_hosts_file_where_it_was(tmp_path):
    """A folder the lab makes itself holds `hosts` and `nsswitch.conf` directly (as before)."""
    folder = Path(tmp_path) / "new"
    env = {**os.environ, "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": str(folder)}
    cb = partial(helpers.cb, env=env, timeout=60)
    try:
        up = cb("lab", "up", "--nodes", "2", "--subnet", SUBNET)
        assert up.returncode == 0, up.stdout + up.stderr
        assert sorted(os.listdir(folder)) == ["hosts", "nsswitch.conf", "state.json"]
    finally:
        down = cb("lab", "down")
    assert down.returncode == 0 and not folder.exists()
    assert leftovers(PREFIX) == []
