"""Analysis at scale: `commbench compare`, `gate`, `plot` and `report` over generated results.

    flock /tmp/commbench-heavy.lock python benchmarks/analysis_scale.py                  # 1,000,000 rows
    flock /tmp/commbench-heavy.lock python benchmarks/analysis_scale.py --rows 10000000 --keep /tmp/scale10m
    python benchmarks/analysis_scale.py --rows 20000 --no-save                           # quick smoke run

Generates two sides in the commbench schema, "before" (MTU 1500) and "after" (MTU 9000), half the
rows each, each a folder of --nights result files (one run each, 1 by default): NCCL sweeps of
every collective in commbench's table at each placement it supports, 4 dtypes, 31 sizes (8 B ..
8 GiB), on 18 topologies (1..32 nodes x 8, 4 or 2 ranks per node), every point repeated 25 times
(-R 25; 10M rows: --repetitions 250, the same 20,000 points a side and the same figures, written 25
repetitions a row group so that generating stays within memory), every row holding 20 per-iteration
samples (-n 20, nccl-tests' default). env / net / plan are JSON strings as the runner writes them, net holding
each host's facts (interfaces, 8 RDMA ports: a GPU node with 8 RoCE NICs, ~4 KB a host). Rows are
written like commbench.core.results writes them (pyarrow, zstd, one row group), then the four commands
run as subprocesses over every row, as a user runs them, each measured for wall time and peak RSS
(the child's ru_maxrss from wait4); gate judges both sides against bands `gate --suggest` wrote
from the first before night (not measured). --engine-rows sets COMMBENCH_ENGINE_ROWS for the
commands (0: always the DuckDB engine, analysis/points/pointtable.py; a huge number: always pandas).
Prints a table and adds the run to benchmarks/results/analysis_scale.json and .md (one table a
--tag, the latest run of a tag replacing the one before).
Per-rank lists (rank_time_us, rank_skew_us) are filled when the schema has them (--no-per-rank:
left null).

The budget: each command within 2 GB and 20 s up to 1M rows (issue #10), 60 s above (issue #18,
10M rows). Exit 0 when all meet it, 1 when one misses it, 2 on bad flags.
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
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

REPO = common.REPO

BUDGET_S = 20.0  # up to 1M rows
BUDGET_LARGE_S = 60.0  # above 1M rows (10M: issue #18)
CHUNK_REPS = 25
BUDGET_BYTES = 2 * 1000 ** 3  # 2 GB

DTYPES = (("float32", 4), ("bfloat16", 2), ("float16", 2), ("int8", 1))
SIZES = [2 ** k for k in range(3, 34)]  # 8 B .. 8 GiB: nccl-tests -b 8 -e 8G -f 2
TOPOLOGIES = [(n, r) for r in (8, 4, 2) for n in (1, 2, 4, 8, 16, 32)]  # (nodes, ranks per node)
SIDES = (  # label, MTU, effect on inter-node bandwidth
    ("before", 1500, 1.0),
    ("after", 9000, 1.05),
)


# --------------------------------------------------------------------------- generating


def _points(n_points: int):
    """The first n_points points of the grid: topology, collective, placement, dtype, size."""
    from commbench.harness.collectives import COLLECTIVES

    combos = [(c, place) for c in COLLECTIVES for place in ("in", "out") if c.supports(place)]
    grid = [(t, c, place, d, s) for t in range(len(TOPOLOGIES)) for c, place in combos
            for d in range(len(DTYPES)) for s in SIZES]
    if n_points > len(grid):
        raise SystemExit(f"--rows asks for {n_points} points a side, the grid holds {len(grid)}: "
                         "raise --repetitions or lower --rows")
    return grid[:n_points]


def _host_facts(host: str, mtu: int) -> dict:
    """One host's entry of the net column, shaped like runner's per_host (netinfo.host_summary)."""
    ifaces = [{"addresses": [f"10.0.{int(host[-3:]) % 256}.1", "fe80::a:b:c:d"], "driver": "ixgbe",
               "link_layer": "ethernet", "mtu": 1500, "name": "eno1", "speed_mbps": 10000, "state": "up"}]
    rdma = []
    for i in range(8):
        dev = f"ens{i + 1}f0np0"
        ifaces.append({"addresses": [f"172.16.{i}.{int(host[-3:])}", f"fe80::1:{i}:{host[-3:]}"],
                       "driver": "mlx5_core", "link_layer": "ethernet", "mtu": mtu, "name": dev,
                       "speed_mbps": 400000, "state": "up"})
        rdma.append({"active_mtu": 4096, "device": f"mlx5_{i}", "link_layer": "Ethernet", "netdev": dev,
                     "phys_state": "LinkUp", "port": 1, "rate": "400 Gb/sec (4X NDR)", "roce_v2_gids": [3],
                     "state": "PORT_ACTIVE"})
    env = {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": ",".join(f"mlx5_{i}" for i in range(8)),
           "NCCL_SOCKET_IFNAME": "eno1"}
    return {"iface": "ens1f0np0", "mtu": mtu, "link_layer": "ethernet", "speed_mbps": 400000, "operstate": "up",
            "host_net": {"interfaces": ifaces, "rdma": rdma, "env": env, "ibv_devinfo": "ran"}}


def _dict_column(values: list[str], index: np.ndarray) -> pa.DictionaryArray:
    """A string column held as distinct values + an index per row. Written with store_schema=False
    it reads back as a plain string column, byte for byte what a string column writes (parquet
    dictionary-encodes repeated strings either way); building it never holds a copy per row.
    The dictionary holds each used value once, as the writer's own dictionary would (a duplicate
    or unused entry makes pyarrow fall back to plain encoding)."""
    distinct, first = np.unique(np.asarray(values, dtype=object), return_inverse=True)
    used, index = np.unique(first[np.asarray(index)], return_inverse=True)
    return pa.DictionaryArray.from_arrays(pa.array(index.astype(np.int32), pa.int32()),
                                          pa.array(list(distinct[used]), pa.string()))


def side_table(label: str, mtu: int, gain: float, n_points: int, reps: int, n_samples: int,
               seed: int, per_rank: bool = True, night: int = 0, first_rep: int = 0) -> pa.Table:
    from commbench.harness.collectives import BY_NAME
    from commbench.core.results import SCHEMA, SCHEMA_VERSION

    rng = np.random.default_rng(seed)
    grid = _points(n_points)
    topo = np.array([g[0] for g in grid])
    coll_names = sorted({g[1].name for g in grid})
    coll = np.array([coll_names.index(g[1].name) for g in grid])
    in_place = np.array([g[2] == "in" for g in grid])
    dtype_i = np.array([g[3] for g in grid])
    size = np.array([g[4] for g in grid], dtype=np.int64)
    nodes = np.array([TOPOLOGIES[t][0] for t in topo])
    rpn = np.array([TOPOLOGIES[t][1] for t in topo])
    world = nodes * rpn
    factor = np.array([BY_NAME[coll_names[c]].busbw_factor(int(w)) for c, w in zip(coll, world)])
    # A latency + size / bandwidth model: NVLink-class inside a node, a 400 Gbit/s NIC per GPU
    # between nodes; MTU 9000 ("after") gives inter-node traffic a few percent, and one
    # collective / dtype is made worse, so the comparison finds improvements and regressions.
    bus_peak = np.where(nodes == 1, 170.0, 46.0 * np.where(nodes > 1, gain, 1.0))
    worse = (np.array(coll_names)[coll] == "all_to_all") & (dtype_i == 1) & (label == "after")
    bus_peak = np.where(worse, bus_peak * 0.92, bus_peak)
    algbw_peak = bus_peak / np.maximum(factor, 0.5)
    t_model = 6.0 + 3.0 * np.log2(world) + size / (algbw_peak * 1e3)  # µs

    # Rows: topology by topology (one launch each), repetitions interleaved over the grid.
    order = []
    for t in np.unique(topo):
        idx = np.flatnonzero(topo == t)
        order.append(np.tile(idx, reps))
    point = np.concatenate(order)
    rep = first_rep + np.concatenate([np.repeat(np.arange(reps), np.count_nonzero(topo == t)) for t in np.unique(topo)])
    n = point.size

    t_rep = t_model[point] * rng.lognormal(0.0, 0.015, n)
    samples = t_rep[:, None] * rng.lognormal(0.0, 0.03, (n, n_samples))
    spikes = rng.random((n, n_samples)) < 0.02  # the odd slow iteration
    samples[spikes] *= rng.uniform(1.5, 4.0, np.count_nonzero(spikes))
    time_us = np.median(samples, axis=1)
    algbw = size[point] / (time_us * 1e-6) / 1e9
    busbw = algbw * factor[point]
    elem = np.array([d[1] for d in DTYPES])[dtype_i[point]]
    wrong = np.zeros(n, dtype=np.int64)

    day = f"202603{night + 1:02d}"  # one night's run: its own run_id and start
    run_id = f"{day}-0{'1' if label == 'before' else '2'}0000-{label[:2]}{seed % 1000:04x}"  # not the row group's seed
    hosts_of = [[f"gpu{h + 1:03d}" for h in range(TOPOLOGIES[t][0])] for t in range(len(TOPOLOGIES))]
    net_values = [json.dumps({h: _host_facts(h, mtu) for h in hosts}, sort_keys=True) for hosts in hosts_of]
    env_values = [json.dumps({"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(TOPOLOGIES[t][1]))),
                              "MASTER_ADDR": hosts_of[t][0], "MASTER_PORT": "29500",
                              "NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,"
                              "mlx5_6,mlx5_7", "NCCL_SOCKET_IFNAME": "eno1", "SLURM_JOB_ID": str(812000 + 2 * t),
                              "SLURM_NNODES": str(TOPOLOGIES[t][0]), "SLURM_PROCID": "0"}, sort_keys=True)
                  for t in range(len(TOPOLOGIES))]
    plan_values = [json.dumps({"backend": "nccl", "check": True, "collectives": coll_names, "dtype": "float32",
                               "extra": {}, "iters": n_samples, "label": label, "max_iters": 2000, "min_iters": 10,
                               "op": "sum", "out": "results", "placement": "both", "repetitions": reps, "root": 0,
                               "run_id": run_id, "sizes": SIZES, "time_budget": 0.2, "timeout": 300.0,
                               "warmup": 5, "workload": "sweep"}, sort_keys=True) for _ in TOPOLOGIES]
    hour = 1 if label == "before" else 2
    started = np.array([f"2026-03-{night + 1:02d}T0{hour}:{t:02d}" for t in range(len(TOPOLOGIES))],
                       dtype="datetime64[us]")  # UTC

    reduces = np.array([BY_NAME[c].reduces for c in coll_names])[coll[point]]
    rooted = np.array([BY_NAME[c].rooted for c in coll_names])[coll[point]]
    hosts_offsets = np.concatenate([[0], np.cumsum(nodes[point])]).astype(np.int32)
    hosts_flat = np.concatenate([np.arange(k) for k in nodes[point]])
    tp = topo[point]
    columns = {
        "run_id": _dict_column([run_id], np.zeros(n, np.int32)),
        "label": _dict_column([label], np.zeros(n, np.int32)),
        "started_at": pa.array(started[tp], pa.timestamp("us", tz="UTC")),
        "collective": _dict_column(coll_names, coll[point]),
        "dtype": _dict_column([d[0] for d in DTYPES], dtype_i[point]),
        "op": pa.array(np.where(reduces, "sum", None), pa.string()),
        "root": pa.array(np.where(rooted, 0, -1), pa.int32()),
        "size_bytes": pa.array(size[point]),
        "count": pa.array(np.maximum(1, size[point] // elem)),
        "in_place": pa.array(in_place[point]),
        "world_size": pa.array(world[point], pa.int32()),
        "nnodes": pa.array(nodes[point], pa.int32()),
        "ranks_per_node": pa.array(rpn[point], pa.int32()),
        "backend": _dict_column(["nccl"], np.zeros(n, np.int32)),
        "device": _dict_column(["cuda"], np.zeros(n, np.int32)),
        "device_name": _dict_column(["NVIDIA H100 80GB HBM3"], np.zeros(n, np.int32)),
        "launcher": _dict_column(["slurm"], np.zeros(n, np.int32)),
        "iters": pa.array(np.full(n, n_samples), pa.int32()),
        "warmup": pa.array(np.full(n, 5), pa.int32()),
        "repetition": pa.array(rep, pa.int32()),
        "time_us": pa.array(time_us),
        "time_us_min": pa.array(samples.min(axis=1)),
        "time_us_max": pa.array(samples.max(axis=1)),
        "time_us_p99": pa.array(np.percentile(samples, 99, axis=1)),
        "algbw_GBps": pa.array(algbw),
        "busbw_GBps": pa.array(busbw),
        "wrong": pa.array(wrong),
        "samples_us": pa.ListArray.from_arrays(pa.array(np.arange(0, n * n_samples + 1, n_samples, dtype=np.int32)),
                                               pa.array(samples.ravel())),
        "workload": _dict_column(["sweep"], np.zeros(n, np.int32)),
        "mtu": pa.array(np.full(n, mtu), pa.int32()),
        "iface": _dict_column(["ens1f0np0"], np.zeros(n, np.int32)),
        "link_layer": _dict_column(["ethernet"], np.zeros(n, np.int32)),
        "hosts": pa.ListArray.from_arrays(pa.array(hosts_offsets),
                                          _dict_column([f"gpu{h + 1:03d}" for h in range(32)], hosts_flat)),
        "commbench_version": _dict_column(["0.1.0"], np.zeros(n, np.int32)),
        "torch_version": _dict_column(["2.13.0+cu128"], np.zeros(n, np.int32)),
        "nccl_version": _dict_column(["2.27.3"], np.zeros(n, np.int32)),
        "env": _dict_column(env_values, tp),
        "net": _dict_column(net_values, tp),
        "plan": _dict_column(plan_values, tp),
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION), pa.int32()),
    }
    if per_rank and "rank_time_us" in SCHEMA.names:  # per-rank columns: one value per rank on every row
        per_row = world[point]
        offsets = pa.array(np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64))
        slowest = np.repeat(time_us, per_row)
        own = slowest * (1.0 - rng.uniform(0.0, 0.12, per_row.sum()))
        columns["rank_time_us"] = pa.LargeListArray.from_arrays(offsets, pa.array(own)).cast(
            SCHEMA.field("rank_time_us").type)
        if "rank_skew_us" in SCHEMA.names:
            columns["rank_skew_us"] = pa.LargeListArray.from_arrays(offsets, pa.array(slowest - own)).cast(
                SCHEMA.field("rank_skew_us").type)
        del slowest, own
    # Columns this script does not know (added to the schema since) stay null, as for a workload
    # that does not set them.
    arrays, fields = [], []
    for f in SCHEMA:
        arr = columns.get(f.name)
        if arr is None:
            arr = pa.nulls(n, f.type)
        arrays.append(arr)
        fields.append(pa.field(f.name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


# --------------------------------------------------------------------------- rows shaped from a real sweep (--seed)

SEED_FILE = Path(__file__).resolve().parent / "data" / "sweep_gloo_2rank_seed.parquet"
SEED_OPS = ("sum", "prod", "max", "min")  # gloo's reduction ops
SEED_WORSE = ("all_to_all", "bfloat16")  # the after side's planted regression, with trouble counters on the wire


class Seed:
    """What a real sweep's file says a row looks like: its constant columns (the first row's
    value), its sizes with each size's time, warm-up and sample count, its JSON columns and its
    wire entry per host (benchmarks/data/sweep_gloo_2rank_seed.parquet: `commbench sweep
    --collective allreduce`, 2 local gloo ranks, 8 B .. 64 MiB, 24 rows)."""

    def __init__(self, path: Path):
        table = pq.read_table(path)
        self.path = path
        self.first = {name: table.column(name)[0].as_py() for name in table.column_names}
        rows = table.select(["size_bytes", "time_us", "warmup", "samples_us"]).to_pylist()
        by_size: dict[int, dict] = {}
        for r in rows:
            by_size.setdefault(r["size_bytes"], r)
        self.sizes = sorted(by_size)
        self.time_us = np.array([by_size[s]["time_us"] for s in self.sizes])
        self.warmup = np.array([by_size[s]["warmup"] for s in self.sizes])
        self.samples = np.array([max(1, len(by_size[s]["samples_us"] or [])) for s in self.sizes])
        wire_doc = json.loads(self.first["wire"]) if self.first.get("wire") else {"hosts": {}}
        self.wire_entry = next(iter(wire_doc["hosts"].values()), {"counters": {"lo": {}}})
        self.iface = next((k for k in self.wire_entry.get("counters", {}) if k != "tcp"), "lo")
        self.host = (self.first.get("hosts") or ["host"])[0]
        self.net = json.loads(self.first["net"]) if self.first.get("net") else {}


def _seed_points(seed: Seed, n_points: int) -> list[tuple]:
    """The first n_points points of a 2-rank sweep's grid: every collective at each placement it
    supports, gloo's ops where it reduces, every dtype, the seed's sizes."""
    from commbench.core.vocab import DTYPES as ALL_DTYPES
    from commbench.harness.collectives import COLLECTIVES

    grid = [(c, place, op, d, s) for c in COLLECTIVES for place in ("in", "out") if c.supports(place)
            for op in (SEED_OPS if c.reduces else (None,)) for d in ALL_DTYPES for s in range(len(seed.sizes))]
    if n_points > len(grid):
        raise SystemExit(f"--rows asks for {n_points} points a side, a 2-rank sweep's grid holds {len(grid)}: "
                         "raise --repetitions or lower --rows")
    return grid[:n_points]


def _text(parts: list) -> pa.Array:
    """Strings made a row at a time from pieces: literal text or arrays (numbers cast to text)."""
    arrays = [p if isinstance(p, str) else pc.cast(pa.array(p), pa.string()) for p in parts]
    return pc.binary_join_element_wise(*arrays, "")


def _wire_column(seed: Seed, hosts: list[str], ranks: int, bus: np.ndarray, trouble: np.ndarray,
                 drops: np.ndarray, retrans: np.ndarray, rng) -> tuple[pa.Array, np.ndarray]:
    """The `wire` JSON of every row (core/wire.columns' format, keys sorted as json.dumps sorts them),
    each host's counters following the bytes the row sent; on `trouble` rows a qdisc drop count and
    TCP retransmissions on the last host. Returns the column and wire_per_payload (hosts of one rank)."""
    n = bus.size
    per_host, ratio = [], np.full(n, np.nan)
    for i, host in enumerate(hosts):
        out = np.maximum(1, bus * rng.normal(1.046, 0.002, n)).astype(np.int64)
        packets = np.maximum(1, out // 1448).astype(np.int64)
        cost = np.round(rng.gamma(2.0, 0.3, n) + 0.1, 3)
        last = i == len(hosts) - 1
        troubled = trouble & last
        counters = ['{"cost_ms": ', cost, f', "counters": {{"{seed.iface}": {{"rx_bytes": ', out,
                    ', "rx_packets": ', packets, ', "tx_bytes": ', out, ', "tx_packets": ', packets, "}"]
        qdisc = np.where(troubled & (drops > 0),
                         np.char.add(np.char.add(f', "{seed.iface} qdisc": {{"drops": ', drops.astype(str)), "}"), "")
        tcp = np.where(troubled, np.char.add(np.char.add(', "tcp": {"RetransSegs": ', retrans.astype(str)), "}"), "")
        items = np.where(troubled & (drops > 0),
                         np.char.add(np.char.add(f'["{seed.iface} qdisc", "drops", ', drops.astype(str)),
                                     ', "drop"], '),
                         "")
        items = np.where(troubled, np.char.add(np.char.add(np.char.add(items, '["tcp", "RetransSegs", '),
                                                           retrans.astype(str)), ', "retransmit"]'), items)
        share = ""
        if ranks == 1:
            r = np.round(out / bus, 5)
            ratio = np.fmax(ratio, out / bus)
            share = [', "per_payload": ', r]
        entry = [f'"{host}": '] + counters + [qdisc, tcp, '}, "in_bytes": ', out, ', "netdev_out_bytes": ', out,
                                              ', "out_bytes": ', out] + (share or []) + \
            [f', "ranks": {ranks}, "rdma_out_bytes": 0, "trouble": [', items, "]}"]
        per_host.append(_text(entry))
    joined = pc.binary_join_element_wise(*per_host, ", ") if len(per_host) > 1 else per_host[0]
    return _text(['{"format": 1, "hosts": {', joined, "}}"]), ratio


def seed_side_table(seed: Seed, label: str, gain: float, n_points: int, reps: int, rng_seed: int,
                    n_hosts: int = 2, night: int = 0, first_rep: int = 0) -> pa.Table:
    """One side's rows shaped as the seed's sweep writes them: every column of the schema the seed
    fills, filled the same way (the per-rank lists, env / net / plan JSON, the wire counters of every
    row), over a 2-rank sweep's grid (_seed_points), spread over n_hosts hosts."""
    from commbench.core.results import SCHEMA, SCHEMA_VERSION
    from commbench.core.vocab import DTYPES as ALL_DTYPES
    from commbench.harness.collectives import BY_NAME

    rng = np.random.default_rng(rng_seed)
    grid = _seed_points(seed, n_points)
    world = 2
    coll_names = sorted({g[0].name for g in grid})
    coll = np.array([coll_names.index(g[0].name) for g in grid])
    in_place = np.array([g[1] == "in" for g in grid])
    ops = [None, *SEED_OPS]
    op_i = np.array([ops.index(g[2]) for g in grid])
    dtype_names = [d.name for d in ALL_DTYPES]
    dtype_i = np.array([dtype_names.index(g[3].name) for g in grid])
    size_i = np.array([g[4] for g in grid])
    size = np.asarray(seed.sizes, dtype=np.int64)[size_i]
    factor = np.array([BY_NAME[coll_names[c]].busbw_factor(world) for c in coll])
    t_model = seed.time_us[size_i] * np.maximum(factor, 0.5) / np.where(n_hosts > 1, gain, 1.0)
    worse = (np.array(coll_names)[coll] == SEED_WORSE[0]) & (np.array(dtype_names)[dtype_i] == SEED_WORSE[1])
    worse &= label == "after"
    t_model = np.where(worse, t_model / 0.88, t_model)  # with the gain: 8% below before

    point = np.tile(np.arange(len(grid)), reps)  # one launch: repetitions interleaved over the grid
    rep = first_rep + np.repeat(np.arange(reps), len(grid))
    n = point.size
    n_samp = seed.samples[size_i][point]
    offsets = np.concatenate([[0], np.cumsum(n_samp)]).astype(np.int32)
    t_rep = t_model[point] * rng.lognormal(0.0, 0.015, n)
    flat = np.repeat(t_rep, n_samp) * rng.lognormal(0.0, 0.03, offsets[-1])
    spikes = rng.random(flat.size) < 0.02
    flat[spikes] *= rng.uniform(1.5, 4.0, np.count_nonzero(spikes))
    time_us, t_min, t_max, t_p99 = (np.empty(n) for _ in range(4))
    for k in np.unique(n_samp):  # rows of one sample count at a time: a matrix each
        rows = np.flatnonzero(n_samp == k)
        m = flat[offsets[rows][:, None] + np.arange(k)]
        time_us[rows], t_min[rows], t_max[rows] = np.median(m, axis=1), m.min(axis=1), m.max(axis=1)
        t_p99[rows] = np.percentile(m, 99, axis=1)
    algbw = size[point] / (time_us * 1e-6) / 1e9
    busbw = algbw * factor[point]
    warmup = seed.warmup[size_i][point]

    # The wire: each row's bytes; trouble after at the planted regression (drops and the
    # retransmissions they cause, half its rows), and a spurious retransmission or two on one row
    # in a thousand on both sides (a few before, thousands after: GROWTH decides).
    bus = size[point] * np.maximum(factor[point], 0.5) * (warmup + n_samp)
    spurious = rng.random(n) < 0.001
    planted = worse[point] & (rng.random(n) < 0.5)
    trouble = spurious | planted
    drops = np.where(planted, rng.integers(200, 2000, n), 0)
    retrans = np.where(planted, rng.integers(500, 5000, n), rng.integers(1, 3, n))
    host_names = [f"{seed.host}{i + 1}" if n_hosts > 1 else seed.host for i in range(n_hosts)]
    ranks = world // n_hosts
    wire_col, ratio = _wire_column(seed, host_names, ranks, bus.astype(float), trouble, drops, retrans, rng)

    day = f"202603{night + 1:02d}"
    run_id = f"{day}-0{'1' if label == 'before' else '2'}0000-{label[:2]}{rng_seed % 1000:04x}"  # one a side and night
    entry = next(iter(seed.net.values()), {})
    net = json.dumps({h: entry for h in host_names}, sort_keys=True)
    plan = json.loads(seed.first["plan"]) if seed.first.get("plan") else {}
    plan.update(run_id=run_id, label=label, collectives=coll_names, repetitions=reps, sizes=seed.sizes)
    started = pa.array([seed.first["started_at"]] * 1, pa.timestamp("us", tz="UTC"))[0]
    zeros = np.zeros(n, np.int32)
    columns = {
        "run_id": _dict_column([run_id], zeros), "label": _dict_column([label], zeros),
        "started_at": pa.array(np.full(n, started.value + night * 86_400_000_000, dtype=np.int64),
                               pa.timestamp("us", tz="UTC")),
        "collective": _dict_column(coll_names, coll[point]),
        "dtype": _dict_column(dtype_names, dtype_i[point]),
        "op": _dict_column(["", *SEED_OPS], op_i[point]).cast(pa.string()),
        "root": pa.array(np.where(np.array([BY_NAME[c].rooted for c in coll_names])[coll[point]], 0, -1), pa.int32()),
        "size_bytes": pa.array(size[point]),
        "count": pa.array(np.maximum(1, size[point] // np.array([d.itemsize for d in ALL_DTYPES])[dtype_i[point]])),
        "in_place": pa.array(in_place[point]),
        "world_size": pa.array(np.full(n, world), pa.int32()),
        "nnodes": pa.array(np.full(n, n_hosts), pa.int32()),
        "ranks_per_node": pa.array(np.full(n, ranks), pa.int32()),
        "iters": pa.array(n_samp, pa.int32()), "warmup": pa.array(warmup, pa.int32()),
        "repetition": pa.array(rep, pa.int32()),
        "time_us": pa.array(time_us), "time_us_min": pa.array(t_min), "time_us_max": pa.array(t_max),
        "time_us_p99": pa.array(t_p99), "algbw_GBps": pa.array(algbw), "busbw_GBps": pa.array(busbw),
        "wrong": pa.array(np.zeros(n, np.int64)),
        "samples_us": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)),
        "workload": _dict_column(["sweep"], zeros),
        "hosts": pa.ListArray.from_arrays(pa.array(np.arange(0, n * n_hosts + 1, n_hosts, dtype=np.int32)),
                                          _dict_column(host_names, np.tile(np.arange(n_hosts), n))),
        "rank_host": pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
                                              pa.array(np.tile(np.arange(world) // ranks, n).astype(np.int32))),
        "net": _dict_column([net], zeros), "plan": _dict_column([json.dumps(plan, sort_keys=True)], zeros),
        "wire": wire_col,
        "wire_per_payload": pa.array(np.where(np.isfinite(ratio), ratio, np.nan), from_pandas=True),
        "wire_trouble": pa.array(trouble),
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION), pa.int32()),
    }
    # op: null where the collective does not reduce (the dictionary's "" entry)
    columns["op"] = pc.if_else(pc.equal(columns["op"], ""), pa.scalar(None, pa.string()), columns["op"])
    own = np.repeat(time_us, world) * (1.0 - rng.uniform(0.0, 0.12, n * world))
    skew = np.repeat(time_us, world) - own
    two = pa.array(np.arange(0, world * n + 1, world, dtype=np.int64))
    columns["rank_time_us"] = pa.LargeListArray.from_arrays(two, pa.array(own)).cast(SCHEMA.field("rank_time_us").type)
    columns["rank_skew_us"] = pa.LargeListArray.from_arrays(two, pa.array(skew)).cast(SCHEMA.field("rank_skew_us").type)
    cpus = seed.first.get("rank_cpus") or ["0"] * world
    columns["rank_cpus"] = pa.ListArray.from_arrays(pa.array(np.arange(0, world * n + 1, world, dtype=np.int32)),
                                                    _dict_column(list(cpus), np.tile(np.arange(world), n)))
    arrays, fields = [], []
    for f in SCHEMA:
        arr = columns.get(f.name)
        if arr is None:  # the seed's value on every row (null where the seed holds none)
            value = seed.first.get(f.name)
            if value is None or pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
                arr = pa.nulls(n, f.type)
            elif pa.types.is_string(f.type):
                arr = _dict_column([value], zeros)
            else:
                arr = pa.array(np.full(n, value), f.type) if not isinstance(value, (str, bytes)) else None
                arr = arr if arr is not None else pa.nulls(n, f.type)
        arrays.append(arr)
        fields.append(pa.field(f.name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_like_commbench(table: pa.Table, path: Path) -> None:
    """As commbench.core.results writes (zstd, one write_table call); store_schema=False only because the
    string columns are built dictionary-typed (see _dict_column) and must read back as strings."""
    pq.write_table(table, path, compression="zstd", store_schema=False)


def check_reads_back(path: Path) -> None:
    from commbench.core.results import SCHEMA

    schema = pq.read_schema(path)
    for f in SCHEMA:
        got = schema.field(f.name).type
        if not got.equals(f.type):
            raise SystemExit(f"{path}: column {f.name} reads back as {got}, the schema says {f.type}")


PARTS = {"samples_us": ("samples_us",), "per-rank lists": ("rank_time_us", "rank_skew_us")}


def side_files(folder: Path, label: str) -> list[Path]:
    return sorted((folder / label).glob("night-*.parquet"))


def describe(folder: Path) -> dict:
    """Rows, bytes and bytes a row (by column group) of the files of both sides."""
    out: dict = {"files": {}, "rows": 0, "bytes": 0}
    by_column: dict[str, int] = {}
    for label, _, _ in SIDES:
        side = {"rows": 0, "bytes": 0, "files": 0}
        for path in side_files(folder, label):
            meta = pq.ParquetFile(path).metadata
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                for c in range(rg.num_columns):
                    col = rg.column(c)
                    name = col.path_in_schema.split(".")[0]
                    by_column[name] = by_column.get(name, 0) + col.total_compressed_size
            side["rows"] += meta.num_rows
            side["bytes"] += path.stat().st_size
            side["files"] += 1
        out["files"][label] = side
        out["rows"] += side["rows"]
        out["bytes"] += side["bytes"]
    rows = max(out["rows"], 1)
    out["bytes_per_row"] = round(out["bytes"] / rows, 1)
    parts = {name: sum(by_column.get(c, 0) for c in cols) for name, cols in PARTS.items()}
    parts["everything else"] = out["bytes"] - sum(parts.values())
    out["bytes_per_row_by_part"] = {k: round(v / rows, 1) for k, v in parts.items()}
    out["column_bytes"] = by_column
    return out


def generate(folder: Path, rows: int, reps: int, n_samples: int, per_rank: bool, nights: int,
             seed: Seed | None = None, seed_hosts: int = 2) -> dict:
    per_night = rows // (2 * nights)
    if rows % (2 * nights) or per_night % reps:
        raise SystemExit(f"--rows {rows} is not 2 x --nights {nights} x --repetitions {reps} x a whole number "
                         "of points")
    n_points = per_night // reps
    for i, (label, mtu, gain) in enumerate(SIDES):
        (folder / label).mkdir(parents=True, exist_ok=True)
        for night in range(nights):
            path = folder / label / f"night-{night + 1:02d}.parquet"
            writer = None
            for first in range(0, reps, CHUNK_REPS):  # a row group of 25 repetitions at a time
                if seed is not None:
                    table = seed_side_table(seed, label, gain, n_points, min(CHUNK_REPS, reps - first),
                                            i + 1 + 2 * night + 1000 * first, n_hosts=seed_hosts, night=night,
                                            first_rep=first)
                else:
                    table = side_table(label, mtu, gain, n_points, min(CHUNK_REPS, reps - first), n_samples,
                                       seed=i + 1 + 2 * night + 1000 * first, per_rank=per_rank, night=night,
                                       first_rep=first)
                if reps <= CHUNK_REPS:
                    write_like_commbench(table, path)
                else:
                    writer = writer or pq.ParquetWriter(path, table.schema, compression="zstd", store_schema=False)
                    writer.write_table(table)
                del table
            if writer is not None:
                writer.close()
            check_reads_back(path)
    if seed is not None:
        return describe(folder) | {"points_per_side": n_points, "repetitions": reps, "nights": nights,
                                   "seed": str(seed.path.relative_to(REPO) if seed.path.is_relative_to(REPO)
                                               else seed.path), "seed_hosts": seed_hosts,
                                   "samples_per_row": "as the seed (adaptive)", "per_rank": True,
                                   "sizes": [seed.sizes[0], seed.sizes[-1]], "wire": True}
    return describe(folder) | {"points_per_side": n_points, "repetitions": reps, "samples_per_row": n_samples,
                               "nights": nights, "per_rank": per_rank, "topologies": TOPOLOGIES,
                               "sizes": [SIZES[0], SIZES[-1]], "dtypes": [d[0] for d in DTYPES]}


# --------------------------------------------------------------------------- measuring


def _address_limit(limit: int | None):
    """A preexec_fn that caps the child's address space (`ulimit -v`: RLIMIT_AS), or None."""
    if not limit:
        return None

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def measure(argv: list[str], cwd: Path, time_limit: float, memory_cap: int, env: dict | None = None,
            as_limit: int | None = None) -> dict:
    """Run argv; wall time, the child's peak RSS (ru_maxrss from wait4), exit code, the last line
    it wrote to stderr. A watchdog kills the command past time_limit or memory_cap (the machine is
    shared: a blow-up must not take it down) and says so; as_limit (bytes) caps its address space
    as `ulimit -v` does, so an allocation past it fails inside the command instead."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env or common.child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_address_limit(as_limit))
    killed: list[str] = []
    done = threading.Event()

    def watch() -> None:
        try:
            p = psutil.Process(proc.pid)
            while not done.wait(0.05):
                if p.memory_info().rss > memory_cap:
                    killed.append(f"killed: RSS passed the {memory_cap / 1e9:g} GB safety cap")
                    p.kill()
                    return
                if time.perf_counter() - t0 > time_limit:
                    killed.append(f"killed: ran past the {time_limit:g} s limit")
                    p.kill()
                    return
        except psutil.Error:  # it ended between two looks
            return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out_chunks: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, s=s: out_chunks.__setitem__(k, s.read()), daemon=True)
               for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for r in readers:
        r.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join()
    watcher.join()
    peak = usage.ru_maxrss * 1024  # kilobytes on Linux
    err_lines = out_chunks.get("stderr", b"").decode(errors="replace").strip().splitlines()
    return {"last_stderr": err_lines[-1][:300] if err_lines else "", "as_limit_bytes": as_limit, "argv": argv,
            "exit_code": proc.returncode, "wall_s": round(wall, 2), "peak_rss_bytes": peak,
            "user_s": round(usage.ru_utime, 2), "sys_s": round(usage.ru_stime, 2),
            "killed": killed[0] if killed else None,
            "stdout_tail": out_chunks.get("stdout", b"").decode(errors="replace")[-600:],
            "stderr_tail": out_chunks.get("stderr", b"").decode(errors="replace")[-1200:]}


def commands(folder: Path) -> dict[str, list[str]]:
    cb = [sys.executable, "-m", "commbench"]
    before, after = str(folder / "before"), str(folder / "after")
    return {
        # exit 1 expected: the after side holds planted regressions
        "compare": cb + ["compare", before, after, "--out", str(folder / "compare.txt")],
        # exit 1 expected too: the after side's all_to_all bfloat16 is below its bands
        "gate": cb + ["gate", before, after, "--expect", str(folder / "bands.yaml"), "--out", str(folder / "gate.txt")],
        "plot": cb + ["plot", before, after, "--out", str(folder / "plot.png")],
        "report": cb + ["report", after, "--baseline", before, "--out", str(folder / "report.html")],
    }


def suggest_bands(folder: Path, min_size: str = "1G") -> None:
    """bands.yaml from the first 25 repetitions of the first before night (setup, not measured):
    the entries gate judges."""
    if (folder / "bands.yaml").exists() and (folder / "bands.yaml").stat().st_size:
        return
    sample = folder / "bands-sample.parquet"  # beside the sides' folders, not in them
    # In a process of its own: a child's ru_maxrss starts from its parent's peak, so this one stays
    # small. Strings read dictionary-encoded: decoded, the net column of 500,000 rows is tens of GB.
    script = ("import sys, pyarrow as pa, pyarrow.parquet as pq; p = sys.argv[1]; "
              "s = [f.name for f in pq.read_schema(p) if pa.types.is_string(f.type)]; "
              "pq.write_table(pq.ParquetFile(p, read_dictionary=s).read_row_group(0), sys.argv[2], "
              "compression='zstd', store_schema=False)")
    subprocess.run([sys.executable, "-c", script, str(side_files(folder, "before")[0]), str(sample)], check=True)
    # bands from 1 GiB up: a few thousand entries, within the 1 MiB a bands file may hold
    argv = [sys.executable, "-m", "commbench", "gate", "--suggest", str(sample), "--allow-wide", "--min-size", min_size,
            "--out", str(folder / "bands.yaml"), "--force"]
    done = subprocess.run(argv, cwd=REPO, env=common.child_env(), capture_output=True, text=True)
    sample.unlink()
    if done.returncode != 0:
        raise SystemExit(f"gate --suggest failed (exit {done.returncode}): {done.stderr[-800:]}")


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f}"


def budget_s(rows: int) -> float:
    return BUDGET_S if rows <= 1_000_000 else BUDGET_LARGE_S


def run_markdown(tag: str, figures: dict) -> list[str]:
    d, m = figures["data"], figures["machine"]
    per_row = d.get("bytes_per_row_by_part", {})
    limit = figures["budget"]["wall_s"]
    engine = figures.get("engine_rows")
    lines = [f"## {tag}: {d['rows']:,} rows", "",
             f"Machine: {common.machine_line(m)}; load average {figures['loadavg_end']:.2f} at the end.",
             f"Command: `{figures['command']}` ({figures['seconds']:.0f} s in all); "
             f"COMMBENCH_ENGINE_ROWS {'unset (default)' if engine is None else engine}.", "",
             f"Data: {d['rows']:,} rows, two sides (before: MTU 1500, after: MTU 9000) of "
             f"{d.get('nights', 1)} night{'s' if d.get('nights', 1) != 1 else ''} (files) each, "
             f"{d.get('points_per_side', '?'):,} points a night x {d.get('repetitions', '?')} repetitions, "
             f"{d.get('samples_per_row', '?')} samples_us a row, per-rank lists "
             f"{'filled' if d.get('per_rank') else 'empty'}; "
             f"{d['bytes']:,} bytes of parquet (zstd) = **{d['bytes_per_row']} bytes a row**"
             + (" (" + ", ".join(f"{k} {v}" for k, v in per_row.items()) + ")" if per_row else "") + ".", "",
             f"| command | wall s | peak RSS GB | exit | within {limit:g} s and {BUDGET_BYTES / 1e9:g} GB |",
             "|---|---:|---:|---:|---|"]
    if d.get("seed"):
        lines[-4:-4] = [f"Rows shaped from the real sweep {d['seed']} (every column, wire counters on every row), "
                        f"its 2 ranks on {d.get('seed_hosts', 2)} host(s).", ""]
    if figures.get("as_limit_kib"):
        lines[-2:-2] = [f"Each command under `ulimit -v {figures['as_limit_kib']}` (RLIMIT_AS).", ""]
    for r in figures["commands"].values():
        last = r.get("last_stderr") if r["exit_code"] not in (0, 1, 3) else None
        lines.append(f"| `{' '.join(r['argv'])}` | {r['wall_s']:.2f} | {_gb(r['peak_rss_bytes'])} | {r['exit_code']} | "
                     f"{'yes' if r['ok'] else 'NO' + (' (' + r['killed'] + ')' if r['killed'] else '')}"
                     + (f": {last.replace('|', '/')}" if last else "") + " |")
    return lines + [""]


def markdown(runs: dict) -> str:
    lines = ["# Analysis at scale: compare, gate, plot and report over generated rows", "",
             "Wall time and peak RSS of each command as a subprocess (ru_maxrss of the child from wait4), "
             "every command over every row. compare and gate exit 1: the after side's all_to_all bfloat16 is "
             "made 8% slower, beside the MTU 9000 gain between nodes. GB = 1e9 bytes. The engine "
             "(analysis/points/pointtable.py, DuckDB over parquet) aggregates the inputs of all four from "
             "COMMBENCH_ENGINE_ROWS rows on (500,000 by default); below it pandas reads them. The table "
             "'before this change' ran main as it was (its gate, a pass over every row per entry, was not "
             "in this benchmark: at 1M rows and 2,600 entries it runs for minutes).", ""]
    for tag, figures in runs.items():
        lines += run_markdown(tag, figures)
    return "\n".join(lines)


def saved_runs() -> dict:
    path = common.RESULTS / "analysis_scale.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return old.get("runs", {}) if isinstance(old, dict) else {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in all, half a side [1000000]")
    ap.add_argument("--nights", type=int, default=1, help="result files a side, one run each [1]")
    ap.add_argument("--repetitions", type=int, default=25, help="repetitions of every point [25]")
    ap.add_argument("--samples", type=int, default=20, help="per-iteration samples in every row [20]")
    ap.add_argument("--per-rank", action=argparse.BooleanOptionalAction, default=True,
                    help="fill the per-rank list columns (rank_time_us, rank_skew_us) when the schema has them")
    ap.add_argument("--only", action="append", choices=["compare", "gate", "plot", "report"],
                    help="run only this command (repeat for several) [all four]")
    ap.add_argument("--engine-rows", type=int, default=None,
                    help="COMMBENCH_ENGINE_ROWS for the commands (0: always the engine) [unset: the default]")
    ap.add_argument("--tag", default=None, help="the table this run fills in the results [e.g. '1M rows']")
    ap.add_argument("--keep", type=Path, default=None,
                    help="generate into (or reuse the files in) this folder and keep it [a temporary folder]")
    ap.add_argument("--save", action=argparse.BooleanOptionalAction, default=True,
                    help="add the run to benchmarks/results/analysis_scale.json and .md (--no-save for a smoke run)")
    ap.add_argument("--time-limit", type=float, default=180.0, help="kill a command after this many seconds [180]")
    ap.add_argument("--memory-cap", type=float, default=8.0, help="kill a command past this many GB of RSS [8]")
    ap.add_argument("--as-limit", type=int, default=None, metavar="KIB",
                    help="cap each command's address space as `ulimit -v KIB` does (RLIMIT_AS; 8000000: "
                         "8 GB) [none]")
    ap.add_argument("--code", type=Path, default=None,
                    help="run the commands from this checkout of commbench (e.g. a `git worktree` of the commit "
                         "before a change), the data generated by this one [this checkout]")
    ap.add_argument("--seed", type=Path, nargs="?", const=SEED_FILE, default=None,
                    help="shape the rows as this real sweep's file writes them: every column, wire counters "
                         f"included (no FILE: {SEED_FILE.relative_to(REPO)}) [the NCCL cluster model]")
    ap.add_argument("--seed-hosts", type=int, choices=[1, 2], default=2,
                    help="--seed: the 2 ranks on 2 hosts (one rank each: wire_per_payload filled) or 1 [2]")
    args = ap.parse_args(argv)
    if args.rows < 2 or args.repetitions < 1 or args.samples < 1 or args.nights < 1:
        ap.error("--rows, --nights, --repetitions and --samples must be positive")
    nights = args.nights
    if nights > 28:
        ap.error("--nights: at most 28 (one March night each)")
    started = time.perf_counter()
    m0 = common.machine()
    env = common.child_env()
    if args.code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(args.code.resolve()), *filter(None, [os.environ.get("PYTHONPATH")])])
    if args.engine_rows is not None:
        env["COMMBENCH_ENGINE_ROWS"] = str(args.engine_rows)
    limit = budget_s(args.rows)
    seed = Seed(args.seed) if args.seed is not None else None
    as_limit = args.as_limit * 1024 if args.as_limit else None

    with tempfile.TemporaryDirectory(prefix="commbench-scale-") as tmp:
        folder = (args.keep or Path(tmp)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if args.keep and all(len(side_files(folder, s)) == nights for s, _, _ in SIDES):
            data = describe(folder) | {"reused": True, "points_per_side": args.rows // (2 * nights * args.repetitions),
                                       "repetitions": args.repetitions, "samples_per_row": args.samples,
                                       "nights": nights, "per_rank": args.per_rank}
            if seed is not None:
                data |= {"seed": str(seed.path.relative_to(REPO) if seed.path.is_relative_to(REPO) else seed.path),
                         "seed_hosts": args.seed_hosts, "samples_per_row": "as the seed (adaptive)", "per_rank": True}
            if data["rows"] != args.rows:
                raise SystemExit(f"{folder} holds {data['rows']:,} rows, not --rows {args.rows:,}: pass another --keep")
            print(f"reusing {data['rows']:,} rows in {folder}", flush=True)
        else:
            data = generate(folder, args.rows, args.repetitions, args.samples, args.per_rank, nights, seed,
                            args.seed_hosts)
            print(f"generated {data['rows']:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
        print(f"{data['bytes']:,} bytes of parquet: {data['bytes_per_row']} bytes a row "
              f"({', '.join(f'{k} {v}' for k, v in data['bytes_per_row_by_part'].items())})", flush=True)
        suggest_bands(folder, "1M" if seed is not None else "1G")
        for out in ("compare.txt", "gate.txt", "plot.png", "report.html"):
            (folder / out).unlink(missing_ok=True)
        results = {}
        for name, cmd in commands(folder).items():
            if args.only and name not in args.only:
                continue
            r = measure(cmd, args.code.resolve() if args.code else REPO, args.time_limit, int(args.memory_cap * 1e9),
                        env, as_limit)
            r["ok"] = (r["killed"] is None and r["exit_code"] in ((0, 1, 3) if name == "compare" else (0, 1))
                       and r["wall_s"] <= limit and r["peak_rss_bytes"] <= BUDGET_BYTES)
            r["argv"] = ["commbench"] + [a if not a.startswith(str(folder)) else Path(a).name for a in cmd[3:]]
            results[name] = r
            print(f"  {name:8s} {r['wall_s']:7.2f} s  {_gb(r['peak_rss_bytes'])} GB  exit {r['exit_code']}"
                  + (f"  {r['killed']}" if r["killed"] else "") + ("" if r["ok"] else "  OVER BUDGET")
                  + (f"\n           last stderr: {r['last_stderr']}" if r["last_stderr"] else ""), flush=True)
            if r["exit_code"] not in (0, 1):
                print(r["stderr_tail"], file=sys.stderr)

    print()
    print(f"{'command':10s} {'wall (s)':>9s} {'peak RSS (GB)':>14s}  within {limit:g} s / {BUDGET_BYTES / 1e9:g} GB")
    for name, r in results.items():
        print(f"{name:10s} {r['wall_s']:9.2f} {_gb(r['peak_rss_bytes']):>14s}  {'yes' if r['ok'] else 'NO'}")
    figures = {
        "command": " ".join(["python benchmarks/analysis_scale.py", *(argv if argv is not None else sys.argv[1:])]),
        "budget": {"wall_s": limit, "peak_rss_bytes": BUDGET_BYTES}, "engine_rows": args.engine_rows,
        "as_limit_kib": args.as_limit, "code": str(args.code) if args.code else None,
        "machine": m0, "loadavg_end": os.getloadavg()[0], "seconds": round(time.perf_counter() - started, 1),
        "versions": {mod: __import__(mod).__version__
                     for mod in ("pyarrow", "pandas", "numpy", "matplotlib", "scipy", "duckdb")},
        "data": data, "commands": results,
    }
    if args.save:
        runs = saved_runs()
        runs[args.tag or f"{args.rows:,} rows"] = figures
        js, md = common.write("analysis_scale", {"runs": runs}, markdown(runs))
        print(f"\nwritten {js.relative_to(REPO)} and {md.relative_to(REPO)}")
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
