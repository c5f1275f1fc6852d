"""What a point costs the result store, from the first point to the 100,000th (issue #18: point
100,000 at most 5 ms, and at most 2x point 1,000).

Generated rows shaped like a sweep's (every column the runner fills: 20 per-iteration samples,
the per-rank lists of 2 ranks, env / net / plan JSON as the runner writes them, the wire column)
go through the real commbench.core.results.ResultWriter into a fresh folder: create(), then N
appends of one point each (`--batch` rows an append), each timed alone (perf_counter around
append), then close() (the compaction) and a read_results of the compacted file. Before close,
read_results of the uncompacted parts (what a run killed at that point leaves) is timed too.
The old store (the whole table rewritten at every append, the code before issue #18) runs the
first `--baseline` points for comparison. A point's cost is the median over a window of appends
around it (`--window`, centred), so one slow write (the disk, another job) does not decide it.

Writes benchmarks/results/append_cost.{md,json}.

    python benchmarks/append_cost.py                         # 100,000 points, about 10 minutes
    python benchmarks/append_cost.py --points 5000 --baseline 300 --no-save   # smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import common

MARKS = (100, 1_000, 10_000, 50_000, 100_000)  # a window's median: from the 100th point on


def base_rows(batch: int) -> list[dict]:
    """One append's rows, as the runner makes them for a 2-rank gloo sweep on one host."""
    from commbench.core.results import SCHEMA_VERSION

    env = json.dumps({"GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "1"}, sort_keys=True)
    host_net = {"ifaces": {f"eth{i}": {"mtu": 1500, "speed_mbps": 25000, "operstate": "up",
                                       "driver": "mlx5_core", "addrs": [f"10.0.{i}.7/24"]} for i in range(4)},
                "rdma": [{"port": f"mlx5_{i}/1", "state": "ACTIVE", "rate": "400 Gb/sec"} for i in range(8)]}
    net = json.dumps({"node01": {"iface": "eth0", "mtu": 1500, "link_layer": "ethernet", "speed_mbps": 25000,
                                 "operstate": "up", "host_net": host_net}}, sort_keys=True)
    plan = json.dumps({"workload": "sweep", "sizes": "8..16M", "iters": 20, "warmup": 5, "repetitions": 1,
                       "collectives": ["all_reduce"], "backend": "gloo", "out": "results"}, sort_keys=True)
    wire = json.dumps({"hosts": {"node01": {"eth0": {"tx_bytes": 123456, "rx_bytes": 123456, "retrans": 0},
                                            "cost_ms": 0.4}}})
    started = dt.datetime.now(dt.timezone.utc)
    rows = []
    for k in range(batch):
        rows.append({
            "run_id": "20261201-000000-abcdef", "label": "append-cost", "started_at": started,
            "collective": "all_reduce", "dtype": "float32", "op": "sum", "root": -1, "size_bytes": 1 << 20,
            "count": 1 << 18, "in_place": bool(k % 2), "world_size": 2, "nnodes": 1, "ranks_per_node": 2,
            "backend": "gloo", "device": "cpu", "device_name": "cpu", "launcher": "local", "iters": 20,
            "warmup": 5, "repetition": 0, "time_us": 900.0, "time_us_min": 850.0, "time_us_max": 990.0,
            "time_us_p99": 980.0, "algbw_GBps": 1.16, "busbw_GBps": 1.16, "wrong": 0,
            "samples_us": [900.0] * 20, "rank_time_us": [880.0, 890.0], "rank_skew_us": [3.0, 4.0],
            "rank_cpus": ["0", "1"], "workload": "sweep", "mtu": 1500, "iface": "eth0", "link_layer": "ethernet",
            "hosts": ["node01"], "commbench_version": "0.1.0", "torch_version": "2.13.0", "env": env, "net": net,
            "plan": plan, "wire": wire, "wire_per_payload": 1.02, "wire_trouble": False,
            "schema_version": SCHEMA_VERSION,
        })
    return rows


def point_rows(template: list[dict], point: int, rng: random.Random) -> list[dict]:
    """Fresh rows a point (new dicts, new samples), sharing the long JSON strings as a run's
    rows share their values."""
    rows = []
    for r in template:
        row = dict(r)
        row["size_bytes"] = 1 << (point % 25)
        row["samples_us"] = [900.0 + rng.random() * 90 for _ in range(20)]
        row["time_us"] = statistics.median(row["samples_us"])
        rows.append(row)
    return rows


def window_median(costs_ms: list[float], point: int, window: int) -> float:
    """The median cost of the appends around `point` (1-based): centred on it, shifted to stay
    inside the run (the last point's window ends with it)."""
    lo = max(0, min(point - 1 - window // 2, len(costs_ms) - window))
    return statistics.median(costs_ms[lo:lo + window])


def run_store(points: int, batch: int, folder: Path, read_parts: bool) -> dict:
    from commbench.core.results import ResultWriter, read_results

    rng = random.Random(18)
    template = base_rows(batch)
    writer = ResultWriter(folder / "run.parquet")
    writer.create()
    costs = []
    for point in range(1, points + 1):
        rows = point_rows(template, point, rng)
        start = time.perf_counter()
        writer.append(rows)
        costs.append((time.perf_counter() - start) * 1e3)
    parts_bytes = sum(f.stat().st_size for f in writer.parts.iterdir())
    read_parts_s = None
    if read_parts:  # what a run killed here leaves: the file and its parts, read as they are
        start = time.perf_counter()
        n = len(read_results([writer.path], skip=["samples_us"]))
        read_parts_s = time.perf_counter() - start
        assert n == points * batch, n
    start = time.perf_counter()
    note = writer.close()
    close_s = time.perf_counter() - start
    assert note is None, note
    start = time.perf_counter()
    n = len(read_results([writer.path]))
    read_s = time.perf_counter() - start
    assert n == points * batch and not writer.parts.exists(), n
    return {"costs_ms": costs, "close_s": close_s, "read_compacted_s": read_s, "read_parts_s": read_parts_s,
            "parts_bytes": parts_bytes, "file_bytes": writer.path.stat().st_size,
            "total_append_s": sum(costs) / 1e3}


def run_old_store(points: int, batch: int, folder: Path) -> list[float]:
    """The store before issue #18: every append rewrote the whole table (zstd, fsync, rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from commbench.core.results import SCHEMA

    rng = random.Random(18)
    template = base_rows(batch)
    target = folder / "old.parquet"
    rows: list[dict] = []
    costs = []
    for point in range(1, points + 1):
        new = point_rows(template, point, rng)
        start = time.perf_counter()
        everything = rows + new
        fd, tmp = tempfile.mkstemp(prefix=".old.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            pq.write_table(pa.Table.from_pylist(everything, schema=SCHEMA), fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        rows = everything
        costs.append((time.perf_counter() - start) * 1e3)
    return costs


def summarise(costs: list[float], window: int) -> dict:
    marks = [p for p in MARKS if p <= len(costs)] + ([len(costs)] if len(costs) not in MARKS else [])
    return {str(p): round(window_median(costs, p, window), 4) for p in marks}


def markdown(f: dict, m: dict) -> str:
    new, old = f["store"], f["old_store"]
    marks = sorted(int(p) for p in new["at_point_ms"])
    rows = "".join(f"| {p:,} | {new['at_point_ms'][str(p)]:.3f} | "
                   f"{old['at_point_ms'][str(p)]:.2f} |\n" if str(p) in old["at_point_ms"] else
                   f"| {p:,} | {new['at_point_ms'][str(p)]:.3f} | (not run) |\n" for p in marks)
    last, at_1000 = new["at_point_ms"].get(str(f["points"])), new["at_point_ms"].get("1000")
    verdict = ""
    if last is not None and at_1000:
        ok = last <= 5.0 and last <= 2 * at_1000
        verdict = (f"\nPoint {f['points']:,}: **{last:.3f} ms**, {last / at_1000:.2f}x point 1,000 "
                   f"({at_1000:.3f} ms); bound <= 5 ms and <= 2x: **{'met' if ok else 'NOT met'}**.\n")
    read_parts = (f"{new['read_parts_s']:.1f} s" if new["read_parts_s"] is not None else "not measured")
    return (f"# What a point costs the result store\n\n{common.machine_line(m)}.\n\n"
            f"{f['points']:,} appends of {f['batch']} row(s) each through `ResultWriter` (rows shaped like a "
            f"2-rank sweep's); a point's cost is the median of the {f['window']} appends around it.\n\n"
            f"| point | append-only store, ms | old store (whole rewrite), ms |\n|---:|---:|---:|\n{rows}{verdict}\n"
            f"The first append (it replaces the empty file): {new['first_ms']:.2f} ms; the second (the first "
            f"part, its folder made): {new['second_ms']:.2f} ms. Slowest append: {new['max_ms']:.1f} ms, p99 "
            f"{new['p99_ms']:.2f} ms.\n\n"
            f"All {f['points']:,} appends: {new['total_append_s']:.1f} s of writing "
            f"(old store, first {f['baseline']:,} points: {old['total_append_s']:.1f} s). "
            f"Parts on disk before the compaction: {new['parts_bytes'] / 2**20:.0f} MiB; the compacted file: "
            f"{new['file_bytes'] / 2**20:.1f} MiB.\n\n"
            f"close() (compaction of {f['points'] * f['batch']:,} rows into one file, parts removed): "
            f"**{new['close_s']:.1f} s**. read_results of the uncompacted parts (a run killed at the last "
            f"point): {read_parts}; of the compacted file: {new['read_compacted_s']:.1f} s.\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1, help="rows an append")
    ap.add_argument("--baseline", type=int, default=1000, help="points the old store runs (0: none)")
    ap.add_argument("--window", type=int, default=201, help="appends a point's median is taken over")
    ap.add_argument("--no-read-parts", action="store_true", help="skip reading the uncompacted parts")
    ap.add_argument("--dir", default=None, help="where the files go (a fresh folder under it; default: /tmp)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    if args.points < 1 or args.batch < 1 or args.window < 1:
        raise SystemExit("--points, --batch and --window must be at least 1")
    m = common.machine()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="append-cost-") as tmp:
        old = run_old_store(args.baseline, args.batch, Path(tmp)) if args.baseline else []
        store = run_store(args.points, args.batch, Path(tmp), not args.no_read_parts)
    costs = store.pop("costs_ms")
    figures = {"machine": m, "points": args.points, "batch": args.batch, "window": args.window,
               "baseline": args.baseline, "filesystem_dir": args.dir or tempfile.gettempdir(),
               "store": {**store, "at_point_ms": summarise(costs, args.window), "max_ms": max(costs),
                         "first_ms": costs[0], "second_ms": costs[1] if len(costs) > 1 else None,
                         "p99_ms": sorted(costs)[int(0.99 * (len(costs) - 1))]},
               "old_store": {"at_point_ms": summarise(old, min(args.window, len(old) or 1)),
                             "total_append_s": sum(old) / 1e3}}
    text = markdown(figures, m)
    if not args.no_save:
        common.write("append_cost", figures, text)
    print(text)


if __name__ == "__main__":
    main()
