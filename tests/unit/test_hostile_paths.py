"""Hostile names and folders (issue #39, classes 4 and 5): a path too long for the file system, a
loop of links, a system folder as the lab's state folder and a rate tc cannot shape are one line of
bad input (exit 2) naming the problem and the fix, never a traceback; through the real CLI, in
process (tests/conftest.py `cli`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from commbench.core.inputs import check_path, path_facts, shown_path
from commbench.core.errors import BadInput
from commbench.lab import state as labstate

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "e826e56" / "zero.parquet"
NCCL_LOG = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt"
LONG = "a" * 300  # one name longer than NAME_MAX (255): ENAMETOOLONG from every look at it


def _one_line(proc, *words: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args", [
    ["report", LONG],
    ["report", str(GOLDEN), "--out", LONG + ".html"],
    ["compare", str(GOLDEN), str(GOLDEN), "--out", LONG],
    ["plot", str(GOLDEN), "--out", f"{LONG}/x.png"],
    ["gate", str(GOLDEN), "--suggest", "--out", LONG + ".yaml"],
    ["nccl-tests", "import", str(NCCL_LOG), "--out", LONG + ".parquet"],
    ["sweep", "--nproc", "1", "--backend", "gloo", "--out", LONG + ".parquet"],
    ["doctor", "--root", LONG],
], ids=["report-input", "report-out", "compare-out", "plot-out-folder", "gate-out", "import-out", "sweep-out",
        "doctor-root"])
@pytest.mark.failure(
    row="long-names",
    section="Long and odd paths",
    failure="a 300-character name as --out or as an input of report, compare, plot, gate, "
            "`nccl-tests import`, sweep and `doctor --root` (Python 3.11's Path.exists() raises ENAMETOOLONG)",
    does="`--out aaaa...aaaa.html (305 characters): File name too long: a file name holds at most 255 bytes and a "
         "path 4096: pass a shorter one`, exit 2, nothing written; the long name shown by its ends",
    cases="report-input, report-out, compare-out, plot-out-folder, gate-out, import-out, sweep-out, doctor-root",
)
def test_a_name_too_long_is_one_line_of_bad_input(cli, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    line = _one_line(cli(*args), "File name too long", "pass a shorter one")
    assert "characters)" in line and LONG not in line  # shortened, still one line
    assert os.listdir(tmp_path) == []


@pytest.mark.failure(row="long-names")
def test_a_long_input_name_reads_as_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _one_line(cli("nccl-tests", "import", LONG), "File name too long")
    _one_line(cli("compare", LONG, str(GOLDEN)), "results file", "File name too long", "pass a shorter one")


@pytest.mark.failure(
    row="results-name-room",
    section="Long and odd paths",
    failure="a results file name of 234..255 bytes (fits the file system, but not its hidden temporaries or "
            "its `.parts` folder)",
    does="refused before anything runs: `a results file's name holds at most 233 bytes (its hidden temporaries and "
         ".parts folder beside it need the rest ...)`, exit 2 (was a failed write, exit 3, after the run)",
)
def test_a_results_name_without_room_for_its_temporaries_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _one_line(cli("nccl-tests", "import", str(NCCL_LOG), "--out", "b" * 240 + ".parquet"), "at most 233 bytes")
    assert os.listdir(tmp_path) == []


@pytest.mark.failure(
    row="path-facts",
    section="Long and odd paths",
    failure="a path that loops through symbolic links, holds a NUL byte, or is too long (every look at a user's "
            "path)",
    does="core/inputs.py `path_facts` never raises: the reason comes back and `check_path` makes it one line "
         "(`it loops through symbolic links: pass the real path`); a dangling link is a link, a missing name absent",
)
def test_path_facts_never_raise(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    assert path_facts(tmp_path / "loop").errno == errno.ELOOP
    assert path_facts(tmp_path / LONG).errno == errno.ENAMETOOLONG
    assert path_facts("a\0b").error == "it holds a NUL byte"
    dangling = path_facts(tmp_path / "dangling")
    assert dangling.lexists and not dangling.exists and dangling.error is None
    assert not path_facts(tmp_path / "file" / "under").lexists  # ENOTDIR: nothing is there
    assert path_facts(tmp_path / "file").is_file and path_facts(tmp_path).is_dir
    with pytest.raises(BadInput, match="loops through symbolic links: pass the real path"):
        check_path(tmp_path / "loop", "--out")
    assert shown_path("x" * 121).endswith("(121 characters)") and shown_path("short") == "short"


@pytest.mark.parametrize("folder", ["/etc/avahi", "/etc/ssh", "/var/lib", "/usr/lib", "/proc/sys", "/run/netns",
                                    "/var/run/netns", "/home"])
@pytest.mark.failure(
    row="lab-system-folder",
    section="The lab's state folder",
    failure="COMMBENCH_LAB_DIR set to a folder inside the system's: `/etc/avahi` (which holds a `hosts` file), "
            "`/etc/ssh`, `/var/lib`, `/usr/lib`, `/proc/sys`, `/run/netns`",
    does="refused by a list of system trees (/etc, /usr, /var but /var/tmp, /proc, /sys, /run/netns, ...) and "
         "folders (/, /run, /tmp, /home, the home folder and the one above it), not by a count of parts: "
         "`COMMBENCH_LAB_DIR=/etc/avahi is a system or home folder (inside /etc), not one of the lab's own`, exit 2",
    cases="*",
)
def test_a_folder_inside_a_system_tree_is_refused_as_the_state_folder(cli, monkeypatch, folder):
    monkeypatch.setattr(labstate, "STATE_DIR", Path(folder))
    _one_line(cli("lab", "status"), "is a system or home folder", "/run/commbench-lab-")


def test_a_folder_of_the_user_s_own_is_no_system_folder():
    for real in ("/run/commbench-lab-cb", "/tmp/x", "/var/tmp/lab", "/home/u/lab", "/root/lab", "/data/lab"):
        assert labstate.system_folder(real, "/home/u") is None, real
    assert labstate.system_folder("/home", "/home/u") == "/home"


@pytest.mark.failure(row="long-names")
def test_a_long_state_folder_is_one_line(cli, monkeypatch):
    monkeypatch.setattr(labstate, "STATE_DIR", Path("/tmp") / LONG)
    _one_line(cli("lab", "status"), "COMMBENCH_LAB_DIR", "File name too long")


@pytest.mark.parametrize("args", [["lab", "up", "--rate", "99999999999tbit"], ["lab", "up", "--rate", "18tbit"],
                                  ["lab", "up", "--rate", "7bit"], ["lab", "set", "--rate", "99999999999tbit"]],
                         ids=["up-huge", "up-18tbit", "up-7bit", "set-huge"])
@pytest.mark.failure(
    row="lab-rate-tc",
    section="The lab's state folder",
    failure="`lab up --rate 99999999999tbit` (or 18tbit, 7bit; `lab set --rate`): a rate tc's tbf cannot shape",
    does="checked against what tc accepts (8bit: 1 byte a second, up to 17tbit, where the 2 ms burst still fits tbf's "
         "32 bits; measured with tc): `--rate 99999999999tbit is above 17tbit, the fastest rate tc's tbf can shape a "
         "link to: use e.g. 1gbit, 100gbit or 400gbit`, exit 2, before root or the lab are looked at (was tc's own "
         "`illegal value for \"burst\"`, exit 3)",
    cases="*",
)
def test_a_rate_tc_cannot_shape_is_refused_before_anything(cli, monkeypatch, args):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # refused before the root check
    _one_line(cli(*args), "--rate", "tc's tbf can shape")
