"""What the control plane costs a healthy `pairs` run (root; its own lab, prefix cb15).

`commbench pairs` on four lab hosts at 1gbit, timed as the user sees it (`lab run`, wall clock),
with this checkout and with a baseline revision (default e826e56, before pairs ran each link on a
group of its own over the control plane), alternating A B B A so that drift hits both alike.
Writes benchmarks/results/pairs_overhead.{md,json}.

    python benchmarks/pairs_overhead.py [--baseline REV] [--rounds 2]
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

import common  # noqa: F401  (puts this checkout's commbench first on sys.path)

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "cb15"
PAIRS = ["pairs", "--size", "16M", "-w", "1", "-n", "3"]


def lab(env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "commbench", "lab", *args], env=env, check=True, capture_output=True)


def timed_run(env: dict, tree: Path, out: Path) -> float:
    ranks_env = {**env, "PYTHONPATH": str(tree)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "commbench", "lab", "run", "--", sys.executable, "-m", "commbench",
                           *PAIRS, "--out", str(out)], env=ranks_env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"pairs failed with {proc.returncode} in {tree}:\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="e826e56")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    env = {**os.environ, "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": f"/run/commbench-lab-{PREFIX}"}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(base), args.baseline], cwd=ROOT, check=True)
        try:
            lab(env, "down")
            lab(env, "up", "--nodes", "4", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.245.15.0/24")
            times: dict[str, list[float]] = {"baseline": [], "current": []}
            order = ["baseline", "current", "current", "baseline"] * args.rounds
            for i, which in enumerate(order):
                tree = base if which == "baseline" else ROOT
                times[which].append(timed_run(env, tree, Path(tmp) / f"{i}-{which}.parquet"))
        finally:
            lab(env, "down")
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["current"] / med["baseline"]
    result = {"command": " ".join(["lab run -- commbench", *PAIRS]), "hosts": 4, "rate": "1gbit",
              "baseline": args.baseline, "times_s": times, "median_s": med, "ratio": ratio}
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "pairs_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "pairs_overhead.md").write_text(
        f"# pairs on a healthy lab: control plane vs {args.baseline}\n\n"
        f"`{result['command']}`, 4 hosts at 1gbit, A B B A x {args.rounds}, wall clock of `lab run`.\n\n"
        f"| tree | runs (s) | median (s) |\n|---|---|---|\n"
        + "".join(f"| {k} | {', '.join(f'{x:.1f}' for x in v)} | {med[k]:.2f} |\n" for k, v in times.items())
        + f"\nratio current / baseline: {ratio:.3f} (the issue allows 1.10)\n")
    print(f"median {med['baseline']:.2f} s ({args.baseline}) vs {med['current']:.2f} s (this tree): ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
