"""The lab for real: network namespaces, veth, a bridge and tbf on this machine (root only).

Every test uses its own lab instance (prefix `ct`, subnet 10.233.0.0/24) so that a user's lab or
another test's is never touched. Traffic stays inside the lab's namespaces: the bridge has no
address and the hosts have no default route.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

import helpers  # tests/helpers.py

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, veth, tc)"),
    pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                       reason="iproute2 (ip, tc) is not installed: apt-get install iproute2"),
]

PREFIX = "ct"
STATE_DIR = Path(f"/run/commbench-lab-{PREFIX}")
SUBNET = "10.233.0.0/24"
ENV = {**os.environ, "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": str(STATE_DIR)}


cb = partial(helpers.cb, env=ENV)  # python -m commbench in a subprocess (tests/helpers.py)


def leftovers() -> list[str]:
    """Anything of this test's lab that still exists: namespaces, links, qdiscs, processes, state."""
    netns = os.listdir("/var/run/netns") if os.path.isdir("/var/run/netns") else []
    left = [f"netns {n}" for n in netns if n.startswith(PREFIX)]
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout)
    left += [f"link {link['ifname']}" for link in links if link["ifname"].startswith(PREFIX)]
    qdiscs = json.loads(subprocess.run(["tc", "-j", "qdisc", "show"], capture_output=True, text=True).stdout or "[]")
    left += [f"qdisc {q['dev']}" for q in qdiscs if q.get("dev", "").startswith(PREFIX)]
    if STATE_DIR.exists():
        left.append(f"dir {STATE_DIR}")
    return left


@pytest.fixture
def clean_lab():
    cb("lab", "down")
    assert leftovers() == [], "a previous test left its lab behind"
    yield
    cb("lab", "down")


@pytest.mark.failure(
    row="lab-traffic-leaving-lab",
    section="Security",
    failure="lab traffic leaving the lab",
    does="lab hosts have addresses only inside their namespaces and no default route",
)
def test_lifecycle_status_set_exec_and_down(clean_lab):
    up = cb("lab", "up", "--nodes", "3", "--rate", "1gbit", "--mtu", "1500", "--subnet", SUBNET, check=True)
    assert "3 hosts" in up.stdout

    again = cb("lab", "up", "--nodes", "2", "--subnet", SUBNET)
    assert again.returncode == 2 and "already up" in again.stderr and len(again.stderr.strip().splitlines()) == 1

    hosts = json.loads(cb("lab", "status", "--json", check=True).stdout)["hosts"]
    assert [h["host"] for h in hosts] == ["ctnode1", "ctnode2", "ctnode3"]
    assert [h["addr"] for h in hosts] == ["10.233.0.1", "10.233.0.2", "10.233.0.3"]
    assert {h["mtu"] for h in hosts} == {1500} and {h["rate_bits"] for h in hosts} == {1e9}

    cb("lab", "set", "--node", "ctnode2", "--mtu", "9000", "--rate", "500mbit", check=True)
    hosts = {h["host"]: h for h in json.loads(cb("lab", "status", "--json", check=True).stdout)["hosts"]}
    assert hosts["ctnode2"]["mtu"] == 9000 and hosts["ctnode2"]["rate_bits"] == 5e8
    assert hosts["ctnode1"]["mtu"] == 1500 and hosts["ctnode1"]["rate_bits"] == 1e9
    # the bridge side of the link is shaped too (both directions)
    qdisc = json.loads(subprocess.run(["tc", "-j", "qdisc", "show", "dev", f"{PREFIX}veth2"],
                                      capture_output=True, text=True).stdout)
    assert any(q["kind"] == "tbf" and q["options"]["rate"] * 8 == 5e8 for q in qdisc)

    name = cb("lab", "exec", "ctnode3", "--", "hostname", check=True)
    assert name.stdout.strip() == "ctnode3"
    routes = cb("lab", "exec", "ctnode1", "--", "ip", "route", check=True).stdout
    assert "default" not in routes and "10.233.0.0/24" in routes
    ping = (cb("lab", "exec", "ctnode1", "--", "ping", "-c", "1", "-W", "2", "10.233.0.3")
            if shutil.which("ping") else None)
    if ping is not None:
        assert ping.returncode == 0
    assert cb("lab", "exec", "ctnode1", "--", "false").returncode == 1
    unknown = cb("lab", "exec", "ctnode9", "--", "true")
    assert unknown.returncode == 2 and "ctnode9" in unknown.stderr

    down = cb("lab", "down", check=True)
    assert "netns ctnode1" in down.stdout
    assert leftovers() == []
    assert "no lab was up" in cb("lab", "down", check=True).stdout


@pytest.mark.failure(row="lab-acting-namespaces-interfaces-did")
def test_down_after_a_crash_mid_up_removes_exactly_what_was_made(clean_lab):
    foreign_ns = f"{PREFIX}foreign"
    subprocess.run(["ip", "netns", "add", foreign_ns], check=True)
    subprocess.run(["ip", "link", "add", f"{PREFIX}foreign0", "type", "veth", "peer", "name", f"{PREFIX}foreign1"],
                   check=True)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "commbench", "lab", "up", "--nodes", "12", "--subnet", SUBNET],
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state = STATE_DIR / "state.json"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if state.exists() and len(json.loads(state.read_text() or "{}").get("nodes", [])) >= 3:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        made = json.loads(state.read_text())
        assert 3 <= len(made["nodes"]) < 12, "the crash should come mid-way"

        cb("lab", "down", check=True)
        assert sorted(leftovers()) == sorted([f"netns {foreign_ns}", f"link {PREFIX}foreign0",
                                              f"link {PREFIX}foreign1"])
    finally:
        subprocess.run(["ip", "netns", "del", foreign_ns])
        subprocess.run(["ip", "link", "del", f"{PREFIX}foreign0"])


@pytest.mark.failure(
    row="lab-acting-namespaces-interfaces-did",
    section="Security",
    failure="the lab acting on namespaces or interfaces it did not create",
    does="`up` refuses names that exist; `down` removes exactly what its state file records, also after a crash "
         "mid-`up`",
)
def test_up_refuses_names_it_did_not_make(clean_lab):
    subprocess.run(["ip", "netns", "add", f"{PREFIX}node1"], check=True)
    try:
        res = cb("lab", "up", "--nodes", "2", "--subnet", SUBNET)
        assert res.returncode == 2 and f"{PREFIX}node1 already exists" in res.stderr
        assert os.path.exists(f"/var/run/netns/{PREFIX}node1")
    finally:
        subprocess.run(["ip", "netns", "del", f"{PREFIX}node1"])


@pytest.mark.parametrize("args, message", [
    (["lab", "up", "--nodes", "1"], "--nodes 1"),
    (["lab", "up", "--rate", "fast"], "not a tc rate"),
    (["lab", "up", "--mtu", "100"], "--mtu 100"),
    (["lab", "up", "--subnet", "8.8.8.0/24"], "private range"),
    (["lab", "status"], "no lab is up"),
    (["lab", "set", "--mtu", "9000"], "no lab is up"),
    (["lab", "run", "--", "true"], "no lab is up"),
])
@pytest.mark.failure(row="lab-flags-nodes-subnet-mtu")
def test_bad_lab_input_is_one_line_exit_2(clean_lab, args, message):
    res = cb(*args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in res.stderr


def payload_limit_GBps(rate_bits: float, mtu: int) -> float:
    """TCP payload over Ethernet: MTU-52 bytes (IP+TCP with timestamps) per MTU+14 on the wire."""
    return rate_bits / 8 * (mtu - 52) / (mtu + 14) / 1e9


def lab_sweep(tmp_path: Path, nodes: int, mtu: int, collectives: str) -> pd.DataFrame:
    cb("lab", "down")
    cb("lab", "up", "--nodes", str(nodes), "--rate", "1gbit", "--mtu", str(mtu), "--subnet", SUBNET, check=True)
    out = tmp_path / f"lab-{nodes}-{mtu}.parquet"
    res = cb("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", "--collective", collectives,
             "-b", "64M", "-e", "64M", "-n", "5", "-w", "2", "--out", str(out), timeout=600)  # only 64 MiB is judged
    assert res.returncode == 0, res.stdout + res.stderr
    df = pd.read_parquet(out)
    cb("lab", "down", check=True)
    return df


# One MTU a host count: that jumbo frames beat MTU 1500 is measured by test_lab_mtu (both MTUs in one run,
# three repetitions each) and test_lab_compare (interleaved runs), where a 4% gain is judged on more than
# one sample a side; here one sample each once put MTU 9000 at 92% of its limit and below MTU 1500.
@pytest.mark.parametrize("nodes, mtu", [(2, 1500), (4, 9000)])
def test_link_rate_is_reached(clean_lab, tmp_path, nodes, mtu):
    collectives = "allreduce,allgather,reducescatter" if nodes == 2 else "allreduce"
    df = lab_sweep(tmp_path, nodes, mtu, collectives)
    assert set(df.world_size) == {nodes} and set(df.nnodes) == {nodes} and set(df.launcher) == {"lab"}
    assert list(df.hosts.iloc[0]) == [f"{PREFIX}node{i + 1}" for i in range(nodes)]
    assert set(df.mtu) == {mtu} and set(df.iface) == {"eth0"} and set(df.wrong) == {0}
    top = df[df.size_bytes == df.size_bytes.max()]
    row = top[top.collective == "all_reduce"].iloc[0]
    ar = float(row.busbw_GBps)
    # "is reached": the fastest of the 5 timed calls, which a CPU stall of this 2-core VM cannot speed
    # up; the median (a CI run of 2026-12-03: 0.83 of the limit at 4 hosts, 0.935-0.947 alone) is
    # held to a lower bar, so that a wrong rate or MTU still fails both
    best = ar * float(row.time_us) / float(row.time_us_min)
    limit = payload_limit_GBps(1e9, mtu)
    figures = {c: round(float(g.busbw_GBps.max()), 4) for c, g in top.groupby("collective")}
    print(f"\nlab {nodes} hosts, 1gbit, MTU {mtu}: busbw at 64 MiB {figures} GB/s; "
          f"payload limit {limit:.4f}; all_reduce reaches {best / limit:.3f} of it (median {ar / limit:.3f})")
    assert best >= 0.9 * limit, f"all_reduce's fastest call {best:.4f} GB/s < 0.9 x payload limit {limit:.4f}"
    assert ar >= 0.75 * limit, f"all_reduce busbw {ar:.4f} GB/s < 0.75 x payload limit {limit:.4f}"
