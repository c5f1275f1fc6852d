"""Synthetic result rows for fast plot/report tests: the real schema, written by the real
ResultWriter, with bandwidths from a simple latency + size/bandwidth model."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

from commbench.core.results import SCHEMA_VERSION, ResultWriter, read_results
from commbench.core.vocab import COLLECTIVES

# The bus factors of 4 ranks (all_reduce 1.5, the ring family 0.75, the rest 1), whatever the rows' world_size.
BUS_FACTOR = {c.name: c.busbw_factor(4) for c in COLLECTIVES}


def make_rows(collectives=("all_reduce", "all_gather"), sizes=(8, 1024, 65536, 1 << 20, 1 << 24),
              placements=(True, False), repetitions=2, label="before", run_id="20250101-000000-abcdef",
              hosts=("node01", "node02"), backend="nccl", device_name="NVIDIA H100 80GB HBM3", mtu=9000,
              iface="eth0", link_layer="ethernet", speed_gbps=400.0, latency_us=20.0, dtype="float32",
              env=None, wrong=0, seed=1) -> list[dict]:
    """Rows of one run. Time = latency + size / speed, with a small per-repetition wobble."""
    rows = []
    env = {"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "WARN"} if env is None else env
    net = {h: {"iface": iface, "mtu": mtu, "link_layer": link_layer, "speed_mbps": int(speed_gbps * 1000),
               "operstate": "up"} for h in hosts}
    for rep in range(repetitions):
        for coll in collectives:
            for size in sizes:
                for in_place in placements:
                    wobble = 1.0 + 0.05 * (((rep + 1) * 7 + size % 13 + seed) % 5 - 2)
                    t_us = (latency_us + size / (speed_gbps / 8 * 1e3)) * wobble
                    algbw = size / (t_us * 1e-6) / 1e9
                    rows.append({
                        "run_id": run_id, "label": label,
                        "started_at": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
                        "collective": coll, "dtype": dtype, "op": "sum", "root": -1, "size_bytes": size,
                        "count": max(1, size // 4), "in_place": in_place, "world_size": 16,
                        "nnodes": len(hosts), "ranks_per_node": 8, "backend": backend,
                        "device": "cuda" if backend == "nccl" else "cpu", "device_name": device_name,
                        "launcher": "slurm", "iters": 20, "warmup": 5, "repetition": rep, "time_us": t_us,
                        "time_us_min": t_us * 0.9, "time_us_max": t_us * 1.2, "time_us_p99": t_us * 1.15,
                        "algbw_GBps": algbw, "busbw_GBps": algbw * BUS_FACTOR[coll],
                        "wrong": wrong if size == sizes[-1] else (None if wrong is None else 0),
                        "samples_us": [t_us * 0.9, t_us, t_us * 1.2], "workload": "sweep",
                        "bucket_bytes": None, "zero_stage": None, "mtu": mtu, "iface": iface,
                        "link_layer": link_layer, "hosts": list(hosts), "commbench_version": "0.1.0",
                        "torch_version": "2.13.0", "nccl_version": "2.21.5" if backend == "nccl" else None,
                        "env": json.dumps(env, sort_keys=True), "net": json.dumps(net, sort_keys=True),
                        "plan": json.dumps({"run_id": run_id, "label": label}), "schema_version": SCHEMA_VERSION,
                    })
    return rows


def write(path: Path, rows: list[dict]) -> Path:
    writer = ResultWriter(Path(path))
    writer.create()
    writer.append(rows)
    return Path(path)


def frame(rows: list[dict], tmp_path: Path, name: str = "run.parquet") -> pd.DataFrame:
    """Through a real file and read_results, so dtypes are what the tools really see."""
    return read_results([write(tmp_path / name, rows)])


def night_rows(i: int, speed_gbps: float, rng: np.random.Generator, hosts=("node01", "node02"), **kw) -> list[dict]:
    """Night i's run: all_reduce at three sizes at `speed_gbps`, started on day i of 2026, with a wobble of its own."""
    rows = make_rows(
        collectives=("all_reduce",),
        sizes=(1 << 16, 1 << 20, 1 << 24),
        placements=(False,),
        run_id=f"2026{i:04d}-000000-abcdef",
        label=f"night{i}",
        hosts=hosts,
        speed_gbps=speed_gbps,
        seed=i,
        **kw,
    )
    noise = rng.lognormal(0, 0.02)  # a night's own wobble, the same on its points
    for r in rows:
        r["started_at"] = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=i)
        r["busbw_GBps"] *= noise
        r["algbw_GBps"] *= noise
    return rows


def write_nights(tmp_path, speeds, **kw):
    """A folder of nightly runs, one a speed (Gbit/s), their wobble drawn from one seed (commbench trend's input)."""
    rng = np.random.default_rng(7)
    folder = tmp_path / "nightly"
    folder.mkdir()
    for i, speed in enumerate(speeds, start=1):
        write(folder / f"night{i:02d}.parquet", night_rows(i, speed, rng, **kw))
    return folder
