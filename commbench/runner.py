"""The measurement loop every rank runs, and the records rank 0 writes.

Per point: allocate and fill buffers, warm up, choose the iteration count (fixed, or adaptive
from the warm-up times, agreed by all ranks), time every iteration, take each iteration's
maximum over ranks (the slowest rank bounds a collective), then check the output once on
fresh inputs, outside the timed loop.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import statistics
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

import commbench
from commbench import faults
from commbench.collectives import CallArgs, Collective, Layout
from commbench.console import PLACEMENT_HEADER, Cell, Reporter, format_row
from commbench.data import allocate, count_wrong, fill
from commbench.dtypes import DType, check_backend_support, get_dtype
from commbench.envinfo import env_snapshot, iface_facts, traffic_iface
from commbench.errors import EXIT_BAD_RESULT, EXIT_OK, EXIT_RUNTIME, BadInput, CommbenchError, RuntimeFailure
from commbench.launch import RankEnv
from commbench.memory import check_fits
from commbench.plan import Point, SweepPlan
from commbench.results import SCHEMA_VERSION, ResultWriter, resolve_out
from commbench.timing import Timer, adaptive_iters, timer_for


@dataclass
class Measurement:
    samples_s: list[float]  # per iteration, max over ranks
    iters: int
    wrong: int | None


@dataclass
class RunContext:
    """Facts about the run that every record repeats."""

    plan: SweepPlan
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


def choose_backend(requested: str) -> str:
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "gloo"
    if requested == "nccl" and not (torch.cuda.is_available() and torch.cuda.device_count() > 0):
        raise BadInput("--backend nccl needs CUDA GPUs and none is visible here: use --backend gloo")
    return requested


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


def measure_point(collective: Collective, layout: Layout, point: Point, dtype: DType, args: CallArgs,
                  plan: SweepPlan, device: torch.device, timer: Timer) -> Measurement:
    bufs = allocate(collective, layout, dtype, point.in_place, device)
    fill(bufs, args, dtype, point.in_place)
    call = collective.bind(bufs, args)

    warm = timer.run(call, max(1, plan.warmup))
    if plan.iters:
        iters = plan.iters
        dist.barrier()
    else:
        tail = warm[len(warm) // 2:]
        estimate = torch.tensor([statistics.median(tail)], dtype=torch.float64, device=device)
        dist.all_reduce(estimate, op=dist.ReduceOp.MAX)  # every rank must run the same count
        iters = adaptive_iters(float(estimate.item()), plan.time_budget, plan.min_iters, plan.max_iters)

    samples = timer.run(call, iters)

    slowest = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)

    wrong = None
    if plan.check:
        fill(bufs, args, dtype, point.in_place)
        call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if faults.corrupts_output(args.rank):
            bufs.recv.view(-1)[0] += 1
        n_wrong = torch.tensor([count_wrong(collective, layout, bufs, args, dtype)], dtype=torch.int64, device=device)
        dist.all_reduce(n_wrong)
        wrong = int(n_wrong.item())
    return Measurement(slowest.cpu().tolist(), iters, wrong)


def make_record(ctx: RunContext, collective: Collective, point: Point, dtype: DType, m: Measurement,
                repetition: int) -> dict:
    us = np.asarray(m.samples_s) * 1e6
    median_us = float(np.median(us))
    algbw = point.size_bytes / (median_us * 1e-6) / 1e9
    plan = ctx.plan
    return {
        "run_id": plan.run_id,
        "label": plan.label,
        "started_at": ctx.started_at,
        "collective": collective.name,
        "dtype": dtype.name,
        "op": plan.op if collective.reduces else None,
        "root": plan.root if collective.rooted else -1,
        "size_bytes": point.size_bytes,
        "count": point.count,
        "in_place": point.in_place,
        "world_size": ctx.env.world_size,
        "nnodes": ctx.nnodes,
        "ranks_per_node": ctx.ranks_per_node,
        "backend": ctx.backend,
        "device": ctx.device.type,
        "device_name": ctx.device_name,
        "launcher": ctx.env.launcher,
        "iters": m.iters,
        "warmup": max(1, plan.warmup),
        "repetition": repetition,
        "time_us": median_us,
        "time_us_min": float(us.min()),
        "time_us_max": float(us.max()),
        "time_us_p99": float(np.percentile(us, 99)),
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * collective.busbw_factor(ctx.env.world_size),
        "wrong": m.wrong,
        "samples_us": us.tolist(),
        "workload": plan.workload,
        "bucket_bytes": None,
        "zero_stage": None,
        "mtu": ctx.net.get("mtu"),
        "iface": ctx.net.get("iface"),
        "link_layer": ctx.net.get("link_layer"),
        "hosts": ctx.hosts,
        "commbench_version": commbench.__version__,
        "torch_version": torch.__version__,
        "nccl_version": ctx.nccl_version,
        "env": json.dumps(env_snapshot(), sort_keys=True),
        "net": json.dumps(ctx.net["per_host"], sort_keys=True),
        "plan": plan.to_json(),
        "schema_version": SCHEMA_VERSION,
    }


def _gather_ranks(env: RankEnv, device: torch.device, device_name: str) -> list[dict]:
    iface = traffic_iface(env.master_addr)
    mine = {"rank": env.rank, "host": socket.gethostname(), "pid": os.getpid(), "device": str(device),
            "device_name": device_name, **iface_facts(iface)}
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
        f"iters: adaptive ({plan.time_budget:g} s per point, {plan.min_iters}..{plan.max_iters})")
    lines = [
        f"# commbench {commbench.__version__}  run {plan.run_id}  torch {torch.__version__}"
        + (f"  nccl {ctx.nccl_version}" if ctx.nccl_version else ""),
        f"# backend {ctx.backend}  launcher {ctx.env.launcher}  ranks {ctx.env.world_size} "
        f"({ctx.nnodes} node(s) x {ctx.ranks_per_node})  warmup iters: {max(1, plan.warmup)}  {iters}  "
        f"repetitions: {plan.repetitions}  validation: {int(plan.check)}",
        "#",
        "# Using devices",
    ]
    for r in ranks:
        lines.append(f"#  Rank {r['rank']:2d} Pid {r['pid']:7d} on {r['host']:>10s} device {r['device']} "
                     f"[{r['device_name']}] iface {r['iface']} mtu {r['mtu']}")
    lines.append("#")
    return lines


def rank_main(plan: SweepPlan, env: RankEnv) -> int:
    """The entry point of every rank, however it was launched; returns its exit code."""
    try:
        return run_sweep(plan, env)
    except CommbenchError as exc:
        _say(env, f"commbench: {exc}", rank0_only=isinstance(exc, BadInput))
        return exc.exit_code


def run_sweep(plan: SweepPlan, env: RankEnv) -> int:
    """Every rank calls this; returns the rank's exit code. Rank 0 prints and writes."""
    from datetime import timedelta

    backend = choose_backend(plan.backend)
    dtype = get_dtype(plan.dtype)
    check_backend_support(backend, dtype, plan.op if any(c.reduces for c in plan.entries()) else None)
    device = _device_for(backend, env)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    check_fits(plan, env.world_size, env.local_world_size, device)

    try:
        dist.init_process_group(backend, init_method=f"tcp://{env.master_addr}:{env.master_port}",
                                rank=env.rank, world_size=env.world_size,
                                timeout=timedelta(seconds=plan.timeout))
    except (RuntimeError, ValueError) as exc:  # DistError and gloo's connect errors are RuntimeErrors
        raise RuntimeFailure(f"rank {env.rank} on {socket.gethostname()} could not join the process group at "
                             f"{env.master_addr}:{env.master_port}: {_first_line(exc)} (check MASTER_ADDR, "
                             f"the firewall and GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME or --iface)") from None
    writer: ResultWriter | None = None
    reporter = Reporter(False, 0)
    try:
        ranks = _gather_ranks(env, device, device_name)
        hosts = list(dict.fromkeys(r["host"] for r in ranks))
        per_host_counts = [sum(1 for r in ranks if r["host"] == h) for h in hosts]
        per_host = {h: {k: v for k, v in next(r for r in ranks if r["host"] == h).items()
                        if k in ("iface", "mtu", "link_layer", "speed_mbps", "operstate")} for h in hosts}
        ctx = RunContext(plan, env, backend, device, device_name, hosts, len(hosts), max(per_host_counts),
                         {**ranks[0], "per_host": per_host}, dt.datetime.now(dt.timezone.utc),
                         _nccl_version(backend))

        setup_error = None
        if env.rank == 0:
            writer = ResultWriter(resolve_out(plan.out, plan.run_id))
            try:
                writer.create()
            except BadInput as exc:
                setup_error = str(exc)
                writer = None
        _agree_on(setup_error, device)

        work = [(c, plan.points(c, env.world_size, env.rank)) for c in plan.entries()]
        total = plan.repetitions * sum(len(pts) for _, grid in work for _, pts in grid)
        reporter = Reporter(env.rank == 0, total)
        for line in _header_lines(ctx, ranks):
            reporter.line(line)

        timer = timer_for(device)
        any_wrong = False
        for repetition in range(plan.repetitions):
            for collective, grid in work:
                args = CallArgs(env.rank, env.world_size, plan.root, plan.op if collective.reduces else None)
                reporter.line(f"# Collective test starting: {collective.name}"
                              + (f"  (repetition {repetition + 1}/{plan.repetitions})" if plan.repetitions > 1 else ""))
                reporter.line(PLACEMENT_HEADER)
                for layout, points in grid:
                    cells: dict[bool, Cell] = {}
                    records = []
                    for point in points:
                        m = measure_point(collective, layout, point, dtype, args, plan, device, timer)
                        if env.rank == 0:
                            rec = make_record(ctx, collective, point, dtype, m, repetition)
                            records.append(rec)
                            cells[point.in_place] = Cell(rec["time_us"], rec["algbw_GBps"], rec["busbw_GBps"], m.wrong)
                        any_wrong = any_wrong or bool(m.wrong)
                        reporter.advance(f"{collective.name} {point.size_bytes} B")
                    if writer is not None:
                        writer.append(records)
                    first = points[0]
                    reporter.line(format_row(first.size_bytes, first.count, dtype.nccl_name,
                                             (plan.op if collective.reduces else "none"),
                                             plan.root if collective.rooted else -1,
                                             cells.get(False), cells.get(True)))
                reporter.line(f"# Collective test concluded: {collective.name}")
        if writer is not None:
            busbws = [r["busbw_GBps"] for r in writer.rows]
            reporter.line(f"# Out of bounds values : 0 OK")
            reporter.line(f"# Avg bus bandwidth    : {statistics.fmean(busbws) if busbws else 0.0:.4f} ")
            reporter.line(f"# Results: {writer.path} ({len(writer.rows)} rows)")
        if any_wrong:
            reporter.close()
            _say(env, "commbench: some results were wrong (see the #wrong column): the collective or the "
                      "network corrupts data", rank0_only=True)
            return EXIT_BAD_RESULT
        return EXIT_OK
    except BaseException as exc:
        reporter.close()
        if isinstance(exc, CommbenchError):
            _say(env, f"commbench: {exc}", rank0_only=isinstance(exc, BadInput))
            _kept(env, writer)
            return exc.exit_code
        if isinstance(exc, RuntimeError) or isinstance(exc, dist.DistBackendError):
            _say(env, f"commbench: rank {env.rank} on {socket.gethostname()}: collective failed: "
                      f"{_first_line(exc)}")
            _kept(env, writer)
            return EXIT_RUNTIME
        _kept(env, writer)
        raise
    finally:
        reporter.close()
        try:
            dist.destroy_process_group()
        except Exception as exc:  # a broken group cannot always be torn down; the process ends anyway
            _ = exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _say(env: RankEnv, message: str, rank0_only: bool = False) -> None:
    import sys

    if rank0_only and env.rank != 0:
        return
    print(message, file=sys.stderr, flush=True)


def _kept(env: RankEnv, writer: ResultWriter | None) -> None:
    if writer is not None:
        _say(env, f"commbench: {len(writer.rows)} finished rows kept in {writer.path}")
