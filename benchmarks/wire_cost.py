"""What the counter snapshots around every point cost (issue #16: at most 5 ms per point per host,
nothing inside the timed loop).

1. One snapshot alone (net/wiresource.py LiveSampler.read), as a host's reader takes it: this
   machine's interfaces that carry traffic (lo, and eth0 where it exists), N reads back to back.
   A point takes two.
2. On the lab (root; its own lab, prefix cb16, 2 hosts at 1gbit): the same sweep with --wire and
   with --no-wire, alternating A B B A, so that drift hits both alike. Per size, the median time
   of a point with counters over the median without (the timed loop must not notice), and the
   snapshots' cost as each host's reader measured it during the run (the `cost_ms` of every
   host's entry in the wire column: both snapshots of a point, under the load of the run).

Writes benchmarks/results/wire_cost.{md,json}.

    python benchmarks/wire_cost.py [--reads 2000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

PREFIX = "cb16"
SWEEP = ["sweep", "--collective", "allreduce", "--sizes", "64K,1M,16M", "-w", "2", "-n", "20", "-R", "4"]


def snapshot_cost(reads: int) -> dict:
    from commbench.net.wiresource import LiveSampler, ib_ports

    names = [n for n in ("lo", "eth0") if Path(f"/proc/sys/net/ipv4/conf/{n}").exists()]
    sampler = LiveSampler(names, ib_ports())
    try:
        sampler.read()  # the first read opens what the rest reuse
        times = []
        for _ in range(reads):
            start = time.perf_counter()
            sampler.read()
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        sampler.close()
    times.sort()
    return {"interfaces": names, "rdma_ports": len(ib_ports()), "reads": reads,
            "median_ms": statistics.median(times), "p99_ms": times[int(0.99 * (len(times) - 1))],
            "per_point_ms": 2 * statistics.median(times)}


def lab(env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "commbench", "lab", *args], env=env, check=True, capture_output=True)


def lab_sweeps(rounds: int) -> dict:
    import pandas as pd

    env = {**common.child_env(), "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": f"/run/commbench-lab-{PREFIX}"}
    frames = {"wire": [], "no-wire": []}
    with tempfile.TemporaryDirectory() as tmp:
        lab(env, "down")
        lab(env, "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.245.16.0/24")
        try:
            for i, which in enumerate(["wire", "no-wire", "no-wire", "wire"] * rounds):
                out = Path(tmp) / f"{i}-{which}.parquet"
                proc = subprocess.run([sys.executable, "-m", "commbench", "lab", "run", "--", sys.executable, "-m",
                                       "commbench", *SWEEP, f"--{which}", "--out", str(out)], env=env,
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"sweep --{which} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
                frames[which].append(pd.read_parquet(out))
        finally:
            lab(env, "down")
    both = {k: pd.concat(v) for k, v in frames.items()}
    ratio, spread = {}, {}
    for size in sorted(set(both["wire"].size_bytes)):
        on, off = (both[k][both[k].size_bytes == size].time_us for k in ("wire", "no-wire"))
        ratio[int(size)] = float(on.median() / off.median())
        # how much the points of one side differ among themselves: the noise a ratio sits in
        spread[int(size)] = float((off.quantile(0.75) - off.quantile(0.25)) / off.median())
    costs = [e["cost_ms"] for w in both["wire"].wire for e in json.loads(w)["hosts"].values()]
    return {"command": "lab run -- commbench " + " ".join(SWEEP) + " --wire | --no-wire", "hosts": 2, "rate": "1gbit",
            "points_per_side": len(both["wire"]), "time_ratio_wire_over_nowire": ratio,
            "nowire_iqr_over_median": spread,
            "cost_ms_median": statistics.median(costs), "cost_ms_max": max(costs), "cost_samples": len(costs)}


def markdown(snap: dict, run: dict | None, m: dict) -> str:
    text = (f"# Counter snapshots: what they cost\n\n{common.machine_line(m)}.\n\n"
            f"## One snapshot\n\n{snap['reads']} reads of {', '.join(snap['interfaces'])} "
            f"({snap['rdma_ports']} RDMA ports): median **{snap['median_ms']:.3f} ms**, p99 {snap['p99_ms']:.3f} ms; "
            f"two a point: **{snap['per_point_ms']:.2f} ms** (the issue allows 5 ms per point per host).\n")
    if run is None:
        return text + "\n## On the lab\n\nNot run: the lab needs root.\n"
    rows = "".join(f"| {common.human(s)} | {r:.3f} | {run['nowire_iqr_over_median'][s]:.1%} |\n"
                   for s, r in run["time_ratio_wire_over_nowire"].items())
    return text + (f"\n## On the lab\n\n`{run['command']}`, {run['hosts']} hosts at {run['rate']}, A B B A, "
                   f"{run['points_per_side']} points a side.\n\n"
                   f"| size | median time, --wire / --no-wire | spread of --no-wire points (IQR / median) |\n"
                   f"|---|---|---|\n"
                   f"{rows}\nBoth snapshots of a point, as each host's reader timed them during the run: median "
                   f"**{run['cost_ms_median']:.2f} ms**, max {run['cost_ms_max']:.2f} ms ({run['cost_samples']} "
                   "host-points).\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    m = common.machine()
    snap = snapshot_cost(args.reads)
    run = lab_sweeps(args.rounds) if os.geteuid() == 0 else None
    figures = {"machine": m, "snapshot": snap, "lab": run}
    common.write("wire_cost", figures, markdown(snap, run, m))
    print(markdown(snap, run, m))


if __name__ == "__main__":
    main()
