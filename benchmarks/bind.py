"""Rank binding: the default sweep with --bind none (the scheduler places the ranks) and --bind cores
(each rank on its own share of the cores; what `--bind auto` does where every rank gets 2 CPUs), side by side.

    flock /tmp/commbench-heavy.lock python benchmarks/bind.py      # 2 rounds (8 sweeps), ~2 min on 2 cores
    python benchmarks/bind.py --rounds 1 --no-save                  # smoke run

Each sweep runs as a user runs it (`python -m commbench sweep --bind none|cores`, 2 local gloo
ranks, the default grid: all_reduce 8 B .. 64 MiB, both placements torch offers), interleaved
A B B A per round so that drift hits both alike. Per size and side: busbw (the median over the
side's points of that size: every run, every placement) and the spread of per-iteration times,
p90 / median of each point's samples_us (the median over its points); the CPUs each rank ran on
come from the results' rank_cpus. Figures from 1 MiB carry the bandwidth; below it, time.
Writes benchmarks/results/bind.{md,json}.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SIDES = ("none", "cores")


def run_sweep(bind: str, out: Path) -> float:
    argv = [sys.executable, "-m", "commbench", "sweep", "--nproc", "2", "--bind", bind, "--out", str(out)]
    start = time.monotonic()
    proc = subprocess.run(argv, env=common.child_env(), capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(f"sweep --bind {bind} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.monotonic() - start


def spread(samples) -> float:
    return float(np.percentile(samples, 90) / np.median(samples))


def measure(rounds: int) -> dict:
    frames: dict[str, list[pd.DataFrame]] = {s: [] for s in SIDES}
    walls: dict[str, list[float]] = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        for i, side in enumerate(["none", "cores", "cores", "none"] * rounds):
            out = Path(tmp) / f"{i}-{side}.parquet"
            walls[side].append(run_sweep(side, out))
            df = pd.read_parquet(out, columns=["size_bytes", "in_place", "busbw_GBps", "time_us", "samples_us",
                                               "rank_cpus"])
            df["run"] = i
            frames[side].append(df)
    both = {s: pd.concat(v, ignore_index=True) for s, v in frames.items()}
    sizes = sorted(set(both["none"].size_bytes))
    per_size = {}
    for size in sizes:
        row = {}
        for side, df in both.items():
            at = df[df.size_bytes == size]
            row[side] = {"busbw_GBps": float(at.busbw_GBps.median()), "time_us": float(at.time_us.median()),
                         "p90_over_median": float(statistics.median(spread(s) for s in at.samples_us)),
                         "points": int(len(at))}
        row["busbw_ratio_auto_over_none"] = row["cores"]["busbw_GBps"] / row["none"]["busbw_GBps"]
        row["time_ratio_auto_over_none"] = row["cores"]["time_us"] / row["none"]["time_us"]
        per_size[int(size)] = row
    cpus = {s: sorted({" | ".join(v) for v in df.rank_cpus}) for s, df in both.items()}
    return {"rounds": rounds, "order": "A B B A per round (A = none, B = cores)", "per_size": per_size,
            "rank_cpus": cpus, "wall_s": {s: [round(w, 1) for w in v] for s, v in walls.items()},
            "command": "commbench sweep --nproc 2 --bind none | --bind cores"}


def _large_summary(run: dict) -> dict:
    large = {s: r for s, r in run["per_size"].items() if int(s) >= 2**20}
    ratios = [r["busbw_ratio_auto_over_none"] for r in large.values()]
    return {"busbw_ratio_min": min(ratios), "busbw_ratio_max": max(ratios),
            "busbw_ratio_median": statistics.median(ratios),
            "spread_none_median": statistics.median(r["none"]["p90_over_median"] for r in large.values()),
            "spread_auto_median": statistics.median(r["cores"]["p90_over_median"] for r in large.values())}


def markdown(run: dict, m: dict, other: str) -> str:
    rows = []
    for size, r in run["per_size"].items():
        n, a = r["none"], r["cores"]
        if int(size) >= 2**20:
            fig = f"{n['busbw_GBps']:.3f} | {a['busbw_GBps']:.3f} | **{r['busbw_ratio_auto_over_none']:.2f}**"
        else:
            fig = f"{n['time_us']:.0f} us | {a['time_us']:.0f} us | time **{r['time_ratio_auto_over_none']:.2f}**"
        rows.append(f"| {common.human(int(size))} | {fig} | {n['p90_over_median']:.2f} | {a['p90_over_median']:.2f} |")
    s = _large_summary(run)
    cpus = "; ".join(f"--bind {k}: {', '.join(v)}" for k, v in run["rank_cpus"].items())
    walls = ", ".join(f"{k} {v}" for k, v in run["wall_s"].items())
    return (f"# Rank binding: the default sweep with --bind none and --bind cores\n\n{common.machine_line(m)}.\n"
            f"Also running: {other}.\n\n`{run['command']}`, {run['rounds']} round(s), {run['order']}; each side's "
            f"figure is the median over its points of a size (every run, both placements).\n\n"
            f"Rank CPUs (rank 0 | rank 1, from rank_cpus): {cpus}. Wall s per sweep: {walls}.\n\n"
            "| size | busbw GB/s (or time), none | cores | cores / none | p90/median, none | cores |\n"
            "|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows) +
            f"\n\nFrom 1 MiB: busbw cores / none **{s['busbw_ratio_min']:.2f}..{s['busbw_ratio_max']:.2f}** (median "
            f"{s['busbw_ratio_median']:.2f}); per-iteration p90/median **{s['spread_none_median']:.2f}** unbound, "
            f"**{s['spread_auto_median']:.2f}** bound (median over those sizes).\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--other", default="nothing else (no CI run, no other benchmark)",
                    help="what else ran on the machine meanwhile, for the record")
    args = ap.parse_args()
    m = common.machine()
    run = measure(args.rounds)
    run["summary_from_1MiB"] = _large_summary(run)
    run["also_running"] = args.other
    text = markdown(run, m, args.other)
    if not args.no_save:
        common.write("bind", {"machine": m, **run}, text)
    print(text)


if __name__ == "__main__":
    main()
