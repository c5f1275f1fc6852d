"""The algorithm and protocol NCCL chose for each operation, from its own debug output
(NCCL_DEBUG=INFO with TUNING in NCCL_DEBUG_SUBSYS), matched to commbench's points.

NCCL has printed the choice in three shapes (src/enqueue.cc; the tests' fixtures in
tests/data/nccl_debug/ are recorded lines of each):

    2.24 on        host:pid:tid [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15}
    2.23           host:pid:tid [0] NCCL INFO AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008
    2.20 to 2.22   host:pid:tid [0] NCCL INFO 262144 Bytes -> Algo 0 proto 1 time 54.707825

always on rank 0 only, once per operation it enqueues. The numbers are NCCL's enum values
(nccl_common.h / nccl_tuner.h: algorithm 0 Tree, 1 Ring, 2 CollNetDirect, 3 CollNetChain, 4 NVLS,
5 NVLSTree, 6 PAT; protocol 0 LL, 1 LL128, 2 Simple). The columns hold the names NCCL_ALGO and
NCCL_PROTO take (`Ring`, `Simple`), so a recorded choice reads like a `--env NCCL_ALGO=Ring` setting.

The byte counts differ between the shapes. The named shape prints count x item size of the call:
for AllGather and ReduceScatter that is one rank's part (sendcount, recvcount), S / n in
commbench's terms (S, `size_bytes`, is the whole gathered output or scattered input); the numeric
shapes print the larger buffer, nRanks x count x item size (ncclFuncMaxSendRecvCount), which is S.
For AllReduce, Broadcast and Reduce every shape prints S. The unnamed shape (2.20 to 2.22) says
no collective: it takes the one of the process's last COLL line ("AllReduce: opCount ..."), when
NCCL_DEBUG_SUBSYS has COLL, and otherwise fills the rows of a run that measured one collective.

A point whose operations got more than one choice (NCCL's choice can change with what else is in
flight, and commbench's own timing all_reduce shares the communicator) gets the most frequent.
Lines of any other shape, damaged or cut, are skipped: this is a diagnosis and never fails a run.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

from commbench.core.vocab import BY_NAME, COLLECTIVES

# ncclAlgoStr / ncclProtoStr (src/init.cc), indexed by NCCL_ALGO_* / NCCL_PROTO_*.
ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOS = ("LL", "LL128", "Simple")
# ncclAlgoToString / ncclProtoToString (src/collectives.cc, 2.24+), upper case -> the names above.
_ALGO_WORDS = {"TREE": "Tree", "RING": "Ring", "COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN": "CollNetChain",
               "NVLS": "NVLS", "NVLS_TREE": "NVLSTree", "PAT": "PAT"}
_PROTO_WORDS = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}

# ncclFuncToString -> commbench's collective (point-to-point operations print no choice).
NCCL_FUNCS = {c.nccl_func: c.name for c in COLLECTIVES if c.nccl_func}
# Collectives whose named-shape byte count is one rank's part: S = bytes x world size.
_PER_RANK = {c.name for c in COLLECTIVES if c.per_rank_count}

_CHOICE = re.compile(r"NCCL INFO (?:([A-Za-z]{1,32}): )?([0-9]{1,20}) Bytes -> Algo ([A-Za-z_]{1,32}|[0-9]{1,3}) "
                     r"proto ([A-Za-z0-9_]{1,16}|[0-9]{1,3})(?: |$)", re.ASCII)
_COLL = re.compile(r"NCCL INFO ([A-Za-z]{1,32}): opCount [0-9a-fA-F]+ sendbuff ", re.ASCII)
_PROCESS = re.compile(r"(\S+):([0-9]+):[0-9]+ \[[0-9]+\] $", re.ASCII)  # just before "NCCL INFO"
# Rank 0 of a new communicator is ready ("ncclCommInitRank comm 0x.. rank 0 nranks 24 ... - Init COMPLETE").
_COMM_READY = re.compile(r"NCCL INFO \w+ comm 0x[0-9a-fA-F]+ rank 0 nranks [0-9]+ .*Init COMPLETE", re.ASCII)


class TuningCollector:
    """Feed it lines (any mix of NCCL output and other text); `choices` counts what NCCL chose:
    (communicator, collective or None, bytes as printed, per_rank) -> Counter of (algo, proto).
    The communicator is counted up at each rank-0 "Init COMPLETE": a settings axis (--env) runs
    each setting on a fresh communicator, and its rows get the choices of theirs."""

    def __init__(self) -> None:
        self.choices: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
        self.last_coll: dict[str, str] = {}  # "host:pid" -> the collective of its last COLL line
        self.comm = 0

    def feed(self, line: str) -> None:
        if "NCCL INFO" not in line:
            return
        if _COMM_READY.search(line):
            self.comm += 1
            return
        if m := _COLL.search(line):
            if m.group(1) in NCCL_FUNCS:
                self.last_coll[_process(line)] = NCCL_FUNCS[m.group(1)]
            return
        m = _CHOICE.search(line)
        if m is None:
            return
        func, nbytes, algo, proto = m.groups()
        named = not algo.isdigit()
        if named != (not proto.isdigit()) or (named and func is None):
            return  # a mix of the shapes NCCL never printed
        algo_name = _ALGO_WORDS.get(algo) if named else _index(ALGOS, algo)
        proto_name = _PROTO_WORDS.get(proto) if named else _index(PROTOS, proto)
        if algo_name is None or proto_name is None:
            return
        if func is not None:
            coll = NCCL_FUNCS.get(func)
            if coll is None:
                return
        else:
            coll = self.last_coll.get(_process(line))
        per_rank = named and coll in _PER_RANK
        self.choices[(self.comm, coll, int(nbytes), per_rank)][(algo_name, proto_name)] += 1

    def comms(self) -> list[int]:
        """The communicators NCCL printed a choice for, in the order they were made."""
        return sorted({key[0] for key in self.choices})

    def choice(self, collective: str, size_bytes: int, world_size: int | None,
               only_collective: bool = False, comms: Iterable[int] | None = None) -> tuple[str, str] | None:
        """The (algo, proto) NCCL chose most often for this point (on `comms`, default all), or None."""
        counts: collections.Counter = collections.Counter()
        for c in self.comms() if comms is None else comms:
            counts.update(self.choices.get((c, collective, size_bytes, False), {}))
            if collective in _PER_RANK and world_size and size_bytes % world_size == 0:
                counts.update(self.choices.get((c, collective, size_bytes // world_size, True), {}))
            if only_collective:  # 2.20 to 2.22 without COLL lines: the run's one collective
                counts.update(self.choices.get((c, None, size_bytes, False), {}))
        if not counts:
            return None
        # Most frequent; a tie goes to the first NCCL printed (Counter keeps insertion order).
        return max(counts.items(), key=lambda kv: kv[1])[0]

    def fill(self, rows: Iterable[dict]) -> int:
        """Put the choice into rows of commbench's collectives (nccl_algo, nccl_proto), where NCCL
        said one and the row has none; the number of rows filled. Rows of several settings (the
        `settings` column) take the last communicators, one per pass of a setting in the order
        measured: every repetition applies each setting on a fresh communicator again
        (harness/settingpasses.py), so a pass is a (repetition, setting). The first communicators carry
        the run's own set-up; when there are fewer than passes, none is filled."""
        rows = list(rows)
        groups: dict[object, list[dict]] = {}
        several = len({r.get("settings") for r in rows}) > 1
        for r in rows:
            groups.setdefault((r.get("repetition"), r.get("settings")) if several else None, []).append(r)
        comms = self.comms()
        if len(groups) == 1:
            plan = [(comms, rows)]
        elif len(comms) >= len(groups):
            plan = [([c], g) for c, g in zip(comms[len(comms) - len(groups):], groups.values())]
        else:
            return 0
        collectives = {r.get("collective") for r in rows}
        filled = 0
        for group_comms, group in plan:
            for r in group:
                coll, size = r.get("collective"), r.get("size_bytes")
                if coll not in BY_NAME or not isinstance(size, int) or r.get("nccl_algo"):
                    continue
                found = self.choice(coll, size, r.get("world_size"), len(collectives) == 1, group_comms)
                if found:
                    r["nccl_algo"], r["nccl_proto"] = found
                    filled += 1
        return filled


def _index(names: tuple[str, ...], digits: str) -> str | None:
    i = int(digits)
    return names[i] if i < len(names) else None


def _process(line: str) -> str:
    """"host:pid" of the line's NCCL prefix; only the text just before "NCCL INFO" is searched, so
    a long line without spaces cannot make the search quadratic."""
    end = line.find("NCCL INFO")
    m = _PROCESS.search(line, max(0, end - 300), end) if end > 0 else None
    return f"{m.group(1)}:{m.group(2)}" if m else ""


def collect(lines: Iterable[str]) -> TuningCollector:
    collector = TuningCollector()
    for line in lines:
        collector.feed(line)
    return collector


# ---- NCCL_DEBUG_SUBSYS -----------------------------------------------------------------------

# What `sweep --nccl-debug` needs: INIT and NET name the transport (net/ncclinfo.py), TUNING the choice.
NEEDED_SUBSYS = ("INIT", "NET", "TUNING")
# Unset, NCCL logs INIT,BOOTSTRAP,ENV (2.22+; INIT,ENV before): kept, so nothing it printed goes.
DEFAULT_SUBSYS = "INIT,BOOTSTRAP,ENV,NET,TUNING"


def merged_subsys(current: str | None) -> str:
    """NCCL_DEBUG_SUBSYS with what --nccl-debug needs added to the user's own list, never dropped.

    NCCL reads a comma list; a leading '^' inverts it ("everything but"), so there the needed
    subsystems are taken out of the exclusions instead; ALL already has them.
    """
    text = (current or "").strip()
    if not text:
        return DEFAULT_SUBSYS
    inverted = text.startswith("^")
    parts = [p.strip() for p in (text[1:] if inverted else text).split(",") if p.strip()]
    upper = {p.upper() for p in parts}
    if inverted:
        kept = [p for p in parts if p.upper() not in NEEDED_SUBSYS]
        return "^" + ",".join(kept) if kept else "ALL"
    if "ALL" in upper:
        return ",".join(parts)
    return ",".join(parts + [s for s in NEEDED_SUBSYS if s not in upper])
