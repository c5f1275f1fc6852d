"""A job's communication as a trace: the groups it created and, per rank, every collective and
point-to-point op in the order it was issued (issue #42's capture, read back for replay).

One model whatever the source: commbench's own capture (integrations/capture.py), a PyTorch
Execution Trace or DeepSpeed's comms logger (core/tracereaders.py). An op carries its
collective's name from core/vocab.py where one exists (all_reduce, all_gather, reduce_scatter,
broadcast, all_to_all, reduce, gather, scatter), else send, recv or barrier; the function that
was called (all_gather_into_tensor, c10d::allreduce_, ...); the bytes it read and wrote on its
rank; dtype; group; async or not; the step when the job marked one; wall times in ns since the
epoch and, on GPU, the event time. The file is JSON lines: a header line (format, version, world
size, source, groups), then one op per line. A newer version or another format is refused in
one line, as core/results.py refuses a newer schema_version.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Iterator

from commbench.core.errors import BadInput

FORMAT = "commbench-trace"
VERSION = 1
WORLD = "0"  # the default group's id: torch names it "0" on every rank

# What each source gives: a capture orders every op; the comms logger aggregates per message size.
SOURCES = ("commbench-capture", "execution-trace", "deepspeed-comms-logger")


@dataclass(frozen=True)
class Group:
    """A process group: torch's group name (the same on every rank), its global ranks, its
    description (torch's group_desc, e.g. default_pg) when known."""

    id: str
    ranks: tuple[int, ...]
    desc: str = ""


@dataclass(frozen=True)
class Op:
    """One communication call on one rank."""

    rank: int
    index: int                  # issue order on this rank, from 0
    op: str                     # all_reduce | all_gather | ... | send | recv | barrier
    call: str                   # the function called: all_gather_into_tensor, c10d::allreduce_, ...
    group: str = WORLD
    bytes_in: int = 0           # what this rank's call read (its input tensors)
    bytes_out: int = 0          # what it wrote (its output tensors)
    dtype: str = ""             # float16, bfloat16, float32, ... ('' when the source does not say)
    async_op: bool = False
    step: int | None = None     # the job's step when it marked one
    peer: int | None = None     # src / dst (global rank) of a point-to-point or rooted op
    in_splits: tuple[int, ...] | None = None   # all_to_all_single's split sizes (elements)
    out_splits: tuple[int, ...] | None = None
    start_ns: int | None = None  # wall clock, ns since the epoch
    end_ns: int | None = None    # for an async op: when the call returned, not when the work ended
    event_ms: float | None = None  # GPU event time of the op, when recorded

    @property
    def bytes(self) -> int:
        """The op's size as docs/RESULTS.md's S: the larger of what it read and wrote."""
        return max(self.bytes_in, self.bytes_out)


@dataclass(frozen=True)
class Trace:
    world_size: int
    source: str
    groups: dict[str, Group]
    ops: tuple[Op, ...]
    ordered: bool = True        # False: ops aggregated (the comms logger), their order unknown
    version: int = VERSION
    meta: dict[str, Any] = field(default_factory=dict)

    def rank_ops(self, rank: int) -> list[Op]:
        return sorted((o for o in self.ops if o.rank == rank), key=lambda o: o.index)

    @property
    def ranks(self) -> list[int]:
        return sorted({o.rank for o in self.ops})

    def totals(self, rank: int | None = None, step_only: bool = False) -> dict[str, tuple[int, int]]:
        """op -> (calls, bytes as S), over one rank or all; step_only: ops inside a marked step."""
        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for o in self.ops:
            if (rank is None or o.rank == rank) and (not step_only or o.step is not None):
                counts[o.op] += 1
                sizes[o.op] += o.bytes
        return {k: (counts[k], sizes[k]) for k in sorted(counts)}


# ----------------------------------------------------------------------------- the file

def header(trace: Trace) -> dict[str, Any]:
    return {"format": FORMAT, "version": trace.version, "world_size": trace.world_size, "source": trace.source,
            "ordered": trace.ordered, "ops": len(trace.ops), "meta": trace.meta,
            "groups": [{"id": g.id, "ranks": list(g.ranks), "desc": g.desc} for g in trace.groups.values()]}


def op_line(op: Op) -> str:
    """One op as a JSON line; fields at their default are left out to keep files small."""
    defaults = {f.name: f.default for f in fields(Op)}
    return json.dumps({k: v for k, v in asdict(op).items() if k in ("rank", "index", "op") or v != defaults[k]},
                      separators=(",", ":"))


def write(trace: Trace, path: str | Path) -> None:
    """Write atomically: a reader never sees half a file."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(header(trace), separators=(",", ":")) + "\n")
        for op in sorted(trace.ops, key=lambda o: (o.rank, o.index)):
            f.write(op_line(op) + "\n")
    tmp.replace(target)


def read(path: str | Path) -> Trace:
    """A commbench trace file; BadInput (one line) for another format, a newer version, a truncated file."""
    lines = _lines(path)
    head = check_header(_json(*next(lines, (1, "")), path), path)
    ops = [_op(_json(n, text, path), path, n) for n, text in lines]
    if isinstance(head.get("ops"), int) and head["ops"] != len(ops):
        raise BadInput(f"{path} holds {len(ops)} ops of the {head['ops']} its header names (a truncated trace?): "
                       f"record it again with 'commbench capture --out {path} -- ...'")
    groups = {g["id"]: Group(str(g["id"]), tuple(g["ranks"]), g.get("desc", "")) for g in head.get("groups", [])}
    return Trace(world_size=int(head["world_size"]), source=str(head.get("source", SOURCES[0])), groups=groups,
                 ops=tuple(ops), ordered=bool(head.get("ordered", True)), version=int(head["version"]),
                 meta=dict(head.get("meta") or {}))


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read trace {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return ((n, t) for n, t in enumerate(text.splitlines(), start=1) if t.strip())


def _json(line: int, text: str, path: str | Path) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise BadInput(f"{path} line {line} is not JSON (a truncated or damaged trace?): "
                       f"record it again with 'commbench capture --out {path} -- ...'") from None


def check_header(head: Any, path: str | Path) -> dict[str, Any]:
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise BadInput(f"{path} is not a commbench trace (no '\"format\": \"{FORMAT}\"' header): record one with "
                       "'commbench capture', or read an Execution Trace or a DeepSpeed comms log with read_any")
    version = head.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BadInput(f"{path} has trace version {version!r}, which is not a version: record it again")
    if version > VERSION:
        raise BadInput(f"{path} has trace version {version}, newer than this commbench reads ({VERSION}): "
                       "upgrade commbench")
    if not isinstance(head.get("world_size"), int) or head["world_size"] < 1:
        raise BadInput(f"{path} has no world size in its header: record it again")
    return head


_OP_FIELDS = {f.name for f in fields(Op)}


def _op(doc: Any, path: str | Path, n: int) -> Op:
    if not isinstance(doc, dict) or not {"rank", "index", "op"} <= doc.keys() or not doc.keys() <= _OP_FIELDS:
        raise BadInput(f"{path} line {n} is not a trace op (rank, index, op, ...): record the trace again")
    for key in ("in_splits", "out_splits"):
        if doc.get(key) is not None:
            doc[key] = tuple(doc[key])
    doc.setdefault("call", doc["op"])
    return Op(**doc)


# ----------------------------------------------------------------------------- merging rank parts

def merge(parts: Iterable[Trace], meta: dict[str, Any] | None = None) -> Trace:
    """Per-rank traces of one job as one: groups united, ops kept per rank in their order.
    Ranks with no part are named in meta["missing_ranks"] rather than refused: a rank that
    issued nothing writes nothing."""
    parts = list(parts)
    if not parts:
        raise BadInput("no rank wrote a trace part: did the job call torch.distributed at all?")
    world = max(p.world_size for p in parts)
    groups: dict[str, Group] = {}
    for p in parts:
        groups.update(p.groups)
    ops = tuple(o for p in parts for o in p.ops)
    seen = {o.rank for o in ops} | {r for p in parts for r in p.meta.get("ranks", [])}
    merged_meta = {**(meta or {}), "missing_ranks": [r for r in range(world) if r not in seen]}
    return Trace(world_size=world, source=parts[0].source, groups=groups, ops=ops,
                 ordered=all(p.ordered for p in parts), meta=merged_meta)
