"""What `commbench replay` runs, worked out from a trace (core/trace.py) before any rank starts:
the groups to create, each rank's ops per step, and what the job itself took (no torch: the CLI
checks a trace with it; workloads/replay.py issues it with real collectives).

Steps that issue the same ops on every rank (op, group, bytes, dtype, peer, async) are one shape,
replayed once and reported for all of them (`trace_steps`); a training loop's steps usually are.
An op is known across ranks by its key: a collective by (group, its place among that group's
collectives), a point-to-point op by (sender, receiver, its place among that pair's messages),
which is how torch itself matches them. Recorded times: an op's end minus start on the rank that
spent least in it (the last to arrive waited for no one: its time is the communication, the
others' also holds their wait for a late rank); a step's, the sum over its ops (with gaps, the
step's span on its slowest rank); each the median over the steps of its shape.
"""

from __future__ import annotations

import functools
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from commbench.core.errors import BadInput
from commbench.core.layout import data_parallel
from commbench.core.trace import WORLD, Group, Op, Trace

UNMARKED = -1  # trace_step of the ops outside any step the job marked
POINT_TO_POINT = ("send", "recv")
STEP_COLLECTIVE = "replay_step"  # the pseudo-collective of a replayed step's row (docs/REPLAY.md)
MAX_OPS_PER_STEP = 20_000  # one step's ops, each with buffers of its own

Key = tuple[object, ...]  # ("c", group, n) or ("p", src, dst, n)


@dataclass(frozen=True)
class ReplayOp:
    """One op of one rank in a step, as replay issues it."""

    key: Key
    op: Op
    gap_s: float = 0.0  # the compute gap before it (median over the shape's steps), for --with-gaps

    def signature(self) -> tuple[object, ...]:
        o = self.op
        return (o.op, o.group, o.bytes_in, o.bytes_out, o.dtype, o.async_op, o.peer, o.in_splits, o.out_splits)


@dataclass(frozen=True)
class Shape:
    """Steps that issue the same ops: replayed once."""

    steps: tuple[int, ...]
    ops: dict[int, tuple[ReplayOp, ...]]  # rank -> its ops, in issue order
    recorded_us: float | None  # the step's communication time as the job ran it
    op_recorded_us: dict[Key, float] = field(default_factory=dict)
    op_index: dict[Key, int] = field(default_factory=dict)  # the op's index on the lowest rank that issued it

    @property
    def step(self) -> int:
        return self.steps[0]

    def keys(self) -> list[Key]:
        """Every distinct op of the step, in the order of the lowest rank that issued it."""
        return sorted(self.op_index, key=lambda k: (self._members[k][0], self.op_index[k]))

    def ranks_of(self, key: Key) -> list[int]:
        return self._members[key]

    def first(self, key: Key) -> Op:
        return self._members_first[key]

    @functools.cached_property
    def _members(self) -> dict[Key, list[int]]:
        """Per op, the ranks that issue it, ascending (read once: a step may hold 20,000 ops)."""
        out: dict[Key, list[int]] = {}
        for r in sorted(self.ops):
            for o in self.ops[r]:
                ranks = out.setdefault(o.key, [])
                if not ranks or ranks[-1] != r:
                    ranks.append(r)
        return out

    @functools.cached_property
    def _members_first(self) -> dict[Key, Op]:
        """Per op, the lowest issuing rank's."""
        out: dict[Key, Op] = {}
        for r in sorted(self.ops):
            for o in self.ops[r]:
                out.setdefault(o.key, o.op)
        return out


@dataclass(frozen=True)
class Program:
    world_size: int
    groups: tuple[Group, ...]  # to create, in this order on every rank (the default group excluded)
    shapes: tuple[Shape, ...]
    with_gaps: bool = False
    recorded_world: int = 0  # the trace's own world size where --world-size changed it (0: the same)

    def group_size(self, gid: str) -> int:
        return self.world_size if gid == WORLD else len(next(g.ranks for g in self.groups if g.id == gid))

    def buffer_bytes(self, rank: int) -> int:
        """What one rank's buffers hold for its largest step: every op has its own."""
        return max((sum(o.op.bytes_in + o.op.bytes_out for o in s.ops.get(rank, ())) for s in self.shapes), default=0)


def format_steps(steps: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    runs: list[list[int]] = []
    for s in sorted(steps):
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


# ----------------------------------------------------------------------------- checks

def check(trace: Trace, name: str) -> None:
    """A trace replay can issue: ordered, every op on a group the trace created, every rank inside."""
    if not trace.ordered:
        raise BadInput(f"{name} is {trace.source} output, which counts calls per size and keeps no order: "
                       "replay needs every op in order: record the job with 'commbench capture' or an Execution Trace")
    if not trace.ops:
        raise BadInput(f"{name} holds no op: record a job that calls torch.distributed")
    for o in trace.ops:
        if o.group != WORLD and o.group not in trace.groups:
            made = ", ".join(sorted(trace.groups)) or "none"
            raise BadInput(f"{name}: rank {o.rank}'s op {o.index} ({o.op}) runs on group {o.group!r}, which the trace "
                           f"never created (groups: {made}): record the trace again, with the job's group creation")
        ranks = range(trace.world_size) if o.group == WORLD else trace.groups[o.group].ranks
        if o.rank not in ranks or (o.peer is not None and o.peer not in range(trace.world_size)):
            raise BadInput(f"{name}: rank {o.rank}'s op {o.index} ({o.op}) names a rank outside its group or the "
                           f"{trace.world_size}-rank world: the trace is damaged; record it again")


def check_world(program: Program, world: int, name: str) -> None:
    if world != program.world_size and program.recorded_world:
        raise BadInput(f"--world-size {program.world_size} replays {name} at {program.world_size} ranks and this "
                       f"run has {world}: launch {program.world_size} ranks, or pass --world-size {world}")
    if world != program.world_size:
        raise BadInput(f"{name} was recorded with {program.world_size} ranks and this run has {world}: launch "
                       f"{program.world_size} ranks (--nproc {program.world_size}, or the launcher's), or pass "
                       f"--world-size {world} (a data-parallel trace only)")


# ----------------------------------------------------------------------------- building

def build(trace: Trace, name: str, steps: str = "marked", with_gaps: bool = False) -> Program:
    """The program for `steps`: 'marked' (the job's steps; everything when it marked none), 'all'
    (the ops outside any step too, as step -1), or a list of step numbers ('0,3')."""
    check(trace, name)
    keyed = {r: _keys(trace.rank_ops(r)) for r in range(trace.world_size)}
    per_step: dict[int, dict[int, list[tuple[Key, Op]]]] = defaultdict(lambda: defaultdict(list))
    for r, ops in keyed.items():
        for key, o in ops:
            per_step[UNMARKED if o.step is None else o.step][r].append((key, o))
    wanted = _wanted_steps(sorted(per_step), steps, name)
    shapes = _shapes({s: per_step[s] for s in wanted}, with_gaps)
    for s in shapes:
        n = sum(len(v) for v in s.ops.values())
        if n > MAX_OPS_PER_STEP:
            raise BadInput(f"{name}: step {s.step} issues {n:,} ops over its ranks; the most replay holds at once is "
                           f"{MAX_OPS_PER_STEP:,}: replay fewer steps (--steps) or mark the job's steps")
    groups = tuple(sorted((g for g in trace.groups.values() if g.id != WORLD), key=_group_order))
    return Program(trace.world_size, groups, tuple(shapes), with_gaps)


def _group_order(g: Group) -> tuple[int, int, str]:
    return (0, int(g.id), "") if g.id.isdigit() else (1, 0, g.id)


def _keys(ops: list[Op]) -> list[tuple[Key, Op]]:
    counts: Counter[tuple[object, ...]] = Counter()
    out = []
    for o in ops:
        if o.op in POINT_TO_POINT and o.peer is not None:
            pair = (o.rank, o.peer) if o.op == "send" else (o.peer, o.rank)
            base: tuple[object, ...] = ("p", *pair)
        else:
            base = ("c", o.group)
        out.append(((*base, counts[base]), o))
        counts[base] += 1
    return out


def _wanted_steps(have: list[int], steps: str, name: str) -> list[int]:
    marked = [s for s in have if s != UNMARKED]
    if steps == "marked":
        return marked or have
    if steps == "all":
        return have
    try:
        asked = sorted({int(s) for s in steps.split(",")})
    except ValueError:
        raise BadInput(f"--steps {steps!r} is not 'marked', 'all' or step numbers: pass e.g. --steps 0,3") from None
    missing = [s for s in asked if s not in have]
    if missing:
        shown = format_steps(tuple(marked)) or "none"
        raise BadInput(f"{name} has no step {', '.join(map(str, missing))} (its steps: {shown}): pass steps it holds")
    return asked


def _signature(ranks: dict[int, list[tuple[Key, Op]]]) -> tuple[object, ...]:
    return tuple((r, tuple(ReplayOp(k, o).signature() for k, o in ops)) for r, ops in sorted(ranks.items()))


def _shapes(per_step: dict[int, dict[int, list[tuple[Key, Op]]]], with_gaps: bool) -> list[Shape]:
    alike: dict[tuple[object, ...], list[int]] = {}
    for s in sorted(per_step):
        alike.setdefault(_signature(per_step[s]), []).append(s)
    return [_shape(tuple(steps), [per_step[s] for s in steps], with_gaps) for steps in alike.values()]


def _shape(steps: tuple[int, ...], members: list[dict[int, list[tuple[Key, Op]]]], with_gaps: bool) -> Shape:
    """The first step's ops and keys; times over every step of the shape (ops at the same place)."""
    first = members[0]
    gaps = {(r, j): _median([_gap(m[r], j) for m in members]) for r in first for j in range(len(first[r]))}
    ops = {r: tuple(ReplayOp(k, o, gaps[(r, j)] or 0.0) for j, (k, o) in enumerate(first[r])) for r in sorted(first)}
    index: dict[Key, int] = {}
    places: dict[Key, list[tuple[int, int]]] = {}  # where each op stands in every step of the shape
    for r in sorted(first):
        for j, (k, o) in enumerate(first[r]):
            index.setdefault(k, o.index)
            places.setdefault(k, []).append((r, j))
    op_times: dict[Key, float] = {}
    for k in index:
        per_step = [_min([_duration(m[r][j][1]) for r, j in places[k]]) for m in members]
        value = _median(per_step)
        if value is not None:
            op_times[k] = value
    step_times = [_step_us(m, with_gaps) for m in members]
    return Shape(steps, ops, _median(step_times), op_times, index)


def _duration(o: Op) -> float | None:
    return (o.end_ns - o.start_ns) / 1e3 if o.start_ns is not None and o.end_ns is not None else None


def _gap(ops: list[tuple[Key, Op]], j: int) -> float | None:
    if j == 0:
        return 0.0
    before, now = ops[j - 1][1], ops[j][1]
    if before.end_ns is None or now.start_ns is None:
        return None
    return max(0.0, (now.start_ns - before.end_ns) / 1e9)


def _step_us(ranks: dict[int, list[tuple[Key, Op]]], with_gaps: bool) -> float | None:
    """One step's recorded communication time: the sum over its ops of each op's (min over its
    ranks); with gaps, the step's span from its first start to its last end on its slowest rank."""
    ops = [(k, o) for r in ranks.values() for k, o in r]
    if not ops or any(_duration(o) is None for _, o in ops):
        return None
    if with_gaps:
        return max((max(o.end_ns or 0 for _, o in r) - min(o.start_ns or 0 for _, o in r)) / 1e3
                   for r in ranks.values() if r)
    per_key: dict[Key, float] = {}
    for k, o in ops:
        per_key[k] = min(per_key.get(k, float("inf")), _duration(o) or 0.0)
    return sum(per_key.values())


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _min(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


# ----------------------------------------------------------------------------- --world-size

def scaled(program: Program, world: int, name: str) -> Program:
    """The same job at `world` ranks, where the trace allows it: data parallel only (every group
    spans the world, every rank issues the same ops, no point-to-point op or all-to-all split).
    Every new rank issues rank 0's ops; each op keeps its S (a gradient bucket keeps its size)."""
    if world == program.world_size:
        return program
    why = _why_not_scalable(program, world)
    if why:
        raise BadInput(f"--world-size {world}: {name} {why}; a trace scales only when it is data parallel: "
                       f"replay it at its {program.world_size} ranks")
    groups = tuple(replace(g, ranks=tuple(range(world))) for g in program.groups)
    shapes = []
    for s in program.shapes:
        ops = {r: tuple(replace(o, op=replace(o.op, rank=r)) for o in s.ops[0]) for r in range(world)}
        shapes.append(replace(s, ops=ops))
    return Program(world, groups, tuple(shapes), program.with_gaps, program.world_size)


def _why_not_scalable(program: Program, world: int) -> str:
    whole = tuple(range(program.world_size))
    if any(tuple(sorted(g.ranks)) != whole for g in program.groups):
        return "has groups smaller than its world (tensor, pipeline or expert parallel)"
    for s in program.shapes:
        if any(o.op.op in POINT_TO_POINT or o.op.in_splits or o.op.out_splits for ops in s.ops.values() for o in ops):
            return "holds point-to-point ops or all-to-all splits, which name ranks"
        mine = [tuple(o.signature() for o in s.ops.get(r, ())) for r in range(program.world_size)]
        if len(set(mine)) > 1:
            return "has ranks that issue different ops"
        if any(o.op.peer is not None and o.op.peer >= world for o in s.ops[0]):
            return f"roots an op at a rank the {world} ranks do not have"
    return ""


# ----------------------------------------------------------------------------- --layout

def laid_out(program: Program, groups: tuple[tuple[int, ...], ...], shards: int) -> Program:
    """The job replayed in every group of `groups` at once (--layout's data-parallel groups): the
    trace's rank r is the r-th rank of each group, its groups and peers mapped the same way, each
    op carrying 1/`shards` of its bytes (tp x pp: a data-parallel group holds that share of the
    parameters, as `zero --layout` models it). A group's ops run on its own copy of every trace
    group, named `<trace group>@<group index>`."""
    n = program.world_size
    made = (Group(WORLD, tuple(range(n)), "default_pg"), *program.groups)
    new_groups = tuple(Group(f"{g.id}@{i}", tuple(members[r] for r in g.ranks), g.desc)
                       for i, members in enumerate(groups) for g in made)
    shapes = []
    for s in program.shapes:
        ops: dict[int, tuple[ReplayOp, ...]] = {}
        index: dict[Key, int] = {}
        recorded: dict[Key, float] = {}
        for i, members in enumerate(groups):
            for r, mine in s.ops.items():
                ops[members[r]] = tuple(_moved(o, i, members, shards) for o in mine)
            for k, at in s.op_index.items():
                index[_moved_key(k, i, members)] = at
                if k in s.op_recorded_us:
                    recorded[_moved_key(k, i, members)] = s.op_recorded_us[k]
        shapes.append(Shape(s.steps, ops, s.recorded_us, recorded, index))
    return Program(n * len(groups), new_groups, tuple(shapes), program.with_gaps, program.recorded_world or n)


def split_group(gid: str) -> tuple[str, int | None]:
    """'1@3' -> ('1', 3): the trace group and the layout group an op ran in; ('1', None) without --layout."""
    base, _, at = gid.rpartition("@")
    return (base, int(at)) if base and at.isdigit() else (gid, None)


def _moved_key(key: Key, i: int, members: tuple[int, ...]) -> Key:
    if key[0] == "p":
        return ("p", members[int(str(key[1]))], members[int(str(key[2]))], key[3])
    return ("c", f"{key[1]}@{i}", key[2])


def _moved(o: ReplayOp, i: int, members: tuple[int, ...], shards: int) -> ReplayOp:
    op = o.op

    def part(splits: tuple[int, ...] | None) -> tuple[int, ...] | None:
        return None if splits is None else tuple(x // shards for x in splits)

    moved = replace(op, rank=members[op.rank], group=f"{op.group}@{i}",
                    peer=None if op.peer is None else members[op.peer], bytes_in=op.bytes_in // shards,
                    bytes_out=op.bytes_out // shards, in_splits=part(op.in_splits), out_splits=part(op.out_splits))
    return replace(o, key=_moved_key(o.key, i, members), op=moved)


def for_run(built: Program, world: int, name: str, world_size: int | None = None, layout: str | None = None,
            order: str | None = None) -> Program:
    """What a run of `world` ranks replays: the trace as recorded, at --world-size, or in every
    data-parallel group of --layout (each group at the trace's size or, data parallel, scaled to it)."""
    if layout is None:
        program = scaled(built, world_size, name) if world_size else built
        check_world(program, world, name)
        return program
    if world_size and world_size != world:
        raise BadInput(f"--world-size {world_size} and this run's {world} ranks differ: with --layout, --world-size "
                       "is every rank of the run: launch that many, or drop --world-size")
    cut = data_parallel(world, "replay", layout, order)
    assert cut is not None  # a layout was given
    work, shards = cut
    return laid_out(scaled(built, len(work.groups[0]), name), work.groups, shards)
