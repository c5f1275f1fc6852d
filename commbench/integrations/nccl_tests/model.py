"""What nccl-tests output says, as both of its readers (text and -J JSON) see it: the ranks, one
placement of one printed row, the columns of a text table, and the state of one output stream."""

from __future__ import annotations

import collections
from dataclasses import dataclass


@dataclass
class RankInfo:
    rank: int
    host: str
    pid: int | None = None
    device: int | None = None
    device_name: str = ""
    group: int | None = None  # the Rank line's Group: its color under NCCL_TESTS_SPLIT (0 unsplit)


@dataclass
class Half:
    """One placement of one printed row."""

    size: int
    count: int
    dtype: str
    op: str | None
    root: int | None
    in_place: bool
    time: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None = None
    error: float | None = None
    tmin: float | None = None
    tmax: float | None = None
    tp99: float | None = None
    samples: list[float] | None = None
    iters: int | None = None
    line: int = 0
    alg_unit: float | None = None  # half a unit of the last digit algbw was printed with (None: a -J value)
    bus_unit: float | None = None
    time_unit: float | None = None  # half a unit of the time's last printed digit (None: a -J value)
    cputime: bool = False  # -C: the time is CPU time, the bandwidths still of the wall time


@dataclass(frozen=True)
class Layout:
    redop: bool
    root: bool
    check: str | None  # "wrong", "error"; None: infer from the value
    per_iter: bool
    groups: int
    time_name: str = "time"
    line: int | None = None  # where the column header was; None: inferred from a row

    @property
    def prefix(self) -> int:
        return 3 + self.redop + self.root

    @property
    def group(self) -> int:
        return 8 if self.per_iter else 4


class Stream:
    """The state of one output stream (one mpirun tag, or the whole untagged output)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Every field back to a fresh stream's (a new section starts)."""
        self.tests_version: str | None = None
        self.nccl_version: str | None = None
        self.program: str | None = None
        self.nthread: int | None = None
        self.ngpus: int | None = None
        self.warmup: int | None = None
        self.iters: int | None = None
        self.agg_iters: int | None = None
        self.validation: int | None = None
        self.graph: int | None = None  # -G: CUDA graph launches (0: the plain loop)
        self.ranks: dict[int, RankInfo] = {}
        self.layout: Layout | None = None
        self.rows = 0
        self.headers = 0  # nThread lines in this section: more than one = several processes printed it
        self.header_line: int | None = None  # the first of them
        self.dup_rank = False
        self.seen: set[str] = set()

    def new_section(self) -> None:
        keep = self.nccl_version
        self.reset()
        self.nccl_version = keep

    @property
    def several_processes(self) -> bool:
        return self.headers > 1 or self.dup_rank

    def split_group(self) -> int | None:
        """The Group of the printing rank (the lowest) when the Rank lines show more than one
        (NCCL_TESTS_SPLIT): nccl-tests prints that rank's results, busbw taken with its group's
        size (src/common.cu: nProcs is the split communicator's size); None when unsplit."""
        groups = {i.group for i in self.ranks.values()}
        if len(groups) < 2 or None in groups:
            return None
        return self.ranks[min(self.ranks)].group

    def _members(self) -> list[RankInfo]:
        """The ranks the rows measured: the printing rank's group when split, else every rank."""
        group = self.split_group()
        return [self.ranks[r] for r in sorted(self.ranks) if group is None or self.ranks[r].group == group]

    def cut_ranks(self) -> tuple[int, int] | None:
        """(lowest, highest) rank number of Rank lines that are not the whole list 0..n-1 (a log's
        tail, its first Rank lines cut, as users paste it); None when they are, or there are none."""
        if not self.ranks or self.several_processes:
            return None
        lo, hi = min(self.ranks), max(self.ranks)
        return (lo, hi) if lo != 0 or hi + 1 != len(self.ranks) else None

    def world(self) -> int | None:
        """The rank count the header says; None when it does not (no Rank lines, or cut ones:
        records.py then takes it from the rows' busbw/algbw, worldsize.py)."""
        if self.several_processes and self.nthread and self.ngpus:
            return self.nthread * self.ngpus
        if self.ranks and self.cut_ranks() is None:
            return len(self._members())
        return None

    def topology(self) -> tuple[list[str], int | None, int | None, str | None]:
        infos = self._members()
        hosts = list(dict.fromkeys(i.host for i in infos))
        names = list(dict.fromkeys(i.device_name for i in infos if i.device_name))
        device_name = ", ".join(names) if names else None
        if not infos:
            return [], None, None, device_name
        if self.cut_ranks() is not None:  # the hosts of the ranks shown; how many in all is not known
            return hosts, None, None, device_name
        if self.several_processes:
            world = self.world() or 1
            return hosts, 1, world, device_name
        per_host = collections.Counter(i.host for i in infos)
        return hosts, len(hosts), max(per_host.values()), device_name

