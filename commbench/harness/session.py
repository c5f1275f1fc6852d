"""A rank's view of a running measurement: `Session.time_call` (the one timing loop), `Session.time_each`
(each rank's own times), `Session.record` (the shared columns), and what they return.

The session's `time_call` is the one timing loop of commbench: warm up, agree on the iteration
count (fixed, or adaptive from the warm-up times), time every iteration, and take each iteration's
maximum over ranks (the slowest rank bounds a collective). `record` builds a result row with the
columns every workload shares. harness/runner.py makes the session (process group, host facts,
results file) and hands it to the workload.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import math
import statistics
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

import commbench
from commbench.harness.console import Reporter
from commbench.harness.control import ControlPlane
from commbench.harness.pairgroup import DistOps, PairGroup
from commbench.net.envinfo import env_snapshot
from commbench.core.errors import RuntimeFailure
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.core.columns import SCHEMA_VERSION
from commbench.core.results import ResultWriter
from commbench.core.settings import Setting
from commbench.core.stats import median_ci_halfwidth
from commbench.core.stragglers import rank_summary
from commbench.harness.wireprobe import WireProbe, gather as gather_wire
from commbench.core import wire as wirecols
from commbench.harness.timing import GraphCaptureFailed, StopRule, Timer, adaptive_iters


@dataclass
class RankTimes:
    """Every rank's own view of one point, index = rank, gathered once after the timed loop.

    The arrival skew needs no clocks compared across hosts: in a collective that every rank
    leaves together, a rank that enters late spends that much less time inside it, so in each
    iteration its lateness behind the first rank to enter is the slowest rank's time minus its
    own (docs/RESULTS.md, "Per-rank timing")."""

    time_s: list[float]  # each rank's median time inside the call
    skew_s: list[float] | None  # each rank's median arrival skew; None where ranks do not leave together


@dataclass
class Timing:
    """What `Session.time_call` measured."""

    samples_s: list[float]  # per iteration, max over ranks
    iters: int
    ranks: RankTimes
    wire: dict | None = None  # rank 0: every host's counter entry (harness/wireprobe.py); None: not read

    def measurement(self, wrong: int | None) -> Measurement:
        return Measurement(self.samples_s, self.iters, wrong, self.ranks, self.wire)

    def __iter__(self):
        # `samples, iters = session.time_call(call)` keeps working where a workload needs no more
        return iter((self.samples_s, self.iters))


@dataclass
class Measurement:
    samples_s: list[float]  # per iteration, max over ranks
    iters: int
    wrong: int | None
    ranks: RankTimes | None = None  # the per-rank columns; None: not measured (e.g. the DeepSpeed engine)
    wire: dict | None = None  # every host's counters during the point (core/wire.py); None: not read


class TransferFailed(RuntimeError):
    """A transfer of Session.time_each failed: the backend's error (same text) and the counters of
    this rank's host from the transfer's start to the failure ({} where it reads none), which say
    whether the wire dropped, retransmitted or flapped meanwhile."""

    def __init__(self, cause: RuntimeError, wire: dict):
        super().__init__(str(cause))
        self.wire = wire


@dataclass
class RunContext:
    """Facts about the run that every record repeats."""

    plan: RunOptions
    env: RankEnv
    backend: str
    device: torch.device
    device_name: str
    hosts: list[str]
    nnodes: int
    ranks_per_node: int
    net: dict
    started_at: dt.datetime
    nccl_version: str | None
    rank_cpus: list[str | None] | None = None  # per rank, the CPUs it may run on (--bind)
    rank_host: list[int] | None = None  # per rank, its host's index in `hosts`

    @functools.cached_property
    def net_json(self) -> str:
        """Every host's network facts as the `net` column holds them: serialised once a run, not
        once a row (36 ms and 3 MB a row at 1024 hosts)."""
        return json.dumps(self.net["per_host"], sort_keys=True)


@dataclass
class Session:
    """One rank's view of a running measurement."""

    ctx: RunContext
    timer: Timer
    reporter: Reporter
    writer: ResultWriter | None  # rank 0 only
    # The process group the workload measures on: None is the default one. A workload may put
    # a fresh group here (new connections, e.g. after an MTU change: TCP keeps its MSS).
    group: dist.ProcessGroup | None = None
    warmup_done: int | None = None  # warm-up iterations of the last time_call (adaptive may run fewer)
    control: ControlPlane | None = None  # the control plane (harness/control.py); None in unit tests
    ops: PairGroup | None = None  # a pair's own group (workloads/pairs.py): the loop runs on it, not on `group`
    wire: WireProbe | None = None  # counters around each time_call (None: --no-wire, or unit tests)
    setting: Setting | None = None  # the --env/--mtu setting being measured (harness/settingpasses.py)

    @property
    def rank(self) -> int:
        return self.ctx.env.rank

    @property
    def world(self) -> int:
        return self.ctx.env.world_size

    @property
    def device(self) -> torch.device:
        return self.ctx.device

    def time_call(self, call: Callable[[], None], label: str = "a collective") -> Timing:
        """Warm up, agree on the count, time each iteration; per-iteration max over ranks (s), and
        every rank's own median time and arrival skew. `label` names the point if it hangs."""
        with self._point(label):
            if self.wire is not None:
                self.wire.begin()
            samples, iters = self._captured(label, call)
        slowest = torch.tensor(samples, dtype=torch.float64, device=self.ctx.device)
        self._ops().max_(slowest)
        slowest_s = slowest.cpu().tolist()
        ranks = self._gather_rank_times(samples, slowest_s)
        wire = None
        if self.wire is not None:  # every rank takes part, readers or not
            # Read after the gathers, not right after the loop: a send returns once its bytes are
            # in the socket's buffer, and they pass eth0 only later. A peer's answer over the same
            # connections means that every byte sent before it is out.
            wire = gather_wire(self._ops(), self.wire.end(), self.wire.host_of, self.ctx.device)
        return Timing(slowest_s, iters, ranks, wire)

    def _gather_rank_times(self, own_s: list[float], slowest_s: list[float]) -> RankTimes:
        """One all_gather of (median time, median arrival skew) from every rank, after the timed loop."""
        mine = torch.tensor(rank_summary(own_s, slowest_s), dtype=torch.float64, device=self.ctx.device)
        everyone = self._ops().gather(mine)
        pairs = torch.stack(everyone).cpu().tolist()  # one copy off the device
        return RankTimes([p[0] for p in pairs], [p[1] for p in pairs])

    def _captured(self, label: str, call: Callable[[], None]) -> tuple[list[float], int]:
        """_own_samples, with a collective torch cannot capture (--cuda-graph) named in one line."""
        try:
            return self._own_samples(call)
        except GraphCaptureFailed as exc:
            raise RuntimeFailure(f"--cuda-graph: torch could not capture {label} in a CUDA graph ({exc}): "
                                 "measure it without --cuda-graph") from None

    def time_each(self, call: Callable[[], None], label: str = "a transfer") -> tuple[list[list[float]], int, dict]:
        """The same loop, but every rank's own per-iteration times (s), indexed by rank: for
        workloads where ranks run different operations at once (disjoint pairs, workloads/pairs.py)
        and the max over all ranks would mix them. Also this host's counters during the loop,
        {host: entry} (harness/wireprobe.py), where this rank reads them and is its host's only rank
        (with more, another rank's transfer would be counted in); {} otherwise."""
        wire = self.wire
        own = wire if wire is not None and wire.sampler is not None and wire.ranks_on_host == 1 else None
        begun = None
        try:
            with self._point(label):
                if own is not None:
                    own.begin()
                    begun = own
                samples, iters = self._own_samples(call)
            mine = torch.tensor(samples, dtype=torch.float64, device=self.ctx.device)
            everyone = self._ops().gather(mine)  # same count everywhere: equal shapes
        except RuntimeError as exc:  # gloo's timeouts and closed connections: what the wire did meanwhile
            raise TransferFailed(exc, _host_wire(begun)) from exc
        return [t.cpu().tolist() for t in everyone], iters, _host_wire(own)

    def _ops(self):
        """The group operations of the loop: the pair's own (ops), or those of `group`."""
        return self.ops if self.ops is not None else DistOps(self.group)

    @contextlib.contextmanager
    def _point(self, label: str):
        """Marks a point's boundaries on the control plane (never its iterations), so that a hang
        inside it is named while it happens (ControlPlane.watch)."""
        if self.control is None:
            yield
            return
        self.control.enter(label)
        try:
            yield
        finally:
            self.control.leave()

    def _own_samples(self, call: Callable[[], None]) -> tuple[list[float], int]:
        """Warm up, agree on the count with every rank, time each iteration on this rank (s)."""
        plan, device = self.ctx.plan, self.ctx.device
        if not plan.iters and plan.precision > 0:
            return self._until_precise(call)
        warm = self.timer.run(call, max(1, plan.warmup))
        self.warmup_done = len(warm)
        if plan.iters:
            iters = plan.iters
            self._ops().barrier()
        else:
            tail = warm[len(warm) // 2:]
            estimate = torch.tensor([statistics.median(tail)], dtype=torch.float64, device=device)
            self._ops().max_(estimate)  # every rank must run the same count
            iters = adaptive_iters(float(estimate.item()), self._budget(), plan.min_iters, plan.max_iters)
        return self.timer.run(call, iters), iters

    def _budget(self) -> float:
        """--time-budget in the units of the timer's samples: a graph replay's sample is one call's
        share of it, so a replay spends ops_per_sample times its sample."""
        return self.ctx.plan.time_budget / self.timer.ops_per_sample

    def _until_precise(self, call: Callable[[], None]) -> tuple[list[float], int]:
        """Warm up (StopRule.warmups: up to --warmup, within a share of the budget), then timed
        batches until StopRule is met. Between batches (never inside one) one all_reduce (MAX) of
        the batch's times gives every rank the same per-iteration maxima, hence the same decision;
        the loop inside a batch is the plain timer loop."""
        plan = self.ctx.plan
        rule = StopRule(self._budget(), plan.min_iters, plan.max_iters, plan.precision)
        first = self.timer.run(call, min(2, max(1, plan.warmup)))
        pace = torch.tensor(first, dtype=torch.float64, device=self.ctx.device)
        self._ops().max_(pace)  # every rank warms up as often
        self.warmup_done = rule.warmups(min(pace.cpu().tolist()), max(1, plan.warmup))
        self.timer.run(call, self.warmup_done - len(first))
        own: list[float] = []
        slowest: list[float] = []
        batch = rule.next_batch(slowest)
        while batch:
            times = self.timer.run(call, batch)
            worst = torch.tensor(times, dtype=torch.float64, device=self.ctx.device)
            self._ops().max_(worst)
            own += times
            slowest += worst.cpu().tolist()
            batch = rule.next_batch(slowest)
        return own, len(own)

    def sum_over_ranks(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.ctx.device)
        dist.all_reduce(t, group=self.group)
        return int(t.item())

    def record(self, *, collective: str, dtype: str, op: str | None, root: int, size_bytes: int, count: int,
               in_place: bool, busbw_factor: float, m: Measurement, repetition: int, **extra) -> dict:
        """A result row: the shared columns, the statistics of `m`, and workload columns in `extra`."""
        ctx, plan = self.ctx, self.ctx.plan
        us = np.asarray(m.samples_s) * 1e6
        median_us = float(np.median(us))
        algbw = size_bytes / (median_us * 1e-6) / 1e9
        warmup = self.warmup_done if self.warmup_done is not None else max(1, plan.warmup)
        row = {
            "run_id": plan.run_id, "label": plan.label, "started_at": ctx.started_at,
            "collective": collective, "dtype": dtype, "op": op, "root": root,
            "size_bytes": size_bytes, "count": count, "in_place": in_place,
            "world_size": ctx.env.world_size, "nnodes": ctx.nnodes, "ranks_per_node": ctx.ranks_per_node,
            "backend": ctx.backend, "device": ctx.device.type, "device_name": ctx.device_name,
            "launcher": ctx.env.launcher, "iters": m.iters,
            "warmup": warmup, "repetition": repetition,
            "time_us": median_us, "time_us_min": float(us.min()), "time_us_max": float(us.max()),
            "time_us_p99": float(np.percentile(us, 99)),
            "time_ci": time_ci(us),
            "algbw_GBps": algbw, "busbw_GBps": algbw * busbw_factor, "wrong": m.wrong,
            "samples_us": us.tolist(), **rank_columns(m.ranks), "rank_cpus": ctx.rank_cpus,
            "rank_host": ctx.rank_host,
            "workload": plan.workload, "bucket_bytes": None, "zero_stage": None,
            "mtu": ctx.net.get("mtu"), "iface": ctx.net.get("iface"), "link_layer": ctx.net.get("link_layer"),
            "hosts": ctx.hosts, "commbench_version": commbench.__version__, "torch_version": torch.__version__,
            "nccl_version": ctx.nccl_version, "env": json.dumps(env_snapshot(), sort_keys=True),
            "net": ctx.net_json, "plan": plan.to_json(),
            "schema_version": SCHEMA_VERSION,
            # the bytes one rank sends between the snapshots: every warm-up and timed call
            # (unknown for a transfer that failed before its timed calls: the row has no ratio)
            **wirecols.columns(m.wire, size_bytes * busbw_factor * (warmup + m.iters) if m.iters else None),
        }
        if self.setting is not None:
            row["settings"] = self.setting.label
            if self.setting.mtu is not None:
                row["mtu"] = self.setting.mtu  # the MTU of this pass, not the one at the start
        row.update(extra)
        return row

    def write(self, rows: list[dict]) -> None:
        if self.writer is not None and rows:
            self.writer.append(rows)


def _host_wire(wire: WireProbe | None) -> dict:
    """{host: entry} of this host's counters since wire.begin(); after the gather, so that the
    peer's bytes are through. {} where this rank does not read them (None)."""
    entry = wire.end() if wire is not None else b""
    return {wire.host: json.loads(entry)} if wire is not None and entry else {}


def time_ci(us: np.ndarray) -> float | None:
    """The time_ci column: the median's 95% CI half-width over the median; None under 6 samples, or
    where a sample is not a finite time (a pairs link that failed: its row says so, not its CI)."""
    if not us.size or not np.isfinite(us).all():
        return None
    width = median_ci_halfwidth(us)
    return width if math.isfinite(width) else None


def rank_columns(ranks: RankTimes | None) -> dict:
    def us(values: list[float] | None) -> list[float] | None:
        return None if values is None else [v * 1e6 for v in values]

    return {"rank_time_us": us(ranks.time_s) if ranks else None,
            "rank_skew_us": us(ranks.skew_s) if ranks else None}
