"""The wire columns on the lab (root): what each host's eth0 counted during a point matches the
bytes the collective had to move, framed as TCP/IP frames; a tiny tbf queue on one host shows as
that host's qdisc drops and TCP retransmissions, named in the table, at the end and in the rows;
a clean lab flags nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from functools import partial

import pandas as pd
import pytest

from commbench.core import wire
import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cw"
ENV = lab_env(PREFIX)
MTU = 1500
FRAMING = (MTU + 14) / (MTU - 52)  # Ethernet header per frame / TCP payload per frame (IP 20 + TCP 32)
BUS_FACTOR = {"all_reduce": 1.0, "all_gather": 0.5}  # 2 ranks: 2(n-1)/n and (n-1)/n of the size per rank


cb = partial(helpers.cb, env=ENV, timeout=600)  # python -m commbench in a subprocess (tests/helpers.py)


@pytest.fixture(scope="module")
def lab():
    cb("lab", "down")
    res = cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", str(MTU), "--subnet", "10.238.0.0/24")
    assert res.returncode == 0, res.stderr
    yield
    cb("lab", "down")


def sweep(out, *args: str) -> tuple[subprocess.CompletedProcess, pd.DataFrame]:
    res = cb("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", "-w", "1", "-n", "5", "--timeout", "120",
             "--out", str(out), *args)
    assert res.returncode == 0, res.stdout + res.stderr
    return res, pd.read_parquet(out)


def test_clean_lab_flags_nothing(lab, tmp_path):
    res, df = sweep(tmp_path / "clean.parquet", "--collective", "allreduce,allgather", "-b", "1M", "-e", "16M",
                    "-f", "4")
    assert "wire:" not in res.stdout and "wire:" not in res.stderr
    assert df.wire_trouble.notna().all() and not df.wire_trouble.any()
    for value in df.wire:
        assert set(json.loads(value)["hosts"]) == {f"{PREFIX}node1", f"{PREFIX}node2"}


def test_eth0_bytes_are_the_collective_bytes_in_frames(lab, tmp_path):
    # --frames: veth counts each frame, as a NIC does (by default it counts a GSO packet once)
    assert cb("lab", "set", "--frames").returncode == 0
    try:
        _, df = sweep(tmp_path / "frames.parquet", "--collective", "allreduce,allgather", "--sizes", "16M")
    finally:
        cb("lab", "set", "--no-frames")
    assert set(df.collective) == {"all_reduce", "all_gather"}
    for row in df.itertuples():
        calls = row.warmup + row.iters  # every call between the snapshots moves the payload
        expected = row.size_bytes * BUS_FACTOR[row.collective] * calls * FRAMING
        hosts = json.loads(row.wire)["hosts"]
        for host, entry in hosts.items():
            sent = entry["counters"]["eth0"]["tx_bytes"]
            print(f"\n{row.collective} in_place={row.in_place} {host}: eth0 sent {sent:,} B, expected {expected:,.0f} "
                  f"({sent / expected:.4f}), cost {entry['cost_ms']} ms")
            assert sent == pytest.approx(expected, rel=0.03)
            assert entry["per_payload"] == pytest.approx(FRAMING, rel=0.03)
        assert row.wire_per_payload == pytest.approx(FRAMING, rel=0.03)


def test_tiny_queue_names_host_interface_and_counter(lab, tmp_path):
    assert cb("lab", "set", "--node", f"{PREFIX}node2", "--queue", "40000").returncode == 0
    try:
        status = cb("lab", "status")  # the planted queue is shown, as the kernel has it
        res, df = sweep(tmp_path / "drops.parquet", "--collective", "allreduce", "-b", "512K", "-e", "1M")
    finally:
        cb("lab", "set", "--queue", "0", "--no-frames")
    queues = {line.split()[1]: line.split("│")[-2].strip() for line in status.stdout.splitlines() if PREFIX in line}
    assert queues == {f"{PREFIX}node1": "100 ms", f"{PREFIX}node2": "40000 B"}, status.stdout
    restored = json.loads(cb("lab", "status", "--json").stdout)["hosts"]
    assert [(h["queue"], h["queue_latency_us"]) for h in restored] == [(None, 100000)] * 2
    sick = f"{PREFIX}node2 eth0 qdisc drops +"
    assert df.wire_trouble.all(), df[["size_bytes", "wire_trouble"]]
    table = [line for line in res.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(table) == 2 and all("! wire:" in line for line in table), res.stdout
    assert f"commbench: wire: {sick}" in res.stderr and "(drop) during 2 of 2 point(s)" in res.stderr, res.stderr
    for value in df.wire:
        node2 = json.loads(value)["hosts"][f"{PREFIX}node2"]
        trouble = {(where, counter): delta for where, counter, delta, _ in node2["trouble"]}
        assert trouble[("eth0 qdisc", "drops")] > 0 and trouble[("tcp", "RetransSegs")] > 0


def test_doctor_watch_names_the_dropping_queue_while_traffic_runs(lab, tmp_path):
    assert cb("lab", "set", "--node", f"{PREFIX}node2", "--queue", "40000").returncode == 0
    traffic = subprocess.Popen([sys.executable, "-m", "commbench", "lab", "run", "--",
                                sys.executable, "-m", "commbench", "sweep", "--sizes", "1M", "-n", "5", "-w", "1",
                                "-R", "200", "--timeout", "60",
                                "--out", str(tmp_path / "bg.parquet")], env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        for line in traffic.stdout:  # the first measured point: traffic flows
            if line.strip()[:1].isdigit():
                break
        res = cb("lab", "exec", f"{PREFIX}node2", "--", sys.executable, "-m", "commbench", "doctor", "--watch", "3",
                 "--verbose")  # the watched rates are facts: --verbose (findings come first either way)
        quiet = cb("lab", "exec", f"{PREFIX}node1", "--", sys.executable, "-m", "commbench", "doctor")
    finally:
        traffic.send_signal(signal.SIGTERM)
        traffic.communicate(timeout=120)
        cb("lab", "set", "--queue", "0")
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"PROBLEM [counters] {PREFIX}node2 eth0 qdisc: drop counters rose in 3 s: drops " in res.stdout
    assert f"{PREFIX}node2 tcp: retransmit counters rose in 3 s: RetransSegs " in res.stdout
    assert "watched 3 s: eth0: " in res.stdout and "Mbit/s out" in res.stdout
    # without --watch, standing counters of a veth (no NIC counters) and the stack's since boot are not judged
    assert quiet.returncode == 0 and "[counters]" not in quiet.stdout, quiet.stdout


def test_compare_names_the_new_drops_as_the_likely_cause(lab, tmp_path):
    args = ("--collective", "allreduce", "-b", "512K", "-e", "1M", "-R", "2")
    sweep(tmp_path / "before.parquet", *args)
    assert cb("lab", "set", "--node", f"{PREFIX}node2", "--queue", "40000").returncode == 0
    try:
        sweep(tmp_path / "after.parquet", *args)
    finally:
        cb("lab", "set", "--queue", "0")
    res = cb("compare", str(tmp_path / "before.parquet"), str(tmp_path / "after.parquet"), "--wide")  # notes unwrapped
    assert res.returncode in (1, 3), res.stdout + res.stderr  # slower, or too few repetitions to say
    lines = [line for line in res.stdout.splitlines() if "likely cause:" in line]
    assert len(lines) == 2, res.stdout  # both sizes
    # the drops are new; retransmissions may have been counted before too (a CPU stall's spurious timeout
    # on a clean link: one CI run counted 45 at 1 MiB), then named with their before figure
    assert all(f"{PREFIX}node2 eth0 qdisc drops +" in line and "were 0 before)" in line for line in lines), lines
    report = tmp_path / "report.md"
    assert cb("report", str(tmp_path / "after.parquet"), "--baseline", str(tmp_path / "before.parquet"),
              "--out", str(report)).returncode == 0
    text = report.read_text()
    assert "## Wire" in text and f"{PREFIX}node2" in text and "drops" in text


def run_with_a_flap(*command: str) -> tuple[str, str]:
    """A commbench command on every lab host (`lab run`); once its first row is printed (the ranks
    are connected), host 2's switch port goes down for a second and up again. Its stdout after that
    row and its stderr; it must end with exit 0."""
    run = subprocess.Popen([sys.executable, "-m", "commbench", "lab", "run", "--", sys.executable, "-m", "commbench",
                            *command, "--progress", "off"], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    port = f"{PREFIX}veth2"
    try:
        for line in run.stdout:
            if line.strip()[:1].isdigit():
                break
        subprocess.run(["ip", "link", "set", port, "down"], check=True, timeout=30)
        subprocess.run(["sleep", "1"], check=True)
        subprocess.run(["ip", "link", "set", port, "up"], check=True, timeout=30)
        rest, err = run.communicate(timeout=300)
    finally:
        subprocess.run(["ip", "link", "set", port, "up"], timeout=30)
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, rest[-3000:] + err[-3000:]
    return rest, err


def test_a_link_that_flaps_mid_run_is_named_and_the_run_goes_on(lab, tmp_path):
    """host 2's switch port taken down for a second and up again while a sweep runs, as a loose
    cable or a flapping switch port does: TCP carries the run over the gap (exit 0, every point
    kept), and the point it fell in names the link that lost its carrier, before what followed."""
    out = tmp_path / "flap.parquet"
    rest, err = run_with_a_flap("sweep", "--sizes", "1M", "-n", "5", "-w", "1", "-R", "12", "--timeout", "120",
                                "--out", str(out))
    df = pd.read_parquet(out)
    assert len(df) == 12 and set(df.wrong) == {0}
    named = [wire.troubles(v) for v in df.wire]  # causes first
    hit = [t for t in named if any(x.counter == "carrier_down_count" for x in t)]
    assert len(hit) == 1, named  # one flap, one point
    first = hit[0][0]
    assert (first.host, first.where, first.counter, first.delta, first.kind) == (
        f"{PREFIX}node2", "eth0", "carrier_down_count", 1, "link")
    assert f"! wire: {PREFIX}node2 eth0 carrier_down_count +1" in rest
    assert f"commbench: wire: {PREFIX}node2 eth0 carrier_down_count +1 (link) during 1 of 12 point(s)" in err, err
    assert "carrier_down_count" not in json.dumps([json.loads(v)["hosts"][f"{PREFIX}node1"] for v in df.wire])


def test_a_link_that_flaps_during_pairs_is_named_on_the_transfer_it_hit(lab, tmp_path):
    """pairs reads each host's counters around every transfer (a host of one rank: nothing else of
    its own is on the wire meanwhile), each end its own host: the flap is named on the row of the
    transfer that crossed it, with the host and interface."""
    out = tmp_path / "pairs.parquet"
    rest, err = run_with_a_flap("pairs", "--size", "4M", "-n", "5", "-w", "1", "-R", "6", "--timeout", "60",
                                "--out", str(out))
    df = pd.read_parquet(out)
    assert len(df) == 12 and df.status.isna().all() and df.wire.notna().all()
    assert all(set(json.loads(v)["hosts"]) == {f"{PREFIX}node1", f"{PREFIX}node2"} for v in df.wire)
    named = [wire.troubles(v) for v in df.wire]
    hit = [t for t in named if any(x.counter == "carrier_down_count" for x in t)]
    assert len(hit) == 1, named
    assert (hit[0][0].host, hit[0][0].where, hit[0][0].counter) == (f"{PREFIX}node2", "eth0", "carrier_down_count")
    assert f"! wire: {PREFIX}node2 eth0 carrier_down_count +1" in rest
    assert f"commbench: wire: {PREFIX}node2 eth0 carrier_down_count +1 (link) during 1 of 12 point(s)" in err, err


def test_transfers_a_starving_queue_times_out_carry_the_wire_and_the_verdict_says_packets_were_lost(lab, tmp_path):
    """A tbf queue of a few frames (4000 B) on host 2: TCP starves (16 MiB outlasted a 300 s timeout),
    so each 64 MiB transfer times out at --timeout 5 while both ranks answer the control plane. The
    failed rows keep what the wire did until then (the drops at host 2's queue, the retransmissions),
    and the verdict says packets were lost on the data path rather than naming a hung process."""
    out = tmp_path / "starved.parquet"
    assert cb("lab", "set", "--node", f"{PREFIX}node2", "--queue", "4000").returncode == 0
    try:
        res = cb("lab", "run", "--", sys.executable, "-m", "commbench", "pairs", "--size", "64M", "-w", "1", "-n", "3",
                 "--timeout", "5", "--out", str(out))
    finally:
        cb("lab", "set", "--queue", "0")
    assert res.returncode == 3, res.stdout + res.stderr  # two hosts: either end may be to blame
    df = pd.read_parquet(out)
    failed = df[df.status == "timeout"]
    assert len(failed) >= 2 and failed.wire.notna().all(), df[["src_host", "dst_host", "status"]]
    lost = [t for v in failed.wire for t in wire.troubles(v) if t.kind in ("drop", "retransmit")]
    assert any(t.host == f"{PREFIX}node2" and t.counter == "drops" for t in lost), lost
    rows = [line for line in res.stdout.splitlines() if "FAILED" in line]
    assert rows and all("! wire:" in line for line in rows), res.stdout
    assert (f"wire during the failed transfers: {PREFIX}node2 eth0 qdisc drops +" in res.stdout
            and "packets were lost on the data path: a sick link, NIC or queue, not a hung process" in res.stdout), \
        res.stdout
