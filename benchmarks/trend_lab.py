"""`commbench trend` on real lab runs (issue #41; docs/TREND.md): 3 lab hosts at 1gbit, 24 short
`pairs` runs, host 3's rate lowered to 300mbit from run 16; then `trend` over all 24 runs (it should
name run 16, host 3's links and the link rate) and over the 15 unchanged ones (it should name
nothing). Root only (the lab); about 5 s a run on an idle 2-core machine.

    python benchmarks/trend_lab.py [--runs 24] [--change-at 16] [--out /tmp/trend-lab]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PREFIX, SUBNET = "xtr", "10.229.1.0/24"  # a prefix no test uses, nor any prefix of it
ENV = {**os.environ, "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": f"/run/commbench-lab-{PREFIX}"}
COMMBENCH = [sys.executable, "-m", "commbench"]


def cb(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([*COMMBENCH, *args], env=ENV, capture_output=True, text=True, timeout=600)
    if check and done.returncode not in (0, 1):
        raise SystemExit(f"commbench {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--change-at", type=int, default=16)
    parser.add_argument("--out", default="/tmp/trend-lab")
    args = parser.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    (out / "all").mkdir(parents=True)
    cb("lab", "down", check=False)
    cb("lab", "up", "--nodes", "3", "--rate", "1gbit", "--subnet", SUBNET)
    try:
        for i in range(1, args.runs + 1):
            if i == args.change_at:
                cb("lab", "set", "--node", "3", "--rate", "300mbit")
            start = time.monotonic()
            before = len(list((out / "all").glob("*.parquet")))
            argv = ["pairs", "--size", "1M", "-n", "5", "-w", "1", "--label", f"night{i}", "--out", f"{out / 'all'}/"]
            done = cb("lab", "run", "--", *COMMBENCH, *argv)
            if len(list((out / "all").glob("*.parquet"))) != before + 1:  # exit 1 is a verdict only with results
                raise SystemExit(f"run {i} wrote no results (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
            print(f"run {i}: {time.monotonic() - start:.1f} s", flush=True)
    finally:
        cb("lab", "down", check=False)
    steady = out / "steady"
    steady.mkdir()
    for f in sorted((out / "all").glob("*.parquet"))[: args.change_at - 1]:
        shutil.copy(f, steady / f.name)
    for name, folder in (("all runs", out / "all"), ("the unchanged runs", steady)):
        done = cb("trend", str(folder))
        print(f"\n$ commbench trend {folder}   # {name}: exit {done.returncode}\n{done.stdout}{done.stderr}")


if __name__ == "__main__":
    main()
