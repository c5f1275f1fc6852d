"""Parallelism layouts: `--layout tp=2,pp=2,dp=auto` checked against the world size, the rank
order Megatron-LM gives it, every group of each dimension, `--group` (which dimension runs which
collective) and nccl-tests' `--split` expressions (NCCL_TESTS_SPLIT), without torch.

Ranks are numbered as Megatron-LM numbers them by default: the first dimension of the order runs
fastest, global rank = sum over dimensions of (its coordinate x the product of the sizes before
it). Read in NVIDIA/Megatron-LM, megatron/core/parallel_state.py (commit d98e8a6):
initialize_model_parallel's `order: str = "tp-cp-ep-dp-pp"` (line 617);
generate_masked_orthogonal_rank_groups (lines 269-376: a group of the masked dimensions is one
index of the others, decomposed over their sizes in order, plus each coordinate of the masked
ones times its stride); RankGenerator (lines 465-540: a dimension missing from the order must be
of size 1 and is appended); its docstring's example (lines 755-765: 16 ranks, tp 2, pp 4 give
tensor groups [0, 1], [2, 3], ..., data groups [0, 2], [1, 3], [4, 6], ... and pipeline groups
[0, 4, 8, 12], [1, 5, 9, 13], ...). Megatron builds two grids (one with cp and ep = 1, one for
the expert layers with cp = 1); here the five dimensions are one grid whose product is the world
size, which is either of Megatron's when cp or ep is 1.

`--split` is nccl-tests' NCCL_TESTS_SPLIT, parsed as its run() does (vendored nccl-tests 2.19.6,
src/common.cu lines 1461-1476 parseInt, 1496-1520 the colors): `AND`, `OR`, `MOD`, `DIV` or `&`,
`|`, `%`, `/` in any case, then a number after any blanks, `0b` binary, `0x` hex, a leading 0
octal, else decimal, as strtoul reads it (anything after the number is ignored, as there); a
process's color is its rank combined with the number, and ranks of one color run together.
NCCL_TESTS_SPLIT_MASK (a hex mask, `AND` of it) is parse_split_mask. nccl-tests colors by MPI
process; commbench runs one rank a process, so the process is the rank. What nccl-tests would not
split by (no operation it knows, no number: it runs unsplit), would crash on (`MOD 0`, `DIV 0`)
or MPI refuses (a negative color) is bad input here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from commbench.core.errors import BadInput
from commbench.core.vocab import COLLECTIVES, collective_spellings, did_you_mean

# The dimensions, in Megatron-LM's default order (fastest first): tensor, context, expert, data,
# pipeline parallel.
DIMENSIONS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
AUTO = "auto"
# The collective each dimension runs unless --group names another (core/vocab.py's parallel_dims).
DEFAULT_COLLECTIVE: dict[str, str] = {d: c.name for c in COLLECTIVES for d in c.parallel_dims}
# A group of one rank moves nothing (nccl-tests' getBw gives a bus factor of 0 for one rank, and
# send/recv has no neighbour): every collective needs two ranks a group.
MIN_GROUP = 2
_EXAMPLE = "--layout tp=2,pp=2,dp=auto"


@dataclass(frozen=True)
class Layout:
    """A world of ranks cut along the five dimensions. `order` holds every dimension, fastest
    first; `sizes` their sizes in that order (1 for one not asked for); `named` the dimensions the
    user wrote."""

    world: int
    order: tuple[str, ...]
    sizes: tuple[int, ...]
    named: tuple[str, ...]

    def size(self, dim: str) -> int:
        return self.sizes[self.order.index(dim)]

    def strides(self) -> tuple[int, ...]:
        """How far apart two ranks one step apart in each dimension are (Megatron's prefix product)."""
        out: list[int] = []
        step = 1
        for s in self.sizes:
            out.append(step)
            step *= s
        return tuple(out)

    def coords(self, rank: int) -> dict[str, int]:
        """A rank's coordinate in each dimension."""
        return {d: (rank // st) % s for d, s, st in zip(self.order, self.sizes, self.strides())}

    def rank(self, coords: dict[str, int]) -> int:
        return sum(coords.get(d, 0) * st for d, st in zip(self.order, self.strides()))

    def groups(self, dim: str) -> tuple[tuple[int, ...], ...]:
        """Every group of `dim`, in Megatron's order (generate_masked_orthogonal_rank_groups with
        only `dim` masked): group g's other coordinates are g decomposed over the other
        dimensions' sizes in order; its ranks go up `dim` one step at a time."""
        i = self.order.index(dim)
        strides = self.strides()
        others = [(s, st) for j, (s, st) in enumerate(zip(self.sizes, strides)) if j != i]
        out: list[tuple[int, ...]] = []
        for g in range(self.world // self.sizes[i]):
            base, rest = 0, g
            for s, st in others:
                base += (rest % s) * st
                rest //= s
            out.append(tuple(base + k * strides[i] for k in range(self.sizes[i])))
        return tuple(out)

    def group_of(self, dim: str, rank: int) -> int:
        """The index of the group of `dim` that holds `rank`."""
        return next(g for g, ranks in enumerate(self.groups(dim)) if rank in ranks)

    def text(self) -> str:
        """The layout as --layout writes it, every dimension of more than one rank, in order."""
        return ",".join(f"{d}={s}" for d, s in zip(self.order, self.sizes) if s > 1 or d in self.named) or "dp=1"


@dataclass(frozen=True)
class GroupWork:
    """One dimension's part of a run: the collective every one of its groups runs, at once."""

    dim: str
    collective: str
    groups: tuple[tuple[int, ...], ...]
    # What a row calls each group (its group_index): () its place in `groups`; a split's colors, the
    # number nccl-tests gives a group (and prints for rank 0's in a split run's log)
    labels: tuple[int, ...] = ()

    def label(self, index: int) -> int:
        return self.labels[index] if self.labels else index


def _dim(text: str, flag: str, fix: str) -> str:
    name = text.strip().lower()
    if name not in DIMENSIONS:  # two letters each: a near miss is any of them, so all are named
        raise BadInput(f"unknown dimension {text.strip()!r} in {flag}: use {', '.join(DIMENSIONS)} ({fix})")
    return name


def _size(dim: str, value: str) -> int | None:
    v = value.strip().lower()
    if v == AUTO:
        return None
    if not v.isascii() or not v.isdigit() or int(v) < 1:
        raise BadInput(f"--layout {dim}={value.strip()} is not a size: give a whole number of ranks of 1 or more, or "
                       f"auto ({_EXAMPLE})")
    return int(v)


def _entries(text: str) -> dict[str, int | None]:
    """--layout's `dim=size` entries, each dimension once, at most one auto."""
    entries: dict[str, int | None] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, eq, value = item.partition("=")
        if not eq:
            raise BadInput(f"--layout entry {item.strip()!r} has no size: write dim=size, e.g. {_EXAMPLE}")
        dim = _dim(name, "--layout", f"e.g. {_EXAMPLE}")
        if dim in entries:
            raise BadInput(f"--layout gives {dim} twice: give each dimension once ({_EXAMPLE})")
        entries[dim] = _size(dim, value)
    if not entries:
        raise BadInput(f"--layout is empty: give the dimensions' sizes, e.g. {_EXAMPLE}")
    autos = [d for d, s in entries.items() if s is None]
    if len(autos) > 1:
        raise BadInput(f"--layout has auto for both {autos[0]} and {autos[1]}: at most one dimension can be auto "
                       f"(give the others' sizes, e.g. {_EXAMPLE})")
    return entries


def parse_order(text: str | None, sizes: dict[str, int] | None = None) -> tuple[str, ...]:
    """`--order tp-cp-ep-dp-pp` (Megatron's spelling, fastest first) -> every dimension in order.
    As Megatron's RankGenerator, a dimension left out is appended, and must be of size 1."""
    if text is None or not text.strip():
        return DIMENSIONS
    order: list[str] = []
    for item in text.split("-"):
        dim = _dim(item, "--order", "e.g. --order tp-cp-ep-dp-pp, fastest first")
        if dim in order:
            raise BadInput(f"--order names {dim} twice: name each dimension once, e.g. --order tp-cp-ep-dp-pp")
        order.append(dim)
    for dim in DIMENSIONS:
        if dim not in order:
            if sizes and sizes.get(dim, 1) > 1:
                raise BadInput(f"--order {text.strip()} leaves out {dim}, which --layout gives {sizes[dim]} ranks: "
                               f"name it in --order too")
            order.append(dim)
    return tuple(order)


def parse_layout(text: str, world: int, order: str | None = None) -> Layout:
    """`--layout tp=2,pp=2,dp=auto` for `world` ranks: the sizes of the five dimensions, whose
    product must be the world size (the one auto dimension takes what the others leave)."""
    if world < 1:
        raise BadInput(f"a layout needs at least one rank, not {world}")
    entries = _entries(text)
    known = 1
    for s in entries.values():
        known *= s or 1
    shown = " x ".join(f"{d}={s}" for d, s in entries.items() if s is not None) or "1"
    auto = next((d for d, s in entries.items() if s is None), None)
    if auto is not None:
        if world % known:
            raise BadInput(f"--layout {text.strip()}: {shown} = {known} does not divide the world size {world}, so "
                           f"{auto}=auto has no size: make the product of the sizes a divisor of {world}")
        entries[auto] = world // known
    elif known != world:
        raise BadInput(f"--layout {text.strip()}: {shown} = {known} ranks, but the world size is {world}: make the "
                       f"product {world}, or give one dimension as auto")
    sizes = {d: s or 1 for d, s in entries.items()}
    dims = parse_order(order, sizes)
    return Layout(world, dims, tuple(sizes.get(d, 1) for d in dims), tuple(d for d in dims if d in entries))


def _collective(text: str, dim: str) -> str:
    spellings = collective_spellings()
    key = text.strip().lower().replace("-", "_")
    match = next((name for spelling, name in spellings if spelling == key), None)
    if match is None:
        hint = did_you_mean(text, spellings)
        raise BadInput(f"--group {dim}:{text.strip()}: unknown collective{hint}: use one of "
                       f"{', '.join(c.name for c in COLLECTIVES)}")
    return match


def parse_groups(text: str, layout: Layout) -> tuple[GroupWork, ...]:
    """`--group dp` or `--group dp:all_reduce,tp:all_gather`: the dimensions whose groups run,
    each with its collective (DEFAULT_COLLECTIVE unless named), every group of each at once."""
    work: list[GroupWork] = []
    present = [d for d in layout.order if layout.size(d) > 1 or d in layout.named]
    for item in text.split(","):
        if not item.strip():
            continue
        name, colon, coll = item.partition(":")
        dim = _dim(name, "--group", "e.g. --group dp or --group dp:all_reduce,tp:all_gather")
        if dim not in present:
            raise BadInput(f"--group names {dim}, which --layout {layout.text()} does not have: name one of "
                           f"{', '.join(present)}, or add {dim}=N to --layout")
        if any(w.dim == dim for w in work):
            raise BadInput(f"--group names {dim} twice: give each dimension once, e.g. --group dp:all_reduce,tp")
        collective = _collective(coll, dim) if colon else DEFAULT_COLLECTIVE[dim]
        if layout.size(dim) < MIN_GROUP:
            raise BadInput(f"--group {dim}: each {dim} group of --layout {layout.text()} has {layout.size(dim)} rank, "
                           f"too few for {collective} (it needs {MIN_GROUP} or more): give {dim} more ranks in "
                           f"--layout, or name another dimension")
        work.append(GroupWork(dim, collective, layout.groups(dim)))
    if not work:
        raise BadInput("--group is empty: name a dimension of the layout, e.g. --group dp")
    return tuple(work)


def stage_pairs(group: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """A pipeline group's neighbouring stages, (sender, receiver) in stage order: what pp's
    send/recv runs between."""
    ranks = tuple(group)
    return tuple(zip(ranks, ranks[1:]))


# ---- nccl-tests' split expressions -------------------------------------------------------------

_C_SPACE = " \t\n\v\f\r"  # C's isspace in the "C" locale
_ULONG = 2**64  # unsigned long on the LP64 Linux nccl-tests runs on
_OPS = (("AND", "&"), ("OR", "|"), ("MOD", "%"), ("DIV", "/"))
_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdef"}


def _strtoul(text: str, base: int) -> tuple[int, int]:
    """glibc strtoul(text, &end, base) for base 0, 2 or 16: (value, characters read); 0 read when
    there is no number (end == text)."""
    i = 0
    while i < len(text) and text[i] in _C_SPACE:
        i += 1
    negative = i < len(text) and text[i] == "-"
    if i < len(text) and text[i] in "+-":
        i += 1
    if base in (0, 16) and text[i:i + 2].lower() == "0x" and text[i + 2:i + 3].lower() in tuple(_DIGITS[16]):
        base, i = 16, i + 2
    elif base == 0:
        base = 8 if text[i:i + 1] == "0" else 10
    start = i
    while i < len(text) and text[i].lower() in _DIGITS[base]:
        i += 1
    if i == start:
        return 0, 0
    value = int(text[start:i], base)
    value = _ULONG - 1 if value >= _ULONG else value  # ERANGE: ULONG_MAX
    return (_ULONG - value) % _ULONG if negative else value, i



def _as_int(value: int) -> int:
    """C's (int) of an unsigned long: the low 32 bits, two's complement."""
    low = value % 2**32
    return low - 2**32 if low >= 2**31 else low


def _parse_int(text: str) -> int | None:
    """nccl-tests' parseInt (src/common.cu): blanks skipped, `0b` binary, else strtoul base 0."""
    s = text.lstrip(_C_SPACE)
    if not s:
        return None
    if s[:2].lower() == "0b":
        value, _ = _strtoul(s[2:], 2)  # its p == s test never fails after 0b: "0b" alone is 0
        return _as_int(value)
    value, read = _strtoul(s, 0)
    return _as_int(value) if read else None


@dataclass(frozen=True)
class Split:
    """An nccl-tests split: a rank's color is `rank <op> value`, as C computes it."""

    op: str  # AND, OR, MOD, DIV
    value: int
    text: str

    def color(self, rank: int) -> int:
        if self.op == "AND":
            return rank & self.value
        if self.op == "OR":
            return rank | self.value
        q = abs(rank) // abs(self.value) * (1 if (rank >= 0) == (self.value > 0) else -1)  # C truncates
        return q if self.op == "DIV" else rank - q * self.value

    def colors(self, world: int) -> tuple[int, ...]:
        """Every rank's color, checked as MPI_Comm_split would take it (none negative)."""
        colors = tuple(self.color(r) for r in range(world))
        bad = next((r for r, c in enumerate(colors) if c < 0), None)
        if bad is not None:
            raise BadInput(f"--split {self.text!r} gives rank {bad} the color {colors[bad]}, and MPI_Comm_split takes "
                           "no negative color: use a number of 0 or more, e.g. --split 'MOD 2'")
        return colors

    def groups(self, world: int) -> dict[int, tuple[int, ...]]:
        """color -> its ranks in rank order, colors in ascending order."""
        out: dict[int, list[int]] = {}
        for rank, color in enumerate(self.colors(world)):
            out.setdefault(color, []).append(rank)
        return {c: tuple(out[c]) for c in sorted(out)}


def parse_split(text: str) -> Split:
    """`--split 'MOD 2'` (NCCL_TESTS_SPLIT's syntax) -> the Split nccl-tests would make of it."""
    fix = "write AND, OR, MOD or DIV (or &, |, %, /) and a number, e.g. --split 'MOD 2', 'AND 0x7', 'DIV 8'"
    for word, symbol in _OPS:
        for prefix in (word, symbol):
            head = text[:len(prefix)]
            if not head.isascii() or head.upper() != prefix:  # strncasecmp: ASCII letters only
                continue
            value = _parse_int(text[len(prefix):])
            if value is None:
                raise BadInput(f"--split {text!r} has no number after {prefix} (nccl-tests would not split at all): "
                               f"{fix}")
            if word in ("MOD", "DIV") and value == 0:
                raise BadInput(f"--split {text!r} divides by 0 (nccl-tests would crash): {fix}")
            return Split(word, value, text)
    raise BadInput(f"--split {text!r} starts with no operation nccl-tests knows (it would not split at all): {fix}")


def parse_split_mask(text: str) -> Split:
    """NCCL_TESTS_SPLIT_MASK: `rank & strtoul(text, NULL, 16)` (src/common.cu line 1498)."""
    value, read = _strtoul(text, 16)
    if not read:
        raise BadInput(f"split mask {text!r} is not a hex number (nccl-tests would not split at all): e.g. 0x7")
    return Split("AND", value, text)


# ---- a sweep's groups, from its options ------------------------------------------------------------

SPLIT = "split"  # group_dim of --split's groups: nccl-tests' colors, no parallel dimension


def split_work(text: str, collectives: Iterable[str], world: int) -> tuple[GroupWork, ...]:
    """--split's groups (nccl-tests' colors, ascending, each group labelled by its color), each
    running every collective of the run in turn, all groups at once; every group needs MIN_GROUP
    ranks."""
    colors = parse_split(text).groups(world)
    groups = tuple(colors.values())
    small = next((g for g in groups if len(g) < MIN_GROUP), None)
    if small is not None:
        raise BadInput(f"--split {text!r} on {world} ranks leaves rank {small[0]} in a group of its own, too few "
                       f"for a collective (it needs {MIN_GROUP} or more): use a split whose every color holds "
                       f"{MIN_GROUP} or more ranks, e.g. --split 'MOD 2'")
    return tuple(GroupWork(SPLIT, c, groups, tuple(colors)) for c in collectives)


def group_work(world: int, collectives: Iterable[str], layout: str | None = None, order: str | None = None,
               group: str | None = None, split: str | None = None, solo: bool = False) -> tuple[GroupWork, ...]:
    """What sweep's --layout/--order/--group/--split/--solo ask for on `world` ranks: () for a plain
    sweep; BadInput for options that need another, or contradict each other."""
    if layout is not None and split is not None:
        raise BadInput("--layout and --split both cut the ranks into groups: give one of them")
    if layout is None:
        lone = next((name for name, v in (("--order", order), ("--group", group)) if v is not None), None)
        if lone is not None:
            raise BadInput(f"{lone} needs --layout: add e.g. {_EXAMPLE} --group dp")
        if split is None:
            if solo:
                raise BadInput(f"--solo measures groups alone, and there are none: add e.g. {_EXAMPLE} --group dp, "
                               "or --split 'MOD 2'")
            return ()
        return split_work(split, collectives, world)
    cut = parse_layout(layout, world, order)
    return parse_groups(group if group is not None else _default_group(cut), cut)


def _default_group(layout: Layout) -> str:
    """dp when it has MIN_GROUP ranks or more, else the first such dimension of the order."""
    dims = [d for d in layout.order if layout.size(d) >= MIN_GROUP]
    if not dims:
        raise BadInput(f"--layout {layout.text()} has no dimension of {MIN_GROUP} or more ranks, so no group to "
                       f"run: give one dimension more ranks, e.g. {_EXAMPLE}")
    return "dp" if "dp" in dims else dims[0]


def data_parallel(world: int, command: str, layout: str | None = None, order: str | None = None,
                  group: str | None = None, split: str | None = None) -> tuple[GroupWork, int] | None:
    """`zero`/`buckets --layout tp=2`: the data-parallel groups, each running the command's
    gradient schedule at once, and how many ranks share one copy of the model (tp x pp: a dp group
    holds P / (tp x pp) of the parameters, as DeepSpeed with a model-parallel group reduces). dp
    left out of --layout is what the others leave (`tp=2` on 8 ranks: dp=4). None without --layout."""
    if split is not None:
        raise BadInput(f"{command} runs in the data-parallel groups of --layout, and --split has none: use e.g. "
                       f"--layout tp=2")
    if layout is None:
        lone = next((name for name, v in (("--order", order), ("--group", group)) if v is not None), None)
        if lone is not None:
            raise BadInput(f"{lone} needs --layout: add e.g. --layout tp=2")
        return None
    entries = _entries(layout)
    if "dp" not in entries and None not in entries.values():
        layout += ",dp=auto"
    cut = parse_layout(layout, world, order)
    if group is not None and group.strip().lower() != "dp":
        raise BadInput(f"{command} --group {group.strip()}: its schedule runs in the dp groups only: drop --group "
                       f"or give --group dp")
    shared = [d for d in ("cp", "ep") if cut.size(d) > 1]
    if shared:
        raise BadInput(f"{command} --layout {cut.text()}: {shared[0]} is not modelled ({command} shards the "
                       f"parameters by tp and pp only): leave {shared[0]} out of --layout")
    if cut.size("dp") < MIN_GROUP:
        raise BadInput(f"{command} --layout {cut.text()} leaves dp groups of {cut.size('dp')} rank: a gradient "
                       f"reduction needs {MIN_GROUP} or more, so give tp x pp at most {world // MIN_GROUP}")
    return GroupWork("dp", command, cut.groups("dp")), world // cut.size("dp")


class InDataGroups:
    """zero's and buckets' --layout: the workload runs its gradient schedule in every data-parallel
    group at once (data_parallel above); `shards` is then tp x pp, 1 without --layout."""

    command: ClassVar[str]  # the command's name, for the lines that refuse a layout
    plan: Any  # the workload's plan: layout, order, group, split, solo
    shards: int

    def data_groups(self, world: int) -> GroupWork | None:
        """--layout's data-parallel groups (None without --layout); sets `shards`."""
        p = self.plan
        if p.solo and p.layout is None:
            raise BadInput("--solo measures groups alone, and there are none: add e.g. --layout tp=2")
        cut = data_parallel(world, self.command, p.layout, p.order, p.group, p.split)
        self.shards = cut[1] if cut else 1
        return cut[0] if cut else None

    def group_size(self, world: int) -> int:
        """The ranks one schedule runs over: a dp group's with --layout, else every rank."""
        work = self.data_groups(world)
        return len(work.groups[0]) if work else world
