"""The harness every workload runs on, on every rank: the process group, `Session.time_call` (the one
timing loop), `Session.time_each` (each rank's own times), `Session.record` (the shared columns), exit
codes, naming a lost peer.

It chooses backend and device, joins the process group (bounded by --timeout), gathers host and
network facts, opens the results file on rank 0, and hands a `Session` to the workload. The
session's `time_call` is the one timing loop of commbench: warm up, agree on the iteration count
(fixed, or adaptive from the warm-up times), time every iteration, and take each iteration's
maximum over ranks (the slowest rank bounds a collective). `record` builds a result row with the
columns every workload shares. Failures map to exit codes here, once, for every workload.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import math
import os
import re
import socket
import statistics
import sys
from dataclasses import dataclass
from typing import Protocol
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

import commbench
from commbench.harness import faults
from commbench.harness.backend import choose_backend
from commbench.harness.closing import closing_lines
from commbench.harness.console import Reporter
from commbench.harness.control import ControlPlane, RollCall
from commbench.harness.joining import first_line, join_group, local_addr
from commbench.harness.pairgroup import DistOps, PairGroup
from commbench.net.envinfo import env_snapshot, iface_facts, traffic_iface
from commbench.core.errors import EXIT_BAD_RESULT, EXIT_OK, EXIT_RUNTIME, BadInput, CommbenchError, RuntimeFailure
from commbench.core.launch import RankEnv, ignore_further_signals
from commbench.core.binding import collisions, current_cpulist
from commbench.net.netinfo import host_summary
from commbench.core.options import RunOptions
from commbench.core.columns import SCHEMA_VERSION
from commbench.core.results import ResultWriter, resolve_out
from commbench.core.settings import Setting
from commbench.harness.settings import axis_interfaces, run_each, settings_of
from commbench.core.stats import median_ci_halfwidth
from commbench.core.stragglers import rank_summary, straggler_warnings
from commbench.harness.wire import WireProbe, gather as gather_wire
from commbench.core import wire as wirecols
from commbench.harness.timing import GraphCaptureFailed, StopRule, Timer, adaptive_iters, timer_for


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
    wire: dict | None = None  # rank 0: every host's counter entry (harness/wire.py); None: not read

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
    rank_cpus: list[str] | None = None  # per rank, the CPUs it may run on (--bind)
    rank_host: list[int] | None = None  # per rank, its host's index in `hosts`

    @functools.cached_property
    def net_json(self) -> str:
        """Every host's network facts as the `net` column holds them: serialised once a run, not
        once a row (36 ms and 3 MB a row at 1024 hosts)."""
        return json.dumps(self.net["per_host"], sort_keys=True)


class Workload(Protocol):
    """What a run measures (workloads/sweep.py, workloads/buckets.py, ...)."""

    plan: RunOptions

    def validate(self, world: int) -> None:
        """Checks that need the world size (raise BadInput)."""

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        """Refuse what cannot run (dtype, op, memory) before the process group exists."""

    def total_points(self, world: int) -> int:
        """Points per repetition, for the progress bar."""

    def run(self, session: Session, repetitions: range) -> bool:
        """Measure the whole grid once per repetition in `repetitions`, recording each row's number;
        return True if any output was wrong. harness/settings.py run_each passes every repetition
        at once, or with --env/--mtu axes one at a time, each setting in turn."""


def _device_for(backend: str, env: RankEnv) -> torch.device:
    if backend == "nccl":
        dev = torch.device("cuda", env.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def _nccl_version(backend: str) -> str | None:
    if backend != "nccl":
        return None
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


@dataclass
class Session:
    """One rank's view of a running measurement."""

    ctx: RunContext
    timer: Timer
    reporter: Reporter
    writer: ResultWriter | None  # rank 0 only
    # The process group the workload measures on: None is the default one. A workload may put
    # a fresh group here (new connections, e.g. after an MTU change: TCP keeps its MSS).
    group: object = None
    warmup_done: int | None = None  # warm-up iterations of the last time_call (adaptive may run fewer)
    control: ControlPlane | None = None  # the control plane (harness/control.py); None in unit tests
    ops: PairGroup | None = None  # a pair's own group (workloads/pairs.py): the loop runs on it, not on `group`
    wire: WireProbe | None = None  # counters around each time_call (None: --no-wire, or unit tests)
    setting: Setting | None = None  # the --env/--mtu setting being measured (harness/settings.py)

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
        {host: entry} (harness/wire.py), where this rank reads them and is its host's only rank
        (with more, another rank's transfer would be counted in); {} otherwise."""
        own = self.wire is not None and self.wire.sampler is not None and self.wire.ranks_on_host == 1
        begun = False
        try:
            with self._point(label):
                if own:
                    self.wire.begin()
                    begun = True
                samples, iters = self._own_samples(call)
            mine = torch.tensor(samples, dtype=torch.float64, device=self.ctx.device)
            everyone = self._ops().gather(mine)  # same count everywhere: equal shapes
        except RuntimeError as exc:  # gloo's timeouts and closed connections: what the wire did meanwhile
            raise TransferFailed(exc, self._own_wire(begun)) from exc
        return [t.cpu().tolist() for t in everyone], iters, self._own_wire(own)

    def _own_wire(self, own: bool) -> dict:
        """{host: entry} of this host's counters since wire.begin(); after the gather, so that the
        peer's bytes are through. {} where this rank does not read them."""
        entry = self.wire.end() if own else b""
        return {self.wire.host: json.loads(entry)} if entry else {}

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
            "samples_us": us.tolist(), **_rank_columns(m.ranks), "rank_cpus": ctx.rank_cpus,
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


def time_ci(us: np.ndarray) -> float | None:
    """The time_ci column: the median's 95% CI half-width over the median; None under 6 samples, or
    where a sample is not a finite time (a pairs link that failed: its row says so, not its CI)."""
    if not us.size or not np.isfinite(us).all():
        return None
    width = median_ci_halfwidth(us)
    return width if math.isfinite(width) else None


def _rank_columns(ranks: RankTimes | None) -> dict:
    def us(values: list[float] | None) -> list[float] | None:
        return None if values is None else [v * 1e6 for v in values]

    return {"rank_time_us": us(ranks.time_s) if ranks else None,
            "rank_skew_us": us(ranks.skew_s) if ranks else None}


def _gather_ranks(env: RankEnv, device: torch.device, device_name: str) -> list[dict]:
    iface = traffic_iface(env.master_addr)
    mine = {"rank": env.rank, "host": socket.gethostname(), "pid": os.getpid(), "device": str(device),
            "device_name": device_name, **iface_facts(iface), "host_net": host_summary(iface),
            "addr": local_addr(env.master_addr), "cpus": current_cpulist(), "ncpus": os.cpu_count()}
    everyone: list[dict] = [None] * env.world_size  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)
    return everyone


def _agree_on(error: str | None, device: torch.device) -> None:
    """Rank 0 broadcasts a setup error so that every rank stops with the same message."""
    box = [error]
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    if box[0]:
        raise BadInput(box[0])


def _header_lines(ctx: RunContext, ranks: list[dict]) -> list[str]:
    plan = ctx.plan
    iters = f"iters: {plan.iters}" if plan.iters else (
        f"iters: adaptive (until the median is known to {plan.precision:.0%} or {plan.time_budget:g} s per point, "
        f"{plan.min_iters}..{plan.max_iters})" if plan.precision > 0 else
        f"iters: adaptive ({plan.time_budget:g} s per point, {plan.min_iters}..{plan.max_iters})")
    lines = [
        f"# commbench {commbench.__version__}  run {plan.run_id}  workload {plan.workload}  torch {torch.__version__}"
        + (f"  nccl {ctx.nccl_version}" if ctx.nccl_version else ""),
        f"# backend {ctx.backend}  launcher {ctx.env.launcher}  ranks {ctx.env.world_size} "
        f"({ctx.nnodes} node(s) x {ctx.ranks_per_node})  "
        f"warmup iters: {'' if plan.iters or not plan.precision else 'up to '}{max(1, plan.warmup)}  {iters}  "
        f"repetitions: {plan.repetitions}  validation: {int(plan.check)}",
        "#",
        "# Using devices",
    ]
    for r in ranks:
        lines.append(f"#  Rank {r['rank']:2d} Pid {r['pid']:7d} on {r['host']:>10s} device {r['device']} "
                     f"[{r['device_name']}] iface {r['iface']} mtu {r['mtu']} cpus {r.get('cpus')}")
    lines.append("#")
    return lines


def rank_main(workload: Workload, env: RankEnv) -> int:
    """The entry point of every rank, however it was launched; returns its exit code."""
    try:
        return run_workload(workload, env)
    except CommbenchError as exc:
        _say(env, f"commbench: {exc}", rank0_only=isinstance(exc, BadInput))
        return exc.exit_code


def run_workload(workload: Workload, env: RankEnv) -> int:
    """Every rank calls this; returns the rank's exit code. Rank 0 prints and writes."""
    plan = workload.plan
    backend = choose_backend(plan.backend)
    device = _device_for(backend, env)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    workload.prepare(backend, device, env)
    # the timer itself unless a test delays this rank
    timer = faults.late_timer(timer_for(device, plan.cuda_graph), env.rank)
    control, env, joined = join_group(plan, backend, env, getattr(workload, "goes_on_without_absent", False))
    if joined is not None:  # some ranks never came: the workload measures what it can without them
        workload.absent = joined.absent  # type: ignore[attr-defined]  # set where goes_on_without_absent is
        if joined.line:
            _say(env, f"commbench: {joined.line}")
    broken = False
    writer: ResultWriter | None = None
    reporter = Reporter(False, 0)
    ranks: list[dict] = []
    probe: WireProbe | None = None
    try:
        ranks = _gather_ranks(env, device, device_name)
        probe = WireProbe.for_rank(ranks, env.rank, axis_interfaces(plan)) if plan.wire else None
        ctx = _run_context(plan, env, backend, device, device_name, ranks)
        writer = _open_writer(plan, env, device)
        passes = max(1, len(settings_of(plan)))
        reporter = Reporter(env.rank == 0, passes * plan.repetitions * workload.total_points(env.world_size),
                            progress=plan.progress)
        for line in _header_lines(ctx, ranks):
            reporter.line(line)
        for line in collisions(ranks) if env.rank == 0 and env.launcher != "local" else []:
            _say(env, f"commbench: warning: {line}")  # the local spawner binds (and says so) itself
        control.watch(lambda line: _say(env, line))
        any_wrong = run_each(Session(ctx, timer, reporter, writer, control=control, wire=probe), workload.run)
        if writer is not None:
            _summarise(writer, backend, env, ranks, reporter, plan)
            finished = getattr(workload, "finished", None)  # e.g. sweep --metrics: after the last line
            if finished is not None:
                finished(writer.rows)
        if any_wrong:
            reporter.close()
            _say(env, getattr(workload, "failure_message", "commbench: some results were wrong (see the #wrong "
                                                             "column): the collective or the network corrupts data"),
                 rank0_only=True)
            return EXIT_BAD_RESULT
        return EXIT_OK
    except BaseException as exc:  # noqa: BLE001 - every way out (a signal too) ends in _stopped_by's exit code
        ignore_further_signals()  # stopping now: a launcher's SIGTERM must not cut the report short
        reporter.close()
        broken = isinstance(exc, (RuntimeError, dist.DistBackendError)) and not isinstance(exc, CommbenchError)
        return _stopped_by(exc, env, writer, ranks, plan.timeout, control)
    finally:
        reporter.close()
        if not broken:  # a group broken by a dead link blocks in its teardown (a send waits for TCP's retries)
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group cannot always be torn down; the process ends anyway
                pass
        control.close()
        if probe is not None:
            probe.close()


def _run_context(plan, env: RankEnv, backend: str, device, device_name: str, ranks: list[dict]) -> RunContext:
    """What every row records about the run: hosts, ranks per node, each host's network facts."""
    hosts = list(dict.fromkeys(r["host"] for r in ranks))
    per_host_counts = [sum(1 for r in ranks if r["host"] == h) for h in hosts]
    per_host = {h: {k: v for k, v in next(r for r in ranks if r["host"] == h).items()
                    if k in ("iface", "mtu", "link_layer", "speed_mbps", "operstate", "host_net")} for h in hosts}
    return RunContext(plan, env, backend, device, device_name, hosts, len(hosts), max(per_host_counts),
                      {**ranks[0], "per_host": per_host}, dt.datetime.now(dt.timezone.utc), _nccl_version(backend),
                      [r.get("cpus") for r in ranks], [hosts.index(r["host"]) for r in ranks])


def _open_writer(plan, env: RankEnv, device) -> ResultWriter | None:
    """Rank 0 creates the results file; every rank learns whether that worked before measuring."""
    setup_error, writer = None, None
    if env.rank == 0:
        writer = ResultWriter(resolve_out(plan.out, plan.run_id))
        try:
            writer.create()
        except BadInput as exc:
            setup_error = str(exc)
            writer = None
    _agree_on(setup_error, device)
    return writer


def _summarise(writer: ResultWriter, backend: str, env: RankEnv, ranks: list[dict], reporter: Reporter,
               plan: RunOptions) -> None:
    """Rank 0 after the last point: NCCL's transport, straggler warnings, nccl-tests' closing lines
    and the run's summary (harness/closing.py)."""
    if backend == "nccl":
        from commbench.net.ncclinfo import record_debug
        record_debug(writer)  # NCCL_DEBUG_FILE (sweep --nccl-debug): the transport and algorithms NCCL used
    warnings = straggler_warnings(writer.rows, [r["host"] for r in ranks])
    values = [r.get("wire") for r in writer.rows]
    warnings += wirecols.total_lines(values, len(writer.rows))
    if writer.rows:  # --nccl-debug: NCCL's word against the counters
        warnings += wirecols.transport_lines(writer.rows[0].get("transport"), values)
    if warnings:
        reporter.close()  # a progress bar must not draw over them
    for warning in warnings:
        _say(env, warning)
    note = writer.close()  # the parts compacted into the one results file (a failure keeps them, readable)
    if note:
        reporter.close()
        _say(env, f"commbench: warning: {note}")
    for line in closing_lines(writer.rows, plan):
        reporter.line(line)
    reporter.last_line(f"# Results: {writer.path} ({len(writer.rows)} rows)")


def _stopped_by(exc: BaseException, env: RankEnv, writer: ResultWriter | None, ranks: list[dict],
                timeout: float, control: ControlPlane) -> int:
    """A rank stopped by an error or a signal: say why, say what was kept, return its exit code
    (re-raising what is neither ours nor a collective's failure)."""
    if isinstance(exc, CommbenchError):
        _say(env, f"commbench: {exc}", rank0_only=isinstance(exc, BadInput))
        _kept(env, writer)
        return exc.exit_code
    if isinstance(exc, RuntimeError) or isinstance(exc, dist.DistBackendError):
        asleep = control.suspended_s()
        if asleep:  # its peers went on while it did not run: what it finds on waking is not theirs to answer for
            _say(env, f"commbench: rank {env.rank} on {socket.gethostname()}: collective failed after "
                      f"{control.absence(asleep)}: {_SOURCE.sub('', first_line(exc))}")
            _kept(env, writer)
            return EXIT_RUNTIME
        call, called = _roll_call(control, env, first_line(exc))
        own = f"{control.describe(call)}: " if call is not None and call.cut_off else ""
        _say(env, f"commbench: rank {env.rank} on {socket.gethostname()}: collective failed: {own}"
                  f"{_failure(exc, env, ranks, timeout, call)}")
        if call is not None and not own:
            _say(env, f"commbench: roll call: {control.describe(call)}")
        if not called:
            _judge_without_rank0(control, env)
        _kept(env, writer)
        return EXIT_RUNTIME
    _kept(env, writer)
    raise exc


ROLL_CALL_SLACK_S = 15.0  # beyond --timeout: how long a failed rank waits for rank 0's roll call
ROLL_CALL_SILENCE_S = 5.0  # ... unless rank 0 does not answer for this long: no roll call is coming


def _roll_call(control: ControlPlane, env: RankEnv, why: str) -> tuple[RollCall | None, bool]:
    """Every rank reports its failure on the control plane (a report is an answer); rank 0 then
    calls the roll, so the ranks that stopped answering are named, not the first to complain.
    (rank 0's roll call or None elsewhere, whether rank 0 called it)."""
    try:
        control.report(why)
        if env.rank != 0:  # stay up (a report is only read while its mailbox exists) until rank 0 called
            heard = control.relay("rollcall", [0], control.timeout + ROLL_CALL_SLACK_S,
                                  silence_s=ROLL_CALL_SILENCE_S)
            return None, heard is not None
        call = control.roll_call()
        control.put("rollcall", "done")
        return call, True
    except Exception:  # noqa: BLE001 - the control plane is gone too (rank 0's host): the backend's words must do
        return None, True


def _judge_without_rank0(control: ControlPlane, env: RankEnv) -> None:
    """A rank that rank 0 never called the roll for calls its own: cut off itself, it names its own
    host (harness/observer.py); still reaching others, the lowest of them says so in one line."""
    try:
        call = control.roll_call()
    except Exception:  # noqa: BLE001 - the control plane is gone too: the lines above must do
        return
    if call.cut_off:
        _say(env, f"commbench: rank {env.rank} on {socket.gethostname()}: {control.describe(call)}")
    elif (line := control.together(call)) is not None:
        _say(env, line)


_SOURCE = re.compile(r"^\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\]\s*")  # gloo's "[.../pair.cc:537] "
_PEER = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")  # gloo names the peer as [addr]:port


def _failure(exc: BaseException, env: RankEnv, ranks: list[dict], timeout: float,
             call: RollCall | None = None) -> str:
    """One line on why a collective failed: the timeout, or the peer whose connection broke (by rank
    and host where the address tells), then the backend's own words. With a roll call (rank 0) a
    peer is called lost only when the roll call found it silent; one that answered is not blamed."""
    text = _SOURCE.sub("", first_line(exc))
    if call is not None and call.cut_off:  # this rank's own host is to blame: no peer is named
        return text
    if "timed out" in text.lower() or "timeout" in text.lower():
        return (f"no answer within --timeout {timeout:g} s (a rank, its host or the link stopped "
                f"responding): {text}")
    m = _PEER.search(text)
    if m:
        peers = [r for r in ranks if r["rank"] != env.rank and r.get("addr") == m.group(1)]
        if len(peers) == 1:
            p = peers[0]
            if call is None or p["rank"] in call.silent:
                return f"lost rank {p['rank']} on {p['host']} (pid {p['pid']}, {m.group(1)}): {text}"
            return (f"the connection to rank {p['rank']} on {p['host']} ({m.group(1)}) closed (it answered the "
                    f"roll call: it stopped because another rank did): {text}")
        if peers and len({p["host"] for p in peers}) == 1:
            which = ", ".join(str(p["rank"]) for p in peers)
            verb = "lost a rank" if call is None or set(call.silent) & {p["rank"] for p in peers} else \
                "the connection closed to a rank"
            return f"{verb} on {peers[0]['host']} (one of ranks {which}, {m.group(1)}): {text}"
    return text


def _say(env: RankEnv, message: str, rank0_only: bool = False) -> None:
    if rank0_only and env.rank != 0:
        return
    print(message, file=sys.stderr, flush=True)


def _kept(env: RankEnv, writer: ResultWriter | None) -> None:
    if writer is not None:
        note = writer.close()  # compacted, or left in parts that every reader reads
        if note:
            _say(env, f"commbench: warning: {note}")
        _say(env, f"commbench: {len(writer.rows)} finished rows kept in {writer.path}")
