"""nccl-tests halves -> commbench result rows: the run's columns, the stream's topology, repetitions,
bandwidths printed as 0.00 recomputed (S, algbw, busbw as docs/RESULTS.md defines them), rows
nccl-tests prints but commbench does not keep left out and named (values.py), and the world size a
log did not print (no Rank lines, or cut ones) found from busbw/algbw (worldsize.py)."""

from __future__ import annotations

import collections
import datetime as dt
import json
from dataclasses import dataclass, field

import commbench
from commbench.core.errors import BadInput
from commbench.integrations.nccl_tests.format import (LAUNCHER, WORKLOAD, bus_factor, canonical,
                                                      collective_from_program, dtype_name, fail_collective, op_name,
                                                      rooted, where)
from commbench.integrations.nccl_tests.arith import Refusals
from commbench.integrations.nccl_tests.model import Half, Stream
from commbench.integrations.nccl_tests.values import WHY, keep
from commbench.integrations.nccl_tests.worldsize import infer_world


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
        self.left_out: dict[str, list[int]] = {}  # reason -> the lines (JSON: results) of the halves left out
        # Rows whose log does not say the world size: judged once `finish` has it from their ratio.
        self.pending: list[tuple[Half, str, dict, tuple[int, int] | None]] = []

    def collective_for(self, stream: Stream, line: int) -> str:
        name = self.collective or collective_from_program(stream.program) or self.hint
        if name is None:
            raise BadInput(f"{where(self.source, line)}: cannot tell which collective this output measured "
                           "(no 'Collective test starting' line, no collective in the file name): pass "
                           "--collective, e.g. --collective all_reduce")
        return name

    def record(self, h: Half, stream: Stream) -> dict | None:
        """The row of one half, or None for halves commbench does not keep (counted in `skipped`)."""
        reason = keep(h, where(self.source, h.line))
        if reason is not None:
            self.skipped[reason] += 1
            self.left_out.setdefault(reason, []).append(h.line)
            return None
        coll = self.collective_for(stream, h.line)
        world = stream.world()
        rec = self._columns(h, stream, coll, world)
        if world is None:
            self.pending.append((h, coll, rec, stream.cut_ranks()))
        else:
            self.refusals.judge(h, coll, world)
        return rec

    def _columns(self, h: Half, stream: Stream, coll: str, world: int | None) -> dict:
        hosts, nnodes, per_node, device_name = stream.topology()
        dtype, op = dtype_name(h.dtype), op_name(h.op)
        root = h.root if h.root is not None else (None if rooted(coll) else -1)
        key = (coll, dtype, op, root, h.size, h.in_place)
        rep = self.reps[key]
        self.reps[key] += 1
        t = float(h.time or 0)  # keep() left out the halves without one
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


    def finish(self, unit: str = "line") -> list[str]:
        """The world size of the rows whose log did not say it (no Rank lines, or cut ones), from
        their busbw/algbw and the rank numbers shown (worldsize.py), each such row then judged with
        it and its bandwidths printed as 0.00 recomputed; and a line for each kind of row left out.
        The lines to say (how the world size was found, which rows were left out)."""
        groups: dict[tuple[str, tuple[int, int] | None], list[tuple[Half, dict]]] = collections.defaultdict(list)
        for h, coll, rec, shown in self.pending:
            groups[(coll, shown)].append((h, rec))
        self.pending = []
        notes = []
        for (coll, shown), rows in groups.items():
            found = infer_world(coll, [h for h, _ in rows], shown, self.source)
            if found.note:
                notes.append(found.note)
            for h, rec in rows:
                self.refusals.judge(h, coll, found.world)
                if found.world is not None:
                    _with_world(rec, coll, found.world)
        for reason, halves in self.left_out.items():
            lines = sorted(set(halves))
            shown_lines = ", ".join(map(str, lines[:8])) + (f" and {len(lines) - 8} more" if len(lines) > 8 else "")
            many = "s" if len(halves) > 1 else ""
            notes.append(f"{len(halves)} half-row{many} {reason} left out ({unit}{'s' * (len(lines) > 1)} "
                         f"{shown_lines}): {WHY[reason]}")
        return notes


def _with_world(rec: dict, coll: str, n: int) -> None:
    """A row's world size found after it was made: its columns that follow from it."""
    rec["world_size"] = n
    if n == 1:
        rec["nnodes"], rec["ranks_per_node"] = 1, 1
    factor = bus_factor(coll, n)
    if factor and rec["busbw_GBps"] == 0.0 and rec["algbw_GBps"]:
        rec["busbw_GBps"] = rec["algbw_GBps"] * factor


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
