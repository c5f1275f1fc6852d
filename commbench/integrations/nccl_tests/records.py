"""nccl-tests halves -> commbench result rows: the run's columns, the stream's topology, repetitions,
bandwidths printed as 0.00 recomputed (S, algbw, busbw as docs/RESULTS.md defines them), and the
world size a log did not print inferred from busbw/algbw."""

from __future__ import annotations

import collections
import datetime as dt
import json
import math
from dataclasses import dataclass, field

import commbench
from commbench.core.errors import BadInput
from commbench.integrations.nccl_tests.format import (LAUNCHER, WORKLOAD, bus_factor, canonical,
                                                      collective_from_program, dtype_name, fail_collective, op_name,
                                                      rooted, where)
from commbench.integrations.nccl_tests.arith import Refusals
from commbench.integrations.nccl_tests.model import Half, Stream


@dataclass
class Parsed:
    records: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failed: bool = False  # a data check failed (#wrong > 0, or "Out of bounds values : N FAILED")
    lines: int = 0
    skipped: dict = field(default_factory=dict)  # reason -> halves not kept
    fmt: str = "text"
    json_path: str | None = None  # "Writing JSON output to ..." seen
    transport: str | None = None


class RecordBuilder:
    """Turns halves into commbench rows: the run's columns, the stream's topology, repetitions."""

    def __init__(self, run: dict, collective: str | None, hint: str | None, source: str):
        self.run = run
        if collective is not None:
            collective = canonical(collective) or fail_collective(collective)
        self.collective = collective  # --collective: wins over everything
        self.hint = hint  # from the file or binary name: used when the output does not say
        self.source = source
        self.reps: collections.Counter = collections.Counter()
        self.skipped: collections.Counter = collections.Counter()  # reason -> halves not kept
        self.transport: str | None = None
        self.refusals = Refusals()  # rows whose arithmetic nccl-tests could not have printed

    def collective_for(self, stream: Stream, line: int) -> str:
        name = self.collective or collective_from_program(stream.program) or self.hint
        if name is None:
            raise BadInput(f"{where(self.source, line)}: cannot tell which collective this output measured "
                           "(no 'Collective test starting' line, no collective in the file name): pass "
                           "--collective, e.g. --collective all_reduce")
        return name

    def record(self, h: Half, stream: Stream) -> dict | None:
        """The row of one half, or None for halves commbench does not keep (counted in `skipped`)."""
        if h.size == 0:
            self.skipped["of size 0"] += 1
            return None
        if h.time is None or not math.isfinite(h.time) or h.time <= 0:
            self.skipped["without a time"] += 1
            return None
        coll = self.collective_for(stream, h.line)
        world = stream.world()
        self.refusals.judge(h, coll, world)
        hosts, nnodes, per_node, device_name = stream.topology()
        dtype, op = dtype_name(h.dtype), op_name(h.op)
        root = h.root if h.root is not None else (None if rooted(coll) else -1)
        key = (coll, dtype, op, root, h.size, h.in_place)
        rep = self.reps[key]
        self.reps[key] += 1
        t = h.time
        alg, bus = h.algbw, h.busbw
        if not alg:
            alg = h.size / t / 1e3  # printed 0.00 (below the print precision) or nan: S/t
        factor = bus_factor(coll, world)
        if not bus and factor is not None:
            bus = alg * factor
        return {
            **self.run,
            "collective": coll, "dtype": dtype, "op": op, "root": root,
            "size_bytes": h.size, "count": h.count, "in_place": h.in_place,
            "world_size": world, "nnodes": nnodes, "ranks_per_node": per_node, "group_index": stream.split_group(),
            **_split_columns(stream),
            "device_name": device_name,
            "iters": h.iters if h.iters is not None else stream.iters,
            "warmup": stream.warmup, "repetition": rep,
            "time_us": t,
            "time_us_min": h.tmin if h.tmin is not None else t,
            "time_us_max": h.tmax if h.tmax is not None else t,
            "time_us_p99": h.tp99 if h.tp99 is not None else t,
            "algbw_GBps": alg, "busbw_GBps": bus, "wrong": h.wrong, "check_error": h.error,
            "samples_us": h.samples if h.samples else [t],
            "hosts": hosts, "nccl_version": stream.nccl_version or self.run.get("nccl_version"),
            "transport": self.transport,
            "nccl_algo": None, "nccl_proto": None,  # filled from NCCL's TUNING lines when the log has them
            "plan": json.dumps({**json.loads(self.run.get("plan") or "{}"),
                                "program": stream.program, "nccl_tests_version": stream.tests_version,
                                "time_column": stream.layout.time_name if stream.layout else "time",
                                "agg_iters": stream.agg_iters, "nthread": stream.nthread, "ngpus": stream.ngpus,
                                "validation": stream.validation, "graph": stream.graph, "line": h.line,
                                **_split_plan(stream)},
                               sort_keys=True),
        }


def _split_columns(stream: Stream) -> dict:
    """A split log's rows as `sweep --split` writes its own (group_dim `split`, every group at once),
    so compare pairs an imported group with a measured one; an unsplit log's, null."""
    split = stream.split_group() is not None
    return {"group_dim": "split" if split else None, "concurrent": True if split else None}


def _split_plan(stream: Stream) -> dict:
    """What a split log says of the whole run (its rows are the printing rank's group's): every
    rank and how many groups ran at once; nothing when unsplit."""
    if stream.split_group() is None:
        return {}
    return {"split_ranks": len(stream.ranks), "split_groups": len({i.group for i in stream.ranks.values()})}


def finalize(records: list[dict]) -> None:
    """World size where the output did not say (no Rank lines): from busbw/algbw, then the
    bandwidths printed as 0.00 recomputed with it."""
    by_coll: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records:
        if r["world_size"] is None:
            by_coll[r["collective"]].append(r)
    for coll, rows in by_coll.items():
        n = _infer_world(coll, rows)
        if n is None:
            continue
        for r in rows:
            r["world_size"] = n
            if n == 1:
                r["nnodes"], r["ranks_per_node"] = 1, 1
            factor = bus_factor(coll, n)
            if factor and r["busbw_GBps"] == 0.0 and r["algbw_GBps"]:
                r["busbw_GBps"] = r["algbw_GBps"] * factor


def _infer_world(coll: str, rows: list[dict]) -> int | None:
    """busbw/algbw is the bus factor of n ranks: 0 for one rank, 2(n-1)/n for all_reduce, (n-1)/n
    for the gather/scatter family. Every row with a printed algbw of 1 GB/s or more must agree,
    within the print precision (2 decimals), on exactly one n; otherwise the answer is unknown."""
    if bus_factor(coll, 2) is None or bus_factor(coll, 2) == bus_factor(coll, 3):
        return None  # a constant factor (broadcast, reduce, sendrecv) says nothing about n
    factors = {n: bus_factor(coll, n) for n in range(1, 4097)}
    candidates: set[int] | None = None
    for r in rows:
        alg, bus = r["algbw_GBps"], r["busbw_GBps"]
        if alg is None or bus is None or not alg >= 1.0:
            continue
        ratio = bus / alg
        tol = 0.006 * (1 + ratio) / alg  # both printed to +-0.005
        fits = {n for n, f in factors.items() if abs(f - ratio) <= tol}
        candidates = fits if candidates is None else candidates & fits
    if candidates is not None and len(candidates) == 1:
        return candidates.pop()
    return None


def base_columns(run_id: str, label: str, started_at: dt.datetime, env: dict, plan: dict) -> dict:
    from commbench.core.columns import SCHEMA_VERSION

    return {
        "run_id": run_id, "label": label, "started_at": started_at,
        "backend": "nccl", "device": "cuda", "launcher": LAUNCHER, "workload": WORKLOAD,
        "bucket_bytes": None, "zero_stage": None, "mtu": None, "iface": None, "link_layer": None,
        "commbench_version": commbench.__version__, "torch_version": None, "nccl_version": None,
        "env": json.dumps(env, sort_keys=True), "net": "{}", "plan": json.dumps(plan, sort_keys=True),
        "schema_version": SCHEMA_VERSION,
    }


def describe(p: Parsed) -> str:
    from commbench.core.units import format_size

    recs = p.records
    colls = sorted({f"{r['collective']} {r['dtype']}" for r in recs})
    worlds = sorted({r["world_size"] for r in recs if r["world_size"] is not None})
    hosts = {h for r in recs for h in (r["hosts"] or [])}
    sizes = [r["size_bytes"] for r in recs]
    parts = [", ".join(colls),
             f"{format_size(min(sizes))}..{format_size(max(sizes))}" if sizes else "",
             (f"{'/'.join(map(str, worlds))} ranks" if worlds else "ranks unknown")
             + (f" on {len(hosts)} host(s)" if hosts else ""),
             f"NCCL {recs[0]['nccl_version']}" if recs and recs[0]["nccl_version"] else "",
             f"transport {p.transport}" if p.transport else ""]
    for reason, n in p.skipped.items():
        parts.append(f"{n} half-rows {reason} skipped")
    return "; ".join(x for x in parts if x)
