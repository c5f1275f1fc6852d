"""Scale rehearsal (issue #18): the results of a 1024-host x 8-rank cluster, generated (no ranks),
through commbench's real analysis; each step's wall time and peak RSS.

    flock /tmp/commbench-heavy.lock python benchmarks/scale.py      # 1024 hosts x 8; results/scale.*
    python benchmarks/scale.py --hosts 64 --no-save                 # quick check, seconds

What is generated, in the commbench schema (core/results.py SCHEMA, written with pyarrow):

a) pairs: `pairs --hosts-only` on 1024 hosts in sendrecv mode, one row per direction
   (1024 x 1023 = 1,047,552 directed links), in measurement order (the round-robin rounds of
   workloads/tournament.py), then the confirmation round that linkfaults.confirm_plan asks for.
   Planted: three slow hosts (two slow both ways, one only when sending), three slow links between
   healthy hosts (slower than the slow hosts' links), one host unreachable from the start, one
   that hangs half way through (timeout from then on), one link unreachable both ways and one
   that times out in one direction.
b) a sweep on 8,192 ranks: per point and rank 20 iterations of arrival and time, each rank's
   (median time, median skew) by core/stragglers.rank_summary, as the runner stores them
   (rank_time_us, rank_skew_us: 8,192 values a row). Planted: one slow rank, the 8 ranks of one
   host, a decoy late at 40% of the points (under MIN_SHARE) and one-point stalls everywhere.
c) 30 nightly sweeps, one file a night (per-rank lists filled), the last with all_gather from
   64 MiB 10% slower; compare of the last two nights, gate --suggest over nights 1-29, gate of
   night 30 against those bands, and report of night 30 against night 29, through the CLI.

Every analysis step runs in a subprocess of its own (this script with --step, or the commbench
CLI), timed with its peak RSS (ru_maxrss from wait4). The checks: the ranking, the verdict and the
fault verdict name exactly the planted hosts and links, the straggler analysis exactly the
planted ranks, compare and gate exactly the planted regression. Exit 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = common.REPO
RANKS_PER_HOST = 8
PAIRS_SIZE = 64 << 20
LINE_GBPS = 46.0  # a 400 Gbit/s NIC's payload rate
PAIR_SAMPLES = 5
SWEEP_ITERS = 20
SWEEP_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
SWEEP_SIZES = [2 ** k for k in range(10, 26)]  # 1 KiB .. 32 MiB
NIGHT_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
NIGHT_SIZES = [2 ** k for k in range(10, 31, 4)]  # 1 KiB .. 1 GiB
NIGHT_REPS = 6  # compare decides a point from 6 repetitions a side
REGRESSION = ("all_gather", 64 << 20, 0.90)  # the last night: all_gather from 64 MiB at 90% busbw


def host_names(n: int) -> list[str]:
    return [f"node{i:04d}" for i in range(n)]


# --------------------------------------------------------------------------- the parquet tables


def _strings(values, n: int) -> pa.DictionaryArray:
    """A string column as distinct values + an index a row (read back as plain strings, see
    write()): a 3 MB net JSON on a million rows is one string, as parquet stores it."""
    values = list(values)
    if len(values) == 1:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(values, pa.string()))
    arr = np.asarray(values, dtype=object)
    distinct, index = np.unique(arr.astype(str), return_inverse=True)
    return pa.DictionaryArray.from_arrays(pa.array(index.astype(np.int32)), pa.array(list(distinct), pa.string()))


def _list(lengths: np.ndarray, values: np.ndarray) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.float64()))


def _host_net(i: int) -> dict:
    """One host's entry of the net column (a GPU node with 8 RoCE NICs, ~3 KB), as the runner writes it."""
    ifaces = [{"addresses": [f"172.16.{k}.{i % 256}", f"fe80::1:{k}:{i:x}"], "driver": "mlx5_core",
               "link_layer": "ethernet", "mtu": 9000, "name": f"ens{k + 1}f0np0", "speed_mbps": 400000,
               "state": "up"} for k in range(8)]
    rdma = [{"active_mtu": 4096, "device": f"mlx5_{k}", "link_layer": "Ethernet", "netdev": f"ens{k + 1}f0np0",
             "phys_state": "LinkUp", "port": 1, "rate": "400 Gb/sec (4X NDR)", "roce_v2_gids": [3],
             "state": "PORT_ACTIVE"} for k in range(8)]
    return {"iface": "ens1f0np0", "mtu": 9000, "link_layer": "ethernet", "speed_mbps": 400000, "operstate": "up",
            "host_net": {"interfaces": ifaces, "rdma": rdma, "env": {"NCCL_SOCKET_IFNAME": "ens1f0np0"}}}


def _common(n: int, n_hosts: int, run_id: str, label: str, workload: str, started: str, plan: dict,
            with_hosts: bool) -> dict:
    hosts = host_names(n_hosts)
    net = json.dumps({h: _host_net(i) for i, h in enumerate(hosts)}, sort_keys=True)
    from commbench.core.results import SCHEMA_VERSION

    cols = {
        "run_id": _strings([run_id], n), "label": _strings([label], n),
        "started_at": pa.array(np.full(n, np.datetime64(started, "us")), pa.timestamp("us", tz="UTC")),
        "world_size": pa.array(np.full(n, n_hosts * RANKS_PER_HOST), pa.int32()),
        "nnodes": pa.array(np.full(n, n_hosts), pa.int32()),
        "ranks_per_node": pa.array(np.full(n, RANKS_PER_HOST), pa.int32()),
        "backend": _strings(["nccl"], n), "device": _strings(["cuda"], n),
        "device_name": _strings(["NVIDIA H200"], n), "launcher": _strings(["slurm"], n),
        "workload": _strings([workload], n), "mtu": pa.array(np.full(n, 9000), pa.int32()),
        "iface": _strings(["ens1f0np0"], n), "link_layer": _strings(["ethernet"], n),
        "commbench_version": _strings(["0.1.0"], n), "torch_version": _strings(["2.13.0+cu128"], n),
        "nccl_version": _strings(["2.27.3"], n),
        "env": _strings([json.dumps({"NCCL_SOCKET_IFNAME": "ens1f0np0", "SLURM_NNODES": str(n_hosts)})], n),
        "net": _strings([net], n), "plan": _strings([json.dumps(plan, sort_keys=True)], n),
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION), pa.int32()),
    }
    if with_hosts:  # the run's host list on every row, as the runner writes it
        cols["hosts"] = pa.ListArray.from_arrays(pa.array(np.arange(0, n * n_hosts + 1, n_hosts, dtype=np.int32)),
                                                 pa.DictionaryArray.from_arrays(pa.array(np.tile(
                                                     np.arange(n_hosts, dtype=np.int32), n)), pa.array(hosts)))
    return cols


def write(columns: dict, path: Path) -> None:
    """Every SCHEMA column (null where not given), zstd, as core/results.py writes; store_schema=False
    only because repeated strings are built dictionary-typed and must read back as strings."""
    from commbench.core.results import SCHEMA

    n = len(next(iter(columns.values())))
    arrays, fields = [], []
    for f in SCHEMA:
        arr = columns.get(f.name)
        arr = pa.nulls(n, f.type) if arr is None else arr
        arrays.append(arr)
        fields.append(pa.field(f.name, arr.type))
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), path, compression="zstd",
                   store_schema=False)


# --------------------------------------------------------------------------- a) pairs


def pairs_plant(n_hosts: int, seed: int = 7) -> dict:
    """Which hosts and links are planted as what: distinct healthy-looking hosts, host 0 (rank 0,
    the collector) never among them."""
    names = host_names(n_hosts)
    pick = [int(i) for i in np.random.default_rng(seed).permutation(np.arange(1, n_hosts))[:15]]
    h = [names[i] for i in pick]

    def ordered(a: str, b: str) -> tuple[str, str]:  # as linkfaults names a link: the lower rank first
        return (a, b) if names.index(a) < names.index(b) else (b, a)

    return {
        "slow_hosts": {h[0]: (0.5, 0.5), h[1]: (0.6, 0.6), h[2]: (0.55, 1.0)},  # (sending, receiving)
        "slow_links": {(h[3], h[4]): 0.25, (h[4], h[3]): 0.3, (h[5], h[6]): 0.2, (h[8], h[7]): 0.28},
        "dead_host": h[9],  # unreachable from the start
        "hung_host": h[10],  # timeout from the middle round on
        "dead_link": ordered(h[11], h[12]),  # unreachable both ways
        "oneway_link": ordered(h[13], h[14]),  # timeout lower -> higher rank only
    }


def _pair_order(n_hosts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, round) host indices of every main-round row, in the order pairs measures them."""
    from commbench.workloads.tournament import rounds

    src, dst, rnd = [], [], []
    for number, pairs in enumerate(rounds(list(range(n_hosts)))):
        a = np.array(pairs, dtype=np.int32)
        src += [a[:, 0], a[:, 1]]  # the lower seat sends first, then the other way
        dst += [a[:, 1], a[:, 0]]
        rnd += [np.full(2 * len(a), number, np.int32)]
    return np.concatenate(src), np.concatenate(dst), np.concatenate(rnd)


def _outcome(plant: dict, names: list[str], src: np.ndarray, dst: np.ndarray, late: np.ndarray) -> np.ndarray:
    """Each row's status (None: measured) from the plant; `late`: rows after the hung host hung."""
    idx = {h: i for i, h in enumerate(names)}
    status = np.full(len(src), None, dtype=object)
    a, b = (idx[x] for x in plant["oneway_link"])
    status[(src == a) & (dst == b)] = "timeout"
    a, b = (idx[x] for x in plant["dead_link"])
    status[((src == a) & (dst == b)) | ((src == b) & (dst == a))] = "unreachable"
    hung = idx[plant["hung_host"]]
    status[((src == hung) | (dst == hung)) & late] = "timeout"
    dead = idx[plant["dead_host"]]
    status[(src == dead) | (dst == dead)] = "unreachable"
    return status


def _errors(status: np.ndarray, names: list[str], src: np.ndarray, dst: np.ndarray, plant: dict) -> np.ndarray:
    idx = {h: i for i, h in enumerate(names)}
    error = np.full(len(status), None, dtype=object)
    for host, what in ((plant["dead_host"], "is unreachable (no answer from its mailbox or probe port)"),
                       (plant["hung_host"], "is hung (its probe port answers, its mailbox does not)")):
        i = idx[host]
        mask = (status != None) & ((src == i) | (dst == i))  # noqa: E711 (elementwise)
        error[mask] = f"rank {i * RANKS_PER_HOST} on {host} {what}"
    rest = (status != None) & (error == None)  # noqa: E711
    error[rest] = "the transfer failed while both ends answer the control plane: Connection timed out"
    return error


def _pair_rows(plant: dict, names: list[str], src, dst, status, confirm: np.ndarray, rng) -> dict:
    n = len(src)
    send = np.ones(len(names))
    recv = np.ones(len(names))
    idx = {h: i for i, h in enumerate(names)}
    for h, (s, r) in plant["slow_hosts"].items():
        send[idx[h]], recv[idx[h]] = s, r
    factor = np.minimum(send[src], recv[dst])
    for (a, b), f in plant["slow_links"].items():
        factor[(src == idx[a]) & (dst == idx[b])] *= f
    gbps = LINE_GBPS * factor * np.clip(rng.lognormal(0.0, 0.015, n), 0.95, 1.05)
    failed = status != None  # noqa: E711
    t = PAIRS_SIZE / (gbps * 1e9) * 1e6
    samples = t[:, None] * np.clip(rng.lognormal(0.0, 0.01, (n, PAIR_SAMPLES)), 0.97, 1.03)
    time_us = np.where(failed, np.nan, np.median(samples, axis=1))
    bw = PAIRS_SIZE / (time_us * 1e-6) / 1e9
    lengths = np.where(failed, 0, PAIR_SAMPLES)
    return {
        "src_host": pa.DictionaryArray.from_arrays(pa.array(src, pa.int32()), pa.array(names, pa.string())),
        "dst_host": pa.DictionaryArray.from_arrays(pa.array(dst, pa.int32()), pa.array(names, pa.string())),
        "src_rank": pa.array(src * RANKS_PER_HOST, pa.int32()), "dst_rank": pa.array(dst * RANKS_PER_HOST, pa.int32()),
        "status": pa.array(status, pa.string()),
        "error": pa.array(_errors(status, names, src, dst, plant), pa.string()),
        "confirm": pa.array(np.where(confirm, True, None), pa.bool_()),
        "time_us": pa.array(time_us), "time_us_min": pa.array(np.where(failed, np.nan, samples.min(axis=1))),
        "time_us_max": pa.array(np.where(failed, np.nan, samples.max(axis=1))),
        "time_us_p99": pa.array(np.where(failed, np.nan, samples.max(axis=1))),
        "algbw_GBps": pa.array(bw), "busbw_GBps": pa.array(bw),
        "wrong": pa.array(np.where(failed, None, 0), pa.int64()),
        "samples_us": _list(lengths, samples[~failed].ravel()),
        "iters": pa.array(np.where(failed, 0, PAIR_SAMPLES), pa.int32()),
    }


def _fixed_pairs(n: int, n_hosts: int, run_id: str, with_hosts: bool) -> dict:
    plan = {"workload": "pairs", "mode": "sendrecv", "hosts_only": True, "size_bytes": PAIRS_SIZE, "run_id": run_id}
    cols = _common(n, n_hosts, run_id, "pairs", "pairs", "2026-12-01T02:00", plan, with_hosts)
    cols |= {"collective": _strings(["sendrecv"], n), "dtype": _strings(["uint8"], n),
             "root": pa.array(np.full(n, -1), pa.int32()), "size_bytes": pa.array(np.full(n, PAIRS_SIZE)),
             "count": pa.array(np.full(n, PAIRS_SIZE)), "in_place": pa.array(np.zeros(n, bool)),
             "warmup": pa.array(np.full(n, 2), pa.int32()), "repetition": pa.array(np.zeros(n), pa.int32())}
    return cols


def generate_pairs(n_hosts: int, path: Path, with_hosts: bool = False, seed: int = 11) -> dict:
    """The pairs run's file, main rounds then the confirmation round that linkfaults plans from
    them (as rank 0 does in a run). Returns the plant's sizes and what generating took."""
    import pandas as pd

    from commbench.analysis.pairs import linkfaults

    rng = np.random.default_rng(seed)
    plant = pairs_plant(n_hosts)
    names = host_names(n_hosts)
    src, dst, rnd = _pair_order(n_hosts)
    status = _outcome(plant, names, src, dst, rnd >= (rnd.max() + 1) // 2)
    # The confirmation round: what the real rank 0 plans from the main rounds' rows.
    cats = pd.Categorical.from_codes
    frame = pd.DataFrame({"workload": "pairs", "run_id": "pairs-run", "collective": "sendrecv",
                          "src_host": cats(src, names), "dst_host": cats(dst, names),
                          "src_rank": src * RANKS_PER_HOST, "dst_rank": dst * RANKS_PER_HOST,
                          "status": status, "error": None, "confirm": None})
    t0 = time.perf_counter()
    plan = linkfaults.confirm_plan(frame, linkfaults.suspects(frame))
    t_plan = time.perf_counter() - t0
    del frame
    c_src = np.array([a // RANKS_PER_HOST for a, _ in plan], dtype=np.int32)
    c_dst = np.array([b // RANKS_PER_HOST for _, b in plan], dtype=np.int32)
    c_status = _outcome(plant, names, c_src, c_dst, np.ones(len(plan), bool))
    src, dst = np.concatenate([src, c_src]), np.concatenate([dst, c_dst])
    confirm = np.arange(len(src)) >= len(status)
    status = np.concatenate([status, c_status])
    rows = _pair_rows(plant, names, src, dst, status, confirm, rng)
    write(_fixed_pairs(len(src), n_hosts, "pairs-run", with_hosts) | rows, path)
    return {"rows": int(len(src)), "main_rows": int((~confirm).sum()), "confirm_rows": len(plan),
            "failed_rows": int((status != None).sum()), "confirm_plan_s": round(t_plan, 2)}  # noqa: E711


def expected_pairs(n_hosts: int) -> dict:
    """What the analysis must name, in its own words."""
    p = pairs_plant(n_hosts)
    return {"slow_hosts": sorted(p["slow_hosts"]),
            "slow_send_only": sorted(h for h, (s, r) in p["slow_hosts"].items() if r == 1.0),
            "slow_links": sorted(f"{a} -> {b}" for a, b in p["slow_links"]),
            "named": sorted([f"host {p['dead_host']} unreachable", f"host {p['hung_host']} timeout",
                             f"link {' <-> '.join(p['dead_link'])} unreachable",
                             f"link {' <-> '.join(p['oneway_link'])} timeout"])}


PAIRS_COLUMNS = ["workload", "run_id", "collective", "src_host", "dst_host", "src_rank", "dst_rank", "status",
                 "error", "confirm", "busbw_GBps", "rail", "size_bytes"]


def analyse_pairs(path: Path) -> dict:
    """The ranking, its verdict and the fault verdict, by the real functions, with each part's time."""
    from commbench.analysis.pairs import linkfaults, linkrank
    from commbench.core.results import read_results

    times = {}
    t0 = time.perf_counter()
    df = read_results([path], columns=PAIRS_COLUMNS)
    times["read_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    runs = linkrank.links_by_run(df)
    times["links_by_run_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ranking = linkrank.rank_links(next(iter(runs.values())))
    verdict = linkrank.verdict(ranking)
    times["rank_links_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = linkfaults.faults(df)
    times["faults_s"] = time.perf_counter() - t0
    slow = {e.name for e in ranking.singled_out}
    cut = ranking.threshold * ranking.median_gbps
    return {
        "links": len(ranking.links),
        "slow_hosts": sorted(slow),
        "slow_send_only": sorted(e.name for e in ranking.singled_out if e.slow_send and not e.slow_recv),
        # the slow links the ranking holds that no singled-out host explains
        "slow_links": sorted(ln.text() for ln in ranking.links if ln.gbps < cut and not {ln.src, ln.dst} & slow),
        "top_links": [ln.text() for ln in ranking.links[:4]],
        "verdict": verdict,
        "named": sorted(f"{c.kind} {c.name} {c.status}" for c in found.named),
        "confirmed": sorted(f"{c.kind} {c.name}" for c in found.named if c.confirmed),
        "undecided": found.undecided,
        "times_s": {k: round(v, 2) for k, v in times.items()},
    }


# --------------------------------------------------------------------------- b) stragglers


def straggler_plant(n_hosts: int, seed: int = 5) -> dict:
    ranks = n_hosts * RANKS_PER_HOST
    rng = np.random.default_rng(seed)
    pick = [int(r) for r in rng.permutation(np.arange(RANKS_PER_HOST, ranks))[:2]]
    host = int(rng.integers(1, n_hosts))
    while host in {pick[0] // RANKS_PER_HOST, pick[1] // RANKS_PER_HOST}:
        host = (host + 1) % n_hosts or 1
    return {"rank": pick[0], "host_ranks": list(range(host * RANKS_PER_HOST, (host + 1) * RANKS_PER_HOST)),
            "decoy": pick[1]}


def _sweep_time_us(coll: str, size: int, world: int) -> float:
    from commbench.core.vocab import COLLECTIVES

    factor = {c.name: c for c in COLLECTIVES}[coll].busbw_factor(world)
    return 15.0 + 2.0 * np.log2(world) + size * max(factor, 0.5) / (40.0 * 1e3)


def generate_stragglers(n_hosts: int, path: Path, repetitions: int = 2, seed: int = 3) -> dict:
    """One sweep on every rank: per point, each rank's 20 iterations of (own time, slowest time)
    and rank_summary's (median time, median skew) per rank, as each rank computes them."""
    from commbench.core.stragglers import rank_summary

    rng = np.random.default_rng(seed)
    plant = straggler_plant(n_hosts)
    world = n_hosts * RANKS_PER_HOST
    points = [(c, s) for _ in range(repetitions) for c in SWEEP_COLLECTIVES for s in SWEEP_SIZES]
    host_late = rng.random(len(points)) < 0.85
    decoy_late = np.zeros(len(points), bool)
    decoy_late[rng.permutation(len(points))[:int(0.4 * len(points))]] = True
    times, skews, time_us, summary_s = [], [], [], 0.0
    for p, (coll, size) in enumerate(points):
        t = _sweep_time_us(coll, size, world)
        arrive = rng.exponential(8.0, (world, SWEEP_ITERS))  # us behind the first rank
        delay = np.zeros(world)
        delay[plant["rank"]] = 400.0 + 0.6 * t
        if host_late[p]:
            delay[plant["host_ranks"]] = 300.0 + 0.5 * t
        if decoy_late[p]:
            delay[plant["decoy"]] = 500.0 + 0.6 * t
        if rng.random() < 0.3:  # a one-point stall of some rank: never a straggler
            delay[rng.integers(0, world)] += 250.0 + 0.3 * t
        arrive += delay[:, None] * rng.uniform(0.9, 1.1, (world, SWEEP_ITERS))
        op = t * rng.lognormal(0.0, 0.02, SWEEP_ITERS)
        end = arrive.max(axis=0) + op
        own = (end - arrive) * 1e-6  # seconds, as the timers give them
        slowest = own.max(axis=0)
        t0 = time.perf_counter()
        pairs = [rank_summary(own[r], slowest) for r in range(world)]
        summary_s += time.perf_counter() - t0
        times.append(np.array([a for a, _ in pairs]) * 1e6)
        skews.append(np.array([b for _, b in pairs]) * 1e6)
        time_us.append(float(np.median(slowest)) * 1e6)
    _write_sweep(path, n_hosts, points, np.array(time_us), times, skews, "sweep-ranks", "stragglers",
                 "2026-12-01T03:00", [p // len(SWEEP_COLLECTIVES) // len(SWEEP_SIZES) for p in range(len(points))])
    return {"rows": len(points), "ranks": world, "rank_summary_calls": world * len(points),
            "rank_summary_s": round(summary_s, 2)}


def _write_sweep(path: Path, n_hosts: int, points: list, time_us: np.ndarray, times: list, skews: list,
                 run_id: str, label: str, started: str, repetition: list) -> None:
    from commbench.core.vocab import COLLECTIVES

    by = {c.name: c for c in COLLECTIVES}
    n, world = len(points), n_hosts * RANKS_PER_HOST
    size = np.array([s for _, s in points], dtype=np.int64)
    factor = np.array([by[c].busbw_factor(world) for c, _ in points])
    algbw = size / (time_us * 1e-6) / 1e9
    plan = {"workload": "sweep", "collectives": list(dict.fromkeys(c for c, _ in points)), "run_id": run_id}
    cols = _common(n, n_hosts, run_id, label, "sweep", started, plan, with_hosts=True)
    per = np.full(n, world)
    cols |= {"collective": _strings([c for c, _ in points], n), "dtype": _strings(["float32"], n),
             "op": pa.array([("sum" if by[c].reduces else None) for c, _ in points], pa.string()),
             "root": pa.array(np.full(n, -1), pa.int32()), "size_bytes": pa.array(size),
             "count": pa.array(np.maximum(1, size // 4)), "in_place": pa.array(np.zeros(n, bool)),
             "iters": pa.array(np.full(n, SWEEP_ITERS), pa.int32()), "warmup": pa.array(np.full(n, 2), pa.int32()),
             "repetition": pa.array(np.asarray(repetition), pa.int32()), "time_us": pa.array(time_us),
             "time_us_min": pa.array(time_us * 0.98), "time_us_max": pa.array(time_us * 1.05),
             "time_us_p99": pa.array(time_us * 1.05), "algbw_GBps": pa.array(algbw),
             "busbw_GBps": pa.array(algbw * factor), "wrong": pa.array(np.zeros(n, np.int64)),
             "samples_us": _list(np.full(n, 1), time_us),
             "rank_time_us": _list(per, np.concatenate(times)), "rank_skew_us": _list(per, np.concatenate(skews)),
             # rank r on host r // RANKS_PER_HOST, as the runner records it (an index into hosts)
             "rank_host": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * world),
                                                   pa.array(np.tile(np.arange(world) // RANKS_PER_HOST, n),
                                                            pa.int32()))}
    write(cols, path)


def expected_stragglers(n_hosts: int) -> list[int]:
    p = straggler_plant(n_hosts)
    return sorted([p["rank"], *p["host_ranks"]])


def expected_slow_host(n_hosts: int) -> str:
    return host_names(n_hosts)[straggler_plant(n_hosts)["host_ranks"][0] // RANKS_PER_HOST]


def analyse_stragglers(path: Path) -> dict:
    from commbench.core.results import read_results
    from commbench.core.stragglers import find, find_hosts, rank_hosts, straggler_warnings

    t0 = time.perf_counter()
    df = read_results([path], columns=["rank_skew_us", "time_us", "iters", "hosts", "rank_host"])
    read_s = time.perf_counter() - t0
    hosts = rank_hosts(df.iloc[0])  # rank r's host, from the file's rank_host column
    rows = df.to_dict("records")
    t0 = time.perf_counter()
    found = find(rows, hosts)
    slow = find_hosts(rows, hosts)
    lines = straggler_warnings(rows, hosts)
    analyse_s = time.perf_counter() - t0
    return {"stragglers": [s.rank for s in found], "hosts": sorted({s.host for s in found}),
            "slow_hosts": [h.host for h in slow], "warnings": lines[:3],
            "warning_count": len(lines), "points": found[0].points if found else 0,
            "times_s": {"read_s": round(read_s, 2), "find_and_warn_s": round(analyse_s, 2)}}


# --------------------------------------------------------------------------- c) nights


def generate_nights(n_hosts: int, folder: Path, nights: int = 30, seed: int = 17) -> dict:
    """One sweep file a night; the last night's all_gather from 16 MiB regressed (REGRESSION)."""
    rng = np.random.default_rng(seed)
    world = n_hosts * RANKS_PER_HOST
    points = [(c, s) for _ in range(NIGHT_REPS) for c in NIGHT_COLLECTIVES for s in NIGHT_SIZES]
    reps = [i // (len(NIGHT_COLLECTIVES) * len(NIGHT_SIZES)) for i in range(len(points))]
    base = np.array([_sweep_time_us(c, s, world) for c, s in points])
    files = []
    for night in range(1, nights + 1):
        level = rng.lognormal(0.0, 0.005)  # night-to-night drift
        t = base * level * rng.lognormal(0.0, 0.005, len(points))
        if night == nights:
            coll, start, keep = REGRESSION
            t = np.where([(c == coll and s >= start) for c, s in points], t / keep, t)
        own = t[:, None] * (1.0 - rng.uniform(0.0, 0.05, (len(points), world)))
        path = folder / f"night{night:02d}.parquet"
        _write_sweep(path, n_hosts, points, t, list(own), list(t[:, None] - own), f"night-{night:02d}",
                     f"night{night:02d}", f"2026-11-{night:02d}T02:00", reps)
        files.append(path.name)
    return {"nights": nights, "rows_per_night": len(points), "files": files,
            "bytes": sum((folder / f).stat().st_size for f in files)}


def expected_regressions() -> list[str]:
    coll, start, _ = REGRESSION
    return sorted(f"{coll} {s}" for s in NIGHT_SIZES if s >= start)


def compare_regressions(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    out = set()
    for p in doc.get("points", []):
        if p.get("verdict") == "regression":
            out.add(f"{p['key']['collective']} {p['key']['size_bytes']}")
    return sorted(out)


def gate_failures(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    return sorted({f"{e['entry']['collective']} {e['entry']['size_bytes']}" for e in doc.get("entries", [])
                   if e.get("verdict") == "FAIL"})


# --------------------------------------------------------------------------- the steps


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "commbench", *args]


def steps(folder: Path, n_nights: int) -> list[tuple[str, list[str], tuple[int, ...]]]:
    """(name, argv, the exit codes that mean it worked), in order; the generators and analyses run
    as this script's --step, the rest through the commbench CLI as a user runs them."""
    me = [sys.executable, str(Path(__file__).resolve()), "--dir", str(folder), "--nights", str(n_nights)]
    nights = [str(folder / f"night{i:02d}.parquet") for i in range(1, n_nights + 1)]
    return [
        ("generate pairs", me + ["--step", "generate-pairs"], (0,)),
        ("pairs ranking + fault verdict", me + ["--step", "analyse-pairs"], (0,)),
        ("commbench pairs --from", _cli("pairs", "--from", str(folder / "pairs.parquet")), (1,)),
        ("generate sweep on every rank", me + ["--step", "generate-stragglers"], (0,)),
        ("stragglers", me + ["--step", "analyse-stragglers"], (0,)),
        ("generate nights", me + ["--step", "generate-nights"], (0,)),
        ("commbench compare", _cli("compare", nights[-2], nights[-1], "--format", "json",
                                   "--out", str(folder / "compare.json")), (1,)),
        ("commbench gate --suggest", _cli("gate", *nights[:-1], "--suggest", "--out", str(folder / "bands.yaml")),
         (0,)),
        ("commbench gate", _cli("gate", nights[-1], "--expect", str(folder / "bands.yaml"), "--format", "json",
                                "--out", str(folder / "gate.json")), (1,)),
        ("commbench report", _cli("report", nights[-1], "--baseline", nights[-2], "--out",
                                  str(folder / "report.html")), (0, 1)),
    ]


def run_step(name: str, folder: Path, n_hosts: int, n_nights: int) -> dict:
    """One --step in this process: its findings (and own timings), written to folder/<step>.json."""
    if name == "generate-pairs":
        out = generate_pairs(n_hosts, folder / "pairs.parquet")
    elif name == "analyse-pairs":
        out = analyse_pairs(folder / "pairs.parquet")
    elif name == "generate-stragglers":
        out = generate_stragglers(n_hosts, folder / "stragglers.parquet")
    elif name == "analyse-stragglers":
        out = analyse_stragglers(folder / "stragglers.parquet")
    elif name == "generate-nights":
        out = generate_nights(n_hosts, folder, n_nights)
    else:
        raise SystemExit(f"unknown --step {name}")
    (folder / f"{name}.json").write_text(json.dumps(out, indent=1, default=str))
    return out


# A lean parent for each step: a child's ru_maxrss starts at its parent's RSS at fork (the pages
# it maps until exec), so a step forked from this script, which holds pyarrow and numpy, could
# never read below ~0.26 GB. This wrapper holds ~10 MB.
_WRAP = ("import os, sys\npid = os.fork()\nif pid == 0:\n    os.execvp(sys.argv[1], sys.argv[1:])\n"
         "_, st, ru = os.wait4(pid, 0)\nsys.stderr.write(f'\\n@@usage {ru.ru_maxrss} {ru.ru_utime + ru.ru_stime}')\n"
         "code = os.waitstatus_to_exitcode(st)\nsys.exit(code if code >= 0 else 128 - code)")


def measure(argv: list[str], time_limit: float, memory_cap: int) -> dict:
    """Run argv; wall time, the child's peak RSS (ru_maxrss from wait4), exit code. A watchdog
    kills it past time_limit or memory_cap (a shared machine must survive a blow-up)."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _WRAP, *argv], cwd=REPO, env=common.child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    killed: list[str] = []
    done = threading.Event()

    def watch() -> None:
        try:
            p = psutil.Process(proc.pid)
            while not done.wait(0.1):
                if sum(c.memory_info().rss for c in p.children()) > memory_cap or time.perf_counter() - t0 > time_limit:
                    killed.append(f"killed past {memory_cap / 1e9:g} GB or {time_limit:g} s")
                    os.killpg(proc.pid, 9)
                    return
        except psutil.Error:
            return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    chunks: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, s=s: chunks.__setitem__(k, s.read()), daemon=True)
               for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for r in readers:
        r.start()
    _, status, _ = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    for r in readers:
        r.join()
    watcher.join()
    err = chunks.get("stderr", b"").decode(errors="replace")
    err, _, usage = err.rpartition("\n@@usage ")
    maxrss, cpu = (float(x) for x in usage.split()) if usage.strip() else (0, 0)
    return {"exit_code": os.waitstatus_to_exitcode(status), "wall_s": round(wall, 2),
            "peak_rss_bytes": int(maxrss) * 1024, "cpu_s": round(cpu, 2),
            "killed": killed[0] if killed else None,
            "stdout": chunks.get("stdout", b"").decode(errors="replace"),
            "stderr": err}


# --------------------------------------------------------------------------- the checks


def checks(folder: Path, n_hosts: int, results: dict) -> list[dict]:
    """Each expectation against what the analysis said: name, expected, found, ok."""
    out = []

    def check(name: str, expected, found) -> None:
        out.append({"check": name, "expected": expected, "found": found, "ok": expected == found})

    def load(step: str) -> dict:
        path = folder / f"{step}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    want = expected_pairs(n_hosts)
    got = load("analyse-pairs")
    check("ranking: slow hosts singled out", want["slow_hosts"], got.get("slow_hosts"))
    check("ranking: the host slow only when sending", want["slow_send_only"], got.get("slow_send_only"))
    check("ranking: slow links (no slow host explains them)", want["slow_links"], got.get("slow_links"))
    check("ranking: the slowest links are the planted links", sorted(want["slow_links"]),
          sorted(got.get("top_links", [])))
    check("verdict line names the slow hosts", "slow hosts: " + ", ".join(want["slow_hosts"]),
          (got.get("verdict") or "").split(" (")[0])
    check("fault verdict: failed hosts and links named", want["named"], got.get("named"))
    check("fault verdict: each confirmed by the confirmation round",
          sorted(" ".join(n.split(" ")[:-1]) for n in want["named"]), got.get("confirmed"))
    cli = results.get("commbench pairs --from", {}).get("stderr", "")
    named_cli = sorted(h for h in want["slow_hosts"] + [n.split(" ")[1] for n in want["named"] if n.startswith("host")]
                       if h in cli)
    check("pairs --from names every planted host on stderr",
          sorted(want["slow_hosts"] + [n.split(" ")[1] for n in want["named"] if n.startswith("host")]), named_cli)
    s = load("analyse-stragglers")
    check("stragglers: exactly the planted ranks", expected_stragglers(n_hosts), s.get("stragglers"))
    check("stragglers: the planted slow host named as a host", [expected_slow_host(n_hosts)], s.get("slow_hosts"))
    if (folder / "compare.json").exists():
        check("compare: exactly the planted regression", expected_regressions(),
              compare_regressions(folder / "compare.json"))
    if (folder / "gate.json").exists():
        check("gate: exactly the planted regression fails", expected_regressions(), gate_failures(folder / "gate.json"))
    return out


# --------------------------------------------------------------------------- output


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f}"


def markdown(f: dict) -> str:
    m = f["machine"]
    lines = [f"# Scale rehearsal: {f['hosts']:,} hosts x {RANKS_PER_HOST} ranks", "",
             f"Machine: {common.machine_line(m)}; load average {f['loadavg_end']:.2f} at the end.",
             f"Command: `{f['command']}` ({f['seconds']:.0f} s in all).", "",
             f"Data: pairs {f['data'].get('pairs_rows', 0):,} rows ({f['data'].get('pairs_links', 0):,} directed links "
             f"+ {f['data'].get('confirm_rows', 0):,} confirmation rows, {f['data'].get('failed_rows', 0):,} failed); "
             f"a sweep on {f['hosts'] * RANKS_PER_HOST:,} ranks, {f['data'].get('straggler_rows', 0)} rows with "
             f"{f['hosts'] * RANKS_PER_HOST:,} values a per-rank list; {f['nights']} nightly sweeps of "
             f"{f['data'].get('rows_per_night', 0)} rows "
             f"({f['data'].get('night_bytes', 0) / 1e6:.0f} MB of parquet).", "",
             "| step | wall s | CPU s | peak RSS GB | exit |", "|---|---:|---:|---:|---:|"]
    for name, r in f["steps"].items():
        lines.append(f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {_gb(r['peak_rss_bytes'])} | {r['exit_code']}"
                     + (f" ({r['killed']})" if r.get("killed") else "") + " |")
    inner = f.get("inner", {})
    if inner:
        lines += ["", "Inside the steps (seconds): " + "; ".join(
            f"{step}: " + ", ".join(f"{k} {v}" for k, v in t.items()) for step, t in inner.items()) + "."]
    lines += ["", "| check | ok |", "|---|---|"]
    for c in f["checks"]:
        lines.append(f"| {c['check']} | {'yes' if c['ok'] else 'NO: found ' + str(c['found'])[:200]} |")
    lines += ["", "Each step is a subprocess (this script's --step, or the commbench CLI); peak RSS is its "
              "ru_maxrss from wait4 (under a lean wrapper: a child forked from this script would start at "
              "its RSS), CPU s its user + system time (on a loaded machine wall s runs up to twice that). "
              "GB = 1e9 bytes.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=1024, help="hosts (8 ranks each) [1024]")
    ap.add_argument("--nights", type=int, default=30, help="nightly runs [30]")
    ap.add_argument("--dir", type=Path, default=None, help="work in (and keep) this folder [a temporary one]")
    ap.add_argument("--step", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--save", action=argparse.BooleanOptionalAction, default=True,
                    help="write benchmarks/results/scale.json and .md (--no-save for a quick check)")
    ap.add_argument("--time-limit", type=float, default=600.0, help="kill a step after this many seconds [600]")
    ap.add_argument("--memory-cap", type=float, default=8.0, help="kill a step past this many GB of RSS [8]")
    args = ap.parse_args(argv)
    if args.hosts < 24 or args.nights < 3:
        ap.error("--hosts must be at least 24 (15 hosts are planted) and --nights at least 3")
    if args.step:
        run_step(args.step, args.dir, args.hosts, args.nights)
        return 0
    started, m0 = time.perf_counter(), common.machine()
    with tempfile.TemporaryDirectory(prefix="commbench-scale-") as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        results = {}
        for name, cmd, ok_codes in steps(folder, args.nights):
            if "--step" in cmd:
                cmd = cmd[:2] + ["--hosts", str(args.hosts)] + cmd[2:]
            r = measure(cmd, args.time_limit, int(args.memory_cap * 1e9))
            r["ok"] = r["killed"] is None and r["exit_code"] in ok_codes
            results[name] = r
            print(f"  {name:34s} {r['wall_s']:7.1f} s  {_gb(r['peak_rss_bytes'])} GB  exit {r['exit_code']}"
                  + ("" if r["ok"] else f"  FAILED {r['killed'] or ''}\n{r['stderr'][-1500:]}"), flush=True)
        found = checks(folder, args.hosts, results)
        inner = {}
        data = {}
        for step in ("generate-pairs", "analyse-pairs", "generate-stragglers", "analyse-stragglers", "generate-nights"):
            path = folder / f"{step}.json"
            if path.exists():
                doc = json.loads(path.read_text())
                t = doc.get("times_s") or {k: v for k, v in doc.items() if k.endswith("_s")}
                if t:
                    inner[step] = t
                data[step] = doc
    for c in found:
        print(f"  {'ok ' if c['ok'] else 'NO '} {c['check']}" + ("" if c["ok"] else f": expected {c['expected']}, "
                                                                    f"found {c['found']}"))
    g, s, n = data.get("generate-pairs", {}), data.get("generate-stragglers", {}), data.get("generate-nights", {})
    figures = {
        "command": " ".join(["python benchmarks/scale.py", *(argv if argv is not None else sys.argv[1:])]),
        "hosts": args.hosts, "ranks_per_host": RANKS_PER_HOST, "nights": args.nights, "machine": m0,
        "loadavg_end": os.getloadavg()[0], "seconds": round(time.perf_counter() - started, 1),
        "data": {"pairs_rows": g.get("rows"), "pairs_links": g.get("main_rows"), "confirm_rows": g.get("confirm_rows"),
                 "failed_rows": g.get("failed_rows"), "straggler_rows": s.get("rows"),
                 "rows_per_night": n.get("rows_per_night"), "night_bytes": n.get("bytes")},
        "steps": {k: {x: v[x] for x in ("wall_s", "peak_rss_bytes", "cpu_s", "exit_code", "killed")}
                  for k, v in results.items()},
        "inner": inner, "checks": found, "findings": {k: data.get(k) for k in ("analyse-pairs", "analyse-stragglers")},
    }
    if args.save:
        js, md = common.write("scale", figures, markdown(figures))
        print(f"written {js.relative_to(REPO)} and {md.relative_to(REPO)}")
    return 0 if all(c["ok"] for c in found) and all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
