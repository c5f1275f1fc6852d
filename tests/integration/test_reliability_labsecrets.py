"""Issue #23, two classes: lab state that is not what `lab up` wrote, and secrets under the
environment prefixes commbench records.

The lab: every lab command reads the state file through one checked loader (lab/state.py): a
damaged file (cut short, not JSON, wrong types, a state folder that is a file, ...) is one line,
exit 2, nothing run and the file untouched; `lab down` removes only the lab's own namespaces,
links, daemons and files inside its state folder, whatever the file lists. No root is needed:
the lab runs on a private prefix and a state folder under tmp_path, `ip` and `tc` are replaced
by recorders, and every file deletion outside tmp_path fails the test before it happens.

The secrets: env_snapshot (net/envinfo.py) keeps values only for known settings; a real 2-rank
sweep with NCCL_PASS, NCCL_TOKN, UCX_SECRETISH and GLOO_X set leaves their values in no results
file, report or doctor output.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from commbench.lab import network, processes, slurm
from commbench.lab import state as lab
from commbench.net import envinfo, netinfo

pytestmark = pytest.mark.integration  # the CLI in subprocesses (README, Development: the tiers)

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# The lab's state file
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def fake_lab(tmp_path, monkeypatch):
    """A private lab (prefix zq, state folder under tmp_path), root as far as the lab can tell, `ip`
    and `tc` recorded instead of run, every namespace and link "existing", and file deletions
    refused outside tmp_path (so a regression cannot delete anything real)."""
    calls: list[tuple] = []
    monkeypatch.setattr(lab.os, "geteuid", lambda: 0)
    monkeypatch.setattr(lab, "PREFIX", "zq")
    monkeypatch.setattr(lab, "BRIDGE", "zqbr0")
    monkeypatch.setattr(lab, "STATE_DIR", tmp_path / "lab")
    monkeypatch.setattr(network, "_ip", lambda *a, **kw: calls.append(("ip", *a)))
    monkeypatch.setattr(network, "_tc", lambda *a, **kw: calls.append(("tc", *a)))
    monkeypatch.setattr(network, "_netns_exists", lambda name: True)
    monkeypatch.setattr(network, "_link_exists", lambda name: True)
    base = str(tmp_path)

    def guard(real):
        def guarded(path, *args, **kwargs):
            if kwargs.get("dir_fd") is None and not os.path.abspath(os.fspath(path)).startswith(base + os.sep):
                raise AssertionError(f"the lab tried to delete {path}")
            return real(path, *args, **kwargs)
        return guarded

    for name in ("unlink", "remove", "rmdir"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    monkeypatch.setattr(shutil, "rmtree", guard(shutil.rmtree))
    return calls


def good_state() -> dict:
    """What `lab up --nodes 2` writes (the state folder made by up, its hosts file)."""
    d = str(lab.STATE_DIR)
    return {"subnet": "10.239.0.0/24", "bridge": "zqbr0",
            "nodes": [{"name": f"zqnode{i}", "addr": f"10.239.0.{i}", "port": f"zqveth{i}", "mtu": 1500,
                       "rate": "1gbit", "queue": None, "frames": False} for i in (1, 2)],
            "created": [["bridge", "zqbr0"], ["netns", "zqnode1"], ["link", "zqveth1"], ["netns", "zqnode2"],
                        ["link", "zqveth2"]],
            "daemons": [], "files": [d, f"{d}/hosts"]}


def write_state(doc: dict | str | bytes) -> Path:
    lab.STATE_DIR.mkdir(parents=True, exist_ok=True)
    path = lab.state_path()
    data = doc if isinstance(doc, (str, bytes)) else json.dumps(doc, indent=2)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _edit(**changes):
    def make():
        doc = good_state()
        for key, value in changes.items():
            if "." in key:
                outer, inner = key.split(".")
                doc[outer][0][inner] = value
            elif value is None:
                doc.pop(key)
            else:
                doc[key] = value
        return doc
    return make


DAMAGE = {
    "cut-short": lambda: json.dumps(good_state(), indent=2)[:180],
    "empty": lambda: "",
    "binary": lambda: bytes(range(256)) * 4,
    "not-utf8": lambda: b'{"subnet": "\xff\xfe"}',
    "a-list": lambda: "[1, 2, 3]",
    "deeply-nested": lambda: "[" * 200000,
    "huge": lambda: json.dumps({**good_state(), "files": ["x" * 1000] * 2000}),
    "no-subnet": _edit(subnet=None),
    "subnet-not-a-network": _edit(subnet="10.0.0.300/24"),
    "unknown-field": _edit(owner="mallory"),
    "mtu-a-string": _edit(**{"nodes.mtu": "big"}),
    "mtu-true": _edit(**{"nodes.mtu": True}),
    "address-not-ip": _edit(**{"nodes.addr": "$(reboot)"}),
    "nodes-not-a-list": _edit(nodes={"zqnode1": 1}),
    "created-not-pairs": _edit(created=[["netns"]]),
    "daemon-pid-a-string": _edit(daemons=[{"name": "munged", "pid": "1", "start": 0.0}]),
    "files-not-paths": _edit(files=[7]),
}

COMMANDS = {
    "status": ["lab", "status"],
    "status-json": ["lab", "status", "--json"],
    "down": ["lab", "down"],
    "up": ["lab", "up", "--nodes", "2", "--subnet", "10.239.0.0/24"],
    "set": ["lab", "set", "--mtu", "9000"],
    "exec": ["lab", "exec", "zqnode1", "--", "true"],
    "run": ["lab", "run", "--", "true"],
    "slurm-status": ["lab", "slurm", "status"],
    "slurm-down": ["lab", "slurm", "down"],
}


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from commbench.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def one_line(code: int, err: str, *needles: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("commbench: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.failure(
    row="lab-state-file-cut-short",
    section="The lab's own records",
    failure="the lab state file cut short, empty, binary, not UTF-8, a JSON list, nested 200000 deep, over 1 MiB, a "
            "missing or unknown field, a wrong type (`\"mtu\": \"big\"`, `true`), a subnet or address that is not "
            "one, a daemon pid that is text",
    does="every lab command (`up`, `status`, `set`, `exec`, `run`, `down`, `slurm status/down`): `the lab state "
         "file X is damaged (WHAT): remove the lab's namespaces and links by hand (ip netns list; ip link show: "
         "names starting with PREFIX) and delete X`, exit 2, no traceback, no `ip`/`tc` run, the file unchanged",
)
def test_a_damaged_state_file_is_one_line_exit_2_and_touches_nothing(fake_lab, capsys, damage, command):
    path = write_state(DAMAGE[damage]())
    before = path.read_bytes()
    code, _, err = run_cli(COMMANDS[command], capsys)
    one_line(code, err, str(path), "damaged", "delete")
    assert fake_lab == [], "the lab ran ip/tc on a damaged state file"
    assert path.read_bytes() == before, "the damaged file was changed"


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.failure(
    row="state-folder-file-lies-under",
    section="The lab's own records",
    failure="the state folder is a file, or lies under a file; the state file is a folder",
    does="one line naming it and the fix (move it away / point COMMBENCH_LAB_DIR elsewhere), exit 2; on a real "
         "machine nothing is created",
)
def test_a_state_folder_that_is_a_file_is_one_line_exit_2(fake_lab, capsys, command):
    lab.STATE_DIR.write_text("not a folder\n")
    code, _, err = run_cli(COMMANDS[command], capsys)
    one_line(code, err, str(lab.STATE_DIR), "is a file, not a folder", "COMMBENCH_LAB_DIR")
    assert lab.STATE_DIR.read_text() == "not a folder\n" and fake_lab == []


@pytest.mark.parametrize("command", ["status", "down", "up", "set"])
@pytest.mark.failure(row="state-folder-file-lies-under")
def test_a_state_file_that_is_a_folder_or_under_a_file_is_one_line_exit_2(fake_lab, capsys, monkeypatch, command):
    lab.state_path().mkdir(parents=True)
    code, _, err = run_cli(COMMANDS[command], capsys)
    one_line(code, err, str(lab.state_path()), "is a folder, not a file")
    assert lab.state_path().is_dir()
    blocker = lab.STATE_DIR.parent / "blocker"
    blocker.write_text("x")
    monkeypatch.setattr(lab, "STATE_DIR", blocker / "lab")
    code, _, err = run_cli(COMMANDS[command], capsys)
    one_line(code, err, str(blocker), "under a file")
    assert blocker.read_text() == "x" and fake_lab == []


@pytest.mark.parametrize("folder", ["/", "/tmp", "/etc", "/run"])
@pytest.mark.failure(
    row="commbench-lab-dir-set-tmp",
    section="The lab's own records",
    failure="COMMBENCH_LAB_DIR set to `/`, `/tmp`, `/etc`, `/run` or the home folder (`lab down` removes the folder "
            "it made)",
    does="refused, exit 2: `is a system or home folder, not one of the lab's own`",
)
def test_a_system_folder_as_the_state_folder_is_refused(fake_lab, capsys, monkeypatch, folder):
    monkeypatch.setattr(lab, "STATE_DIR", Path(folder))
    for command in ("status", "down", "up"):
        code, _, err = run_cli(COMMANDS[command], capsys)
        one_line(code, err, f"COMMBENCH_LAB_DIR={folder}", "system or home folder")
    assert fake_lab == []


FOREIGN = {
    "netns-without-prefix": ("created", ["netns", "prod"], "netns 'prod'"),
    "link-without-prefix": ("created", ["link", "eth0"], "link 'eth0'"),
    "bridge-of-someone-else": ("created", ["bridge", "docker0"], "bridge 'docker0'"),
    "a-kind-the-lab-never-makes": ("created", ["route", "zqnode1"], "object 'zqnode1'"),
    "etc-passwd": ("files", "/etc/passwd", "file '/etc/passwd'"),
    "the-root-folder": ("files", "/", "file '/'"),
    "a-daemon-it-never-starts": ("daemons", {"name": "sshd", "pid": 1, "start": 0.0}, "process 'sshd'"),
}


@pytest.mark.parametrize("case", list(FOREIGN))
@pytest.mark.failure(row="state-file-listing-namespace-link")
def test_other_commands_refuse_a_state_file_naming_what_is_not_the_lab_s(fake_lab, capsys, case):
    key, entry, text = FOREIGN[case]
    doc = good_state()
    doc[key].append(entry)
    path = write_state(doc)
    for command in ("status", "set", "exec", "slurm-down"):
        code, _, err = run_cli(COMMANDS[command], capsys)
        one_line(code, err, str(path), text, "lab down")
    assert fake_lab == []


@pytest.mark.failure(
    row="state-file-listing-namespace-link",
    section="The lab's own records",
    failure="a state file listing a namespace, link or bridge without the lab's prefix, a kind the lab never makes, "
            "`/etc/passwd`, `/`, a daemon the lab never starts",
    does="`lab down` removes the lab's own and none of those: one stderr line `lab down left N entries of X alone, "
         "not made by this lab (PREFIX): netns 'prod', file '/etc/passwd', ...`, exit 0; every other command "
         "refuses the file (exit 2, one line pointing at `lab down`)",
)
def test_lab_down_removes_only_what_is_the_lab_s_own(fake_lab, capsys, tmp_path):
    doc = good_state()
    d = lab.STATE_DIR
    precious = tmp_path / "outside" / "precious"
    precious.parent.mkdir()
    precious.write_text("keep me")
    (tmp_path / "outside" / "dir").mkdir()
    (tmp_path / "outside" / "dir" / "data").write_text("keep me too")
    d.mkdir()
    (d / "hosts").write_text("127.0.0.1 localhost\n")
    (d / "munge").mkdir()
    (d / "munge" / "munge.key").write_text("k")
    os.symlink(tmp_path / "outside" / "dir", d / "escape")  # a link inside the state folder to outside
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start = psutil.Process(sleeper.pid).create_time()
        doc["created"] += [["netns", "prod"], ["link", "eth0"], ["bridge", "docker0"], ["route", "zqveth1"],
                           ["netns", "zqnode1x"], ["netns", "xzqnode1"], ["link", "zqveth0"]]
        doc["files"] += [f"{d}/munge", "/etc/passwd", "/", str(precious), f"{d}/../outside/precious",
                         f"{d}/escape/data", str(d) + "x", "relative/path", f"{d}/escape"]
        doc["daemons"] += [{"name": "sshd", "pid": 1, "start": psutil.Process(1).create_time()},
                           {"name": "munged", "pid": sleeper.pid, "start": start},  # not munged: sleep
                           {"name": "slurmd prod", "pid": sleeper.pid, "start": start}]
        write_state(doc)
        code, out, err = run_cli(["lab", "down"], capsys)
        assert code == 0, err
        assert sleeper.poll() is None, "lab down signalled a process that is not its daemon"
    finally:
        sleeper.kill()
        sleeper.wait()
    deleted = sorted(c[-1] for c in fake_lab if c[:2] in (("ip", "netns"), ("ip", "link")))
    assert deleted == ["zqbr0", "zqnode1", "zqnode2", "zqveth1", "zqveth2"], fake_lab
    assert precious.read_text() == "keep me"
    assert (tmp_path / "outside" / "dir" / "data").read_text() == "keep me too"
    assert not d.exists()  # the lab's own folder (up made it) is gone, with its hosts file and munge/
    assert "netns zqnode1" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: lab down left ") and "Traceback" not in err, err
    for text in ("netns 'prod'", "link 'eth0'", "bridge 'docker0'", "file '/etc/passwd'"):
        assert text in lines[0]


@pytest.mark.failure(
    row="state-folder-existed-before-lab",
    section="The lab's own records",
    failure="the state folder existed before `lab up` (not in its records)",
    does="`lab down` removes the lab's files in it and leaves the folder and what else is in it",
)
def test_lab_down_without_the_state_folder_in_its_records_keeps_the_folder(fake_lab, capsys):
    doc = good_state()
    doc["files"] = [f"{lab.STATE_DIR}/hosts"]  # the folder existed before `up`: not the lab's to remove
    write_state(doc)
    (lab.STATE_DIR / "mine").write_text("x")
    code, _, err = run_cli(["lab", "down"], capsys)
    assert code == 0 and err == ""
    assert (lab.STATE_DIR / "mine").read_text() == "x" and not lab.state_path().exists()


@pytest.mark.parametrize("path, ours", [
    ("{d}", True), ("{d}/hosts", True), ("{d}/slurm/ctld", True), ("{d}/./hosts", True),
    ("/", False), ("/etc/passwd", False), ("{d}/../x", False), ("{d}x", False), ("{d}x/hosts", False),
    ("hosts", False), ("", False), ("{d}/link-out/x", False), ("{d}/\0", False),
])
@pytest.mark.failure(
    row="recorded-file-outside-state-folder",
    section="The lab's own records",
    failure="a recorded file outside the state folder: `DIR/../x`, `DIRx`, a relative path, a path through a "
            "symbolic link inside the folder that leads outside; a folder replaced by a link (`slurm/` -> "
            "elsewhere)",
    does="never removed; a link inside the folder is removed itself, never what it points at (`lab down`, `lab "
         "slurm up` / `down`)",
)
def test_owns_path_is_the_state_folder_and_what_is_inside_it(tmp_path, monkeypatch, path, ours):
    monkeypatch.setattr(lab, "STATE_DIR", tmp_path / "lab")
    (tmp_path / "lab").mkdir()
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "out", tmp_path / "lab" / "link-out")
    assert lab.owns_path(path.format(d=tmp_path / "lab")) is ours


@pytest.mark.failure(row="recorded-file-outside-state-folder")
def test_remove_path_removes_a_link_not_what_it_points_at(fake_lab, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "data").write_text("keep")
    lab.STATE_DIR.mkdir()
    os.symlink(tmp_path / "out", lab.STATE_DIR / "slurm")
    assert lab.remove_path(str(lab.STATE_DIR / "slurm")) is True
    assert not os.path.lexists(lab.STATE_DIR / "slurm") and (tmp_path / "out" / "data").read_text() == "keep"
    assert lab.remove_path(str(tmp_path / "out")) is False and (tmp_path / "out" / "data").exists()


@pytest.mark.failure(row="recorded-file-outside-state-folder")
def test_slurm_down_removes_its_folders_only_inside_the_state_folder(fake_lab, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "slurm.conf").write_text("keep")
    doc = good_state()
    write_state(doc)
    os.symlink(tmp_path / "out", lab.STATE_DIR / "slurm")  # slurm/ replaced by a link to elsewhere
    (lab.STATE_DIR / "munge").mkdir()
    (lab.STATE_DIR / "munge" / "munge.key").write_text("k")
    assert slurm.down(lab.require_state()) == []
    assert (tmp_path / "out" / "slurm.conf").read_text() == "keep"
    assert not os.path.lexists(lab.STATE_DIR / "slurm") and not (lab.STATE_DIR / "munge").exists()


@pytest.mark.failure(
    row="recorded-daemon-pid-now-used",
    section="The lab's own records",
    failure="a recorded daemon pid now used by another program, a reused pid (other start time), pid 1, the CLI's "
            "own pid, a pid that is text, `true` or out of range",
    does="not signalled: a process is the lab's only when pid, start time and program (munged, slurmctld, slurmd) "
         "all match",
)
def test_a_recorded_pid_is_the_lab_s_only_with_its_start_time_and_program():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(sleeper.pid).name() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        start = psutil.Process(sleeper.pid).create_time()
        assert processes.running({"name": "sleep", "pid": sleeper.pid, "start": start}) is not None
        for entry in ({"name": "munged", "pid": sleeper.pid, "start": start},  # another program
                      {"name": "sleep", "pid": sleeper.pid, "start": start - 5},  # a reused pid
                      {"name": "sleep", "pid": True, "start": start}, {"name": "sleep", "pid": -1, "start": 0},
                      {"name": "init", "pid": 1, "start": psutil.Process(1).create_time()},
                      {"name": "python", "pid": os.getpid(), "start": psutil.Process().create_time()},
                      {"name": "sleep", "pid": 10 ** 30, "start": 0}, {"pid": sleeper.pid}, {}):
            assert processes.running(entry) is None, entry
        assert processes.stop_recorded(type("S", (), {"daemons": [
            {"name": "munged", "pid": sleeper.pid, "start": start}]})()) == []
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_state_file_up_wrote_loads_and_round_trips(fake_lab):
    write_state(good_state())
    state = lab.load_state()
    assert [n.name for n in state.nodes] == ["zqnode1", "zqnode2"]
    lab.save_state(state)
    assert json.loads(lab.state_path().read_text()) == good_state()
    assert lab.load_for_down()[1] == []


# ---------------------------------------------------------------------------------------------
# Secrets under the recorded prefixes
# ---------------------------------------------------------------------------------------------

TOKEN = secrets.token_hex(6)
PLANTED = {
    "NCCL_PASS": f"hunter2{TOKEN}", "NCCL_TOKN": f"tokn{TOKEN}", "UCX_SECRETISH": f"ucx{TOKEN}",
    "GLOO_X": f"gloo{TOKEN}", "FI_EFA_MYSTERY": f"fi{TOKEN}", "CUDA_WHATEVER": f"cuda{TOKEN}",
    "TORCH_NCCL_PW": f"torch{TOKEN}", "MASTER_SESAME": f"master{TOKEN}",
}
KNOWN = {"NCCL_DEBUG_SUBSYS": f"INIT{TOKEN}kept", "UCX_TLS": "rc", "FI_PROVIDER": "efa", "GLOO_SOCKET_IFNAME": "lo",
         "CUDA_DEVICE_MAX_CONNECTIONS": "1", "TORCH_NCCL_BLOCKING_WAIT": "1", "MASTER_PORT": "29500"}


@pytest.mark.failure(
    row="nccl-pass-nccl-tokn-gloo",
    section="Secrets under the recorded prefixes",
    failure="NCCL_PASS, NCCL_TOKN, GLOO_X, FI_EFA_MYSTERY, CUDA_WHATEVER, TORCH_NCCL_PW, MASTER_SESAME (names no "
            "filter pattern catches)",
    does="stored as `<not recorded>`; UCX_SECRETISH dropped; known settings keep their values",
)
def test_env_snapshot_keeps_values_only_for_known_settings():
    snap = envinfo.env_snapshot({**PLANTED, **KNOWN, "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "x"})
    for name in KNOWN:
        assert snap[name] == KNOWN[name]
    assert "UCX_SECRETISH" not in snap  # a credential-like name is dropped entirely
    for name in set(PLANTED) - {"UCX_SECRETISH"}:
        assert snap[name] == envinfo.NOT_RECORDED, name  # seen as set, never what it held
    assert "HOME" not in snap and "AWS_SECRET_ACCESS_KEY" not in snap
    assert not any(value in json.dumps(snap) for value in PLANTED.values())


@pytest.mark.failure(row="nccl-pass-nccl-tokn-gloo")
def test_every_known_setting_survives_the_credential_filter():
    snap = envinfo.env_snapshot({name: "v" for name in envinfo.KNOWN_SETTINGS})
    assert set(snap) == set(envinfo.KNOWN_SETTINGS) and set(snap.values()) == {"v"}
    assert len(envinfo.NCCL_SETTINGS) > 200  # NCCL's documented settings, not a handful


@pytest.mark.failure(
    row="setting-commbench-itself-reads-doctor",
    section="Secrets under the recorded prefixes",
    failure="a setting commbench itself reads (doctor's NCCL_IB_HCA, NCCL_IB_GID_INDEX, ...) left off the list",
    does="every NCCL_/GLOO_/UCX_/FI_/CUDA_/TORCH_NCCL_/MASTER_ name in the package's source is on it",
)
def test_every_setting_commbench_itself_reads_is_recorded():
    """A variable that doctor, netinfo or the harness reads must keep its value in the snapshot,
    or their checks would see '<not recorded>'."""
    read = set()
    for path in (ROOT / "commbench").rglob("*.py"):
        read |= set(re.findall(r"[\"']((?:NCCL|GLOO|UCX|FI|CUDA|TORCH_NCCL|MASTER)_[A-Z0-9_]+)[\"']", path.read_text()))
    assert read - envinfo.KNOWN_SETTINGS == set()


@pytest.mark.failure(
    row="same-through-per-host-facts",
    section="Secrets under the recorded prefixes",
    failure="the same through the per-host facts and doctor",
    does="`netinfo.nccl_env`, `host_facts` and `host_summary` (what doctor prints and the `net` column stores) hold "
         "no planted value",
)
def test_the_per_host_and_doctor_environment_go_through_the_snapshot(monkeypatch):
    environ = {**PLANTED, **KNOWN}
    assert netinfo.nccl_env(environ) == {k: v for k, v in envinfo.env_snapshot(environ).items()
                                         if k.startswith(("NCCL_", "GLOO_"))}
    assert netinfo.nccl_env(environ)["NCCL_PASS"] == envinfo.NOT_RECORDED
    facts = netinfo.host_facts(environ=environ, gpus=False, nccl=None, timeout=1.0)
    summary = netinfo.host_summary("lo", environ=environ)
    text = json.dumps([facts, summary])
    assert not any(value in text for value in PLANTED.values())
    assert summary["env"]["NCCL_DEBUG_SUBSYS"] == KNOWN["NCCL_DEBUG_SUBSYS"]


def _commbench(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], cwd=ROOT, env=env, capture_output=True,
                          timeout=timeout)


@pytest.mark.integration
@pytest.mark.failure(
    row="real-2-rank-sweep-them",
    section="Secrets under the recorded prefixes",
    failure="a real 2-rank `sweep` with them set, then `report` (HTML), `doctor --json` and `doctor`",
    does="no planted value in the results file (bytes and decoded cells), the report, or any command's output; the "
         "names are stored as `<not recorded>`, a known setting (NCCL_DEBUG_SUBSYS) keeps its value",
)
def test_a_real_sweep_report_and_doctor_never_hold_the_planted_values(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "UCX_", "FI_", "TORCH_NCCL_"))}
    env.update({**PLANTED, "NCCL_DEBUG_SUBSYS": KNOWN["NCCL_DEBUG_SUBSYS"],
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURM_PROCID"):
        env.pop(name, None)
    out = tmp_path / "results"
    sweep = _commbench("sweep", "--sizes", "1K", "-n", "2", "-w", "1", "--nproc", "2", "--out", str(out), env=env)
    assert sweep.returncode == 0, sweep.stderr.decode()
    files = list(out.glob("*.parquet"))
    assert len(files) == 1
    report = _commbench("report", str(files[0]), "--out", str(tmp_path / "report.html"), env=env)
    assert report.returncode == 0, report.stderr.decode()
    doctor_json = _commbench("doctor", "--json", env=env, timeout=120)
    doctor_text = _commbench("doctor", env=env, timeout=120)
    assert doctor_json.returncode in (0, 1) and doctor_text.returncode in (0, 1), doctor_json.stderr.decode()
    blobs = {"results": files[0].read_bytes(), "report": (tmp_path / "report.html").read_bytes()}
    import pyarrow.parquet as pq

    table = pq.read_table(files[0])
    blobs["results cells"] = json.dumps(table.to_pylist(), default=str).encode()
    for name, proc in {"sweep": sweep, "report": report, "doctor --json": doctor_json, "doctor": doctor_text}.items():
        blobs[f"{name} output"] = proc.stdout + proc.stderr
    leaks = [f"{where}: {name}" for where, blob in blobs.items() for name, value in PLANTED.items()
             if value.encode() in blob]
    assert leaks == []
    stored = json.loads(table.column("env")[0].as_py())
    assert stored["NCCL_PASS"] == envinfo.NOT_RECORDED and stored["GLOO_X"] == envinfo.NOT_RECORDED
    assert "UCX_SECRETISH" not in stored
    assert stored["NCCL_DEBUG_SUBSYS"] == KNOWN["NCCL_DEBUG_SUBSYS"]  # a known setting keeps its value
    facts = json.loads(doctor_json.stdout)
    assert KNOWN["NCCL_DEBUG_SUBSYS"].encode() in doctor_json.stdout, facts
