"""The measuring commands (sweep, buckets, pairs, zero): parse and check the flags, build the
workload's plan, hand it to the launcher."""

from __future__ import annotations

import os
import sys
from typing import TypedDict

import click

from commbench.cli.launcher import launch_workload, launcher_checked
from commbench.cli.tables import wide_option
from commbench.cli.options import (Number, check_number, complete_bucket_ops, complete_collectives, complete_dtypes,
                                   complete_ops, env_option, fraction, model_shape, model_shape_options, run_fields,
                                   refuse_untaken, run_options, settings_axes, Shape)
from commbench.core.errors import BadInput
from commbench.core.options import GRAPH_OPS
from commbench.core.vocab import ORDER

CPU_MAX_BYTES = "64M"
GPU_MAX_BYTES = "1G"


@click.command()
@click.option("--collective", "collective", default="all_reduce", show_default=True,
              shell_complete=complete_collectives,
              help=f"{', '.join(ORDER)}, a comma-separated list, or all. nccl-tests spellings work "
                   "(allreduce, all-reduce).")
@click.option("-b", "--min-bytes", default="8", show_default=True, help="Smallest size (binary units: 8, 4K, 1M).")
@click.option("-e", "--max-bytes", default=None,
              help=f"Largest size [default: {CPU_MAX_BYTES} on CPU, {GPU_MAX_BYTES} on GPU].")
@click.option("-f", "--step-factor", type=Number(float, None, 1e6, example="2"), default=2.0, show_default=True,
              help="Multiply the size by this.")
@click.option("-i", "--step-bytes", default=None, help="Add this many bytes per step (with -f 1).")
@click.option("--sizes", default=None, help="Explicit sizes instead of -b/-e/-f, e.g. 1K,64K,4M.")
@click.option("-d", "--dtype", default="float32", show_default=True, shell_complete=complete_dtypes,
              help="float32, float16, bfloat16, int8, ... or nccl-tests names (float, half).")
@click.option("-o", "--op", default="sum", show_default=True, shell_complete=complete_ops,
              help="Reduction: sum, prod, max, min, avg (nccl only).")
@click.option("-r", "--root", type=Number(int, 0, 2**31 - 1, example="0"), default=0, show_default=True,
              help="Root rank of broadcast and reduce.")
@click.option("--placement", type=click.Choice(["out", "in", "both"]), default="both", show_default=True,
              help="Out-of-place, in-place or both (each where torch offers it).")
@click.option("--mtu", "mtus", default=None,
              help="MTU axis (root): e.g. 1500,9000 set on --iface of every host in turn (every repetition), "
                   "restored at the end.")
@click.option("--nccl-debug", is_flag=True,
              help="NCCL_DEBUG=INFO into <out>/<run_id>.nccl-debug.<host>.<pid>.log; the transport column "
                   "records what NCCL used (NET/IB, NET/Socket, P2P/IPC, SHM).")
@click.option("--cuda-graph", is_flag=True,
              help="NCCL: capture 20 calls per point into a CUDA graph and time its replays, as nccl-tests -G "
                   "(the host's launch cost left out; each sample is a replay's time over 20).")
@env_option
@run_options
@launcher_checked
def sweep(collective, min_bytes, max_bytes, step_factor, step_bytes, sizes, dtype, op, root, placement, mtus,
          nccl_debug, cuda_graph, env_axes, nproc, **run) -> int:
    """Measure collectives over a range of message sizes (the nccl-tests grid)."""
    from commbench.core import vocab
    from commbench.harness import plan as planning
    from commbench.core import units

    entries = vocab.resolve(collective)
    dt = vocab.get_dtype(dtype)
    op_name = vocab.get_op(op)
    fields = run_fields(nproc=nproc, workload="sweep", **run)

    if cuda_graph:
        if fields["backend"] != "nccl":
            raise BadInput("--cuda-graph captures NCCL calls on GPUs and this run uses gloo: drop --cuda-graph, "
                           "or run it where --backend nccl sees CUDA GPUs")
        fields["cuda_graph"] = GRAPH_OPS
    if placement != "both":
        unable = [c for c in entries if not c.supports(placement)]
        if unable and collective.strip().lower() != "all":
            where = "in place" if unable[0].placements == ("in",) else "out of place"
            raise BadInput(f"torch offers {unable[0].name} {where} only: use --placement "
                           f"{unable[0].placements[0]} or both")
        entries = [c for c in entries if c.supports(placement)]

    if sizes is not None:
        grid = units.parse_size_list(sizes, most=planning.MAX_POINTS)
    else:
        lo = units.parse_size(min_bytes, "--min-bytes")
        hi = units.parse_size(max_bytes or (GPU_MAX_BYTES if fields["backend"] == "nccl" else CPU_MAX_BYTES),
                              "--max-bytes")
        step = units.parse_size(step_bytes, "--step-bytes") if step_bytes else None
        grid = planning.size_grid(lo, hi, step_factor, step)

    axes = settings_axes(env_axes, fields["backend"], run.get("iface"), _mtu_axis(mtus, run.get("iface")))
    plan = planning.SweepPlan(collectives=[c.name for c in entries], sizes=grid, dtype=dt.name, op=op_name,
                              root=root, placement=placement, axes=axes, **fields)
    vocab.check_backend_support(fields["backend"], dt, op_name if any(c.reduces for c in entries) else None)
    if nccl_debug:
        from commbench.net.ncclinfo import enable_debug_file
        enable_debug_file(fields["out"], fields["run_id"], fields["backend"])
    from commbench.workloads.sweep import SweepWorkload  # torch: after the flags are checked

    return launch_workload(SweepWorkload(plan), nproc)


def _mtu_axis(text: str | None, iface: str | None) -> list[int]:
    if text is None:
        return []
    try:
        mtus = [int(m) for m in text.split(",") if m.strip()]
    except ValueError:
        raise BadInput(f"--mtu {text!r} is not a list of MTUs: e.g. --mtu 1500,9000") from None
    if not mtus or any(not 576 <= m <= 65535 for m in mtus):
        raise BadInput(f"--mtu {text!r}: MTUs are whole numbers from 576 to 65535, e.g. 1500,9000")
    if not iface:
        raise BadInput("--mtu changes an interface: name it with --iface (e.g. --iface eth0)")
    if "," in iface:
        raise BadInput(f"--mtu sets one interface's MTU on every host, and --iface {iface} names one a local rank: "
                       f"measure one rail at a time (--iface {iface.split(',')[0].strip()} --mtu {text})")
    if os.geteuid() != 0:
        raise BadInput("--mtu sets the MTU of --iface on every host and needs root: run as root, or drop --mtu")
    from commbench.net import netctl

    netctl.get_mtu(iface)  # the interface must exist here
    return mtus


@click.command()
@click.option("--params", default=None, help="Model parameters whose gradients are reduced, e.g. 125M, 1.3B.")
@click.option("--grad-bytes", default=None, help="Or gradient bytes per step directly, e.g. 2G [default: 64M].")
@click.option("-d", "--dtype", default="bfloat16", show_default=True, shell_complete=complete_dtypes,
              help="Gradient dtype (bf16, fp16, float32).")
@click.option("--bucket-size", default="1e5,1e6,1e7,5e7,5e8", show_default=True,
              help="Bucket sizes in ELEMENTS, as DeepSpeed's reduce_bucket_size counts them.")
@click.option("--op", "op", default="all_reduce", show_default=True, shell_complete=complete_bucket_ops,
              help="all_reduce (ZeRO 1/2, DDP) or reduce_scatter (ZeRO 3) per bucket.")
@click.option("--overlap", type=Number(int, 1, 10_000, example="2"), default=1, show_default=True,
              help="Buckets in flight at once (async collectives, each waited on).")
@env_option
@run_options
@launcher_checked
def buckets(params, grad_bytes, dtype, bucket_size, op, overlap, env_axes, nproc, **run) -> int:
    """Reduce one step's gradients in buckets, per bucket size, as DeepSpeed does."""
    from commbench.core import vocab
    from commbench.core import units

    dt = vocab.get_dtype(dtype)
    if params is not None and grad_bytes is not None:
        raise BadInput("--params and --grad-bytes both set the gradient size: pass one of them")
    n_params = units.parse_count(params, "--params") if params is not None else None
    size = n_params * dt.itemsize if n_params else units.parse_size(grad_bytes or "64M", "--grad-bytes")
    sizes = units.parse_count_list(bucket_size, "--bucket-size", most=100)
    entry = vocab.resolve(op)
    if len(entry) != 1 or entry[0].name not in vocab.BUCKET_OPS:
        raise BadInput(f"--op {op} is not a gradient reduction: use all_reduce or reduce_scatter")
    from commbench.workloads.buckets import BucketPlan, BucketWorkload  # torch: after the text is checked

    fields = run_fields(nproc=nproc, workload="buckets", **run)
    fields["axes"] = settings_axes(env_axes, fields["backend"], run.get("iface"))
    plan = BucketPlan(grad_bytes=size, bucket_elems=sizes, dtype=dt.name, op=entry[0].name, overlap=overlap,
                      params=n_params, **fields)
    return launch_workload(BucketWorkload(plan), nproc)


@click.command()
@click.option("--size", default=None, help="Bytes per transfer, binary units [default: 64M].")
@click.option("--mode", type=click.Choice(["sendrecv", "bidir"]), default=None,
              help="sendrecv: each direction in turn, a row each; bidir: both at once, GB/s per direction "
                   "[default: sendrecv].")
@click.option("--hosts-only", is_flag=True,
              help="With several ranks per host: pair only the first rank of each host (others idle).")
@click.option("--slow-below", default="80%", show_default=True,
              help="Name a host whose best link is below this share of the median host's best.")
@click.option("--from", "from_results", multiple=True, type=click.Path(), metavar="RESULTS",
              help="Rank the links of pairs results (file or folder) instead of measuring; repeatable.")
@click.option("--per-rail", "per_rail", is_flag=True,
              help="One measurement per rail (interface) per pair, rail after rail; names a host's slow rail (gloo).")
@click.option("--rails", default=None, metavar="IF,IF",
              help="With --per-rail: the rails, e.g. eth0,eth1 [default: every interface with an IPv4 address "
                   "on every host].")
@click.option("--capture", is_flag=True,
              help="Measure the suspect links (failed, or of a host named slow) again while tcpdump keeps their "
                   "packet headers (root or CAP_NET_RAW); the verdict counts retransmissions and names each .pcap.")
@run_options
@launcher_checked
def pairs(size, mode, hosts_only, slow_below, from_results, per_rail, rails, capture, nproc, **run) -> int:
    """Bandwidth between every pair of hosts, in rounds of disjoint pairs; ranks the slowest links.

    Exit 1 when a host is singled out as slow (or data arrived wrong). See docs/PAIRS.md.
    """
    from commbench.core import units

    threshold = fraction(slow_below, "--slow-below", low_open=True)
    if rails is not None and not per_rail:
        raise BadInput("--rails names the rails of --per-rail: add --per-rail, or drop --rails")
    if from_results:
        if capture:
            raise BadInput("--capture keeps the packets of a run while it measures, and --from measures nothing: "
                           "drop --capture, or drop --from and run pairs under a launcher")
        if size is not None or mode is not None or hosts_only or per_rail:
            raise BadInput("--from ranks results already measured: drop --size, --mode, --hosts-only, --per-rail "
                           "and --rails")
        from commbench.analysis.pairs import faultstext, linkfaults
        from commbench.core.results import read_results

        frame = read_results(list(from_results))
        lines, verdicts = faultstext.report(frame, threshold)
        click.echo("\n".join(lines))
        for line in verdicts:
            print(f"commbench: {line}", file=sys.stderr)
        if verdicts:  # a slow host, or a failed host or link, is named
            return 1
        stuck = {run_id: v for run_id, v in linkfaults.faults_by_run(frame).items() if v.exit_code == 3}
        for run_id, v in stuck.items():
            print(f"commbench: run {run_id}: no verdict: {v.undecided}", file=sys.stderr)
        return 3 if stuck else 0
    nbytes = units.parse_size(size or "64M", "--size")
    from commbench.workloads import pairrails  # no torch

    named_rails = pairrails.parse(rails)
    from commbench.workloads.pairs import PairsPlan, PairsWorkload  # torch: after the text is checked

    fields = run_fields(nproc=nproc, workload="pairs", **run)
    if per_rail and fields["backend"] != "gloo":
        raise BadInput(f"--per-rail binds each pair's transfer to a rail through gloo, but this run uses "
                       f"{fields['backend']}: add --backend gloo")
    if hosts_only:
        from commbench.core import launch

        if launch.detect() is None:
            raise BadInput("--hosts-only pairs the hosts of a launcher's ranks, but no launcher started this run: "
                           "run under torchrun/srun/lab run, or drop --hosts-only")
    plan = PairsPlan(size_bytes=nbytes, mode=mode or "sendrecv", hosts_only=hosts_only, threshold=threshold,
                     per_rail=per_rail, rails=named_rails, capture=capture, **fields)
    return launch_workload(PairsWorkload(plan), nproc)


@click.command()
@click.option("--ds-config", "ds_config", default=None, type=click.Path(dir_okay=False),
              help="Your ds_config.json: its stage and bucket sizes (elements) shape the schedule.")
@model_shape_options
@click.option("--stages", default=None, help="ZeRO stages to run, e.g. 0,1,2,3 [default: all, or the config's].")
@click.option("--bucket-size", "bucket_size", default=None,
              help="reduce_bucket_size in ELEMENTS, or a list (e.g. 1e6,5e7,5e8) for a stage x bucket grid "
                   "[default: the config's, else 5e8].")
@click.option("-d", "--dtype", default=None, shell_complete=complete_dtypes,
              help="Communication dtype [default: the config's, else bfloat16].")
@click.option("--scale", default="auto", show_default=True,
              help="Multiply every message by this (auto: fit the model in 32 MiB on CPU, 1 on GPU).")
@wide_option
@click.option("--engine", type=click.Choice(["schedule", "deepspeed"]), default="schedule", show_default=True,
              help="schedule: commbench's collectives; deepspeed: the real DeepSpeed engine and its comms logger.")
@click.option("--steps", type=Number(int, 1, 10_000, example="2"), default=2, show_default=True,
              help="Timed optimizer steps (--engine deepspeed).")
@click.option("--validate", "validate_schedule", is_flag=True,
              help="With --engine deepspeed: compare the schedule's bytes per op type, and its gradient "
                   "reductions one by one, with the engine's.")
@click.option("--grad-accum", "grad_accum", default=None, metavar="G[,G...]",
              help="gradient_accumulation_steps, or a list (e.g. 1,4,8): every value measured "
                   "[default: the config's, else 1].")
@click.option("--overlap", type=click.Choice(["on", "off"]), default=None,
              help="overlap_comm: gradient reductions in flight while the next bucket fills "
                   "[default: the config's, else DeepSpeed's (on for stage 3 only)].")
@click.option("--curve", "curve", multiple=True, type=click.Path(), metavar="RESULTS",
              help="A sweep's results (file or folder; repeatable): predict each setting's communication "
                   "time per step at full scale from it.")
@env_option
@run_options
@launcher_checked
def zero(ds_config, model, layers, hidden, vocab, stages, bucket_size, dtype, scale, wide, engine, steps,
         validate_schedule, grad_accum, overlap, curve, env_axes, nproc, **run) -> int:
    """One training step's ZeRO communication schedule per stage, run with real collectives."""
    from commbench.core.vocab import get_dtype
    from commbench.integrations.deepspeed import config as dsconfig

    cfg = dsconfig.load(ds_config) if ds_config else None
    dt = get_dtype(dtype or (cfg.dtype_name if cfg else "bfloat16"))
    shape, name = model_shape(model, layers, hidden, vocab)
    buckets: ZeroKnobs = {}
    wanted = [0, 1, 2, 3]
    if cfg:
        buckets = ZeroKnobs(reduce_bucket_size=cfg.reduce_bucket_size,
                            prefetch_bucket_size=cfg.stage3_prefetch_bucket_size,
                            micro_batches=cfg.gradient_accumulation_steps or 1,
                            multi_rank_allreduce=cfg.use_multi_rank_bucket_allreduce,
                            overlap_comm=_zero_config_overlap(cfg))
        wanted = [cfg.zero_stage]
    buckets.update(_zero_axes(grad_accum, overlap, curve, engine))
    wanted = _zero_stages(stages) if stages is not None else wanted
    bucket_grid = _zero_buckets(bucket_size, engine)
    fields = run_fields(nproc=nproc, workload="zero", **run)
    factor = _zero_scale(scale, fields["backend"], shape, dt.itemsize)
    if validate_schedule and engine != "deepspeed":
        raise BadInput("--validate compares the schedule with the real engine: add --engine deepspeed")
    if env_axes and engine == "deepspeed":
        raise BadInput("--env measures each setting on a fresh process group, and the DeepSpeed engine keeps "
                       "the one it started with: run the engine once per setting (--label), or drop --engine")
    fields["axes"] = settings_axes(env_axes, fields["backend"], run.get("iface"))
    if engine == "deepspeed":
        fields["workload"] = "deepspeed"
        refuse_untaken(fields, "zero", fields["workload"], "runs the schedule in parallel groups, and the DeepSpeed "
                       "engine trains over every rank as one: drop it, or drop --engine deepspeed")
        from commbench.workloads.dsengine import SMALL_SHAPE, EnginePlan, EngineWorkload  # torch

        if layers is None:  # a preset shape does not train on a small machine: say what runs instead
            shape, name = (SMALL_SHAPE["layers"], SMALL_SHAPE["hidden"], SMALL_SHAPE["vocab"]), "small-2x64"
            print(f"commbench: note: --engine deepspeed trains a {shape[0]}-layer, hidden-{shape[1]} model here; "
                  "pass --layers/--hidden for another shape", file=sys.stderr)
        _engine_fits(shape, wanted, fields["backend"], nproc)
        plan = EnginePlan(stages=wanted, layers=shape[0], hidden=shape[1], vocab=shape[2], model=name,
                          dtype=dt.name, scale=1.0, ds_config=ds_config, steps=steps,
                          validate_schedule=validate_schedule, **buckets, **fields)
        return launch_workload(EngineWorkload(plan), nproc)
    from commbench.workloads.zero import ZeroPlan, ZeroWorkload  # torch: once the flags are checked

    schedule = ZeroPlan(stages=wanted, layers=shape[0], hidden=shape[1], vocab=shape[2], model=name, dtype=dt.name,
                        scale=factor, ds_config=ds_config, reduce_bucket_sizes=bucket_grid, wide=wide, **buckets,
                        **fields)
    return launch_workload(ZeroWorkload(schedule), nproc)


class ZeroKnobs(TypedDict, total=False):
    """The ZeroPlan fields that --ds-config, --grad-accum, --overlap and --curve set (absent: the plan's default)."""

    reduce_bucket_size: int
    prefetch_bucket_size: int
    micro_batches: int
    multi_rank_allreduce: bool
    overlap_comm: bool | None
    grad_accums: list[int]
    curve: list[str]


def _zero_config_overlap(cfg) -> bool | None:
    """overlap_comm where the config sets it; None (DeepSpeed's default per stage) where it does not."""
    zero = cfg.raw.get("zero_optimization") if isinstance(cfg.raw, dict) else None
    return cfg.overlap_comm if isinstance(zero, dict) and isinstance(zero.get("overlap_comm"), bool) else None


def _zero_axes(grad_accum: str | None, overlap: str | None, curve: tuple, engine: str) -> ZeroKnobs:
    """The plan fields of --grad-accum, --overlap and --curve, checked."""
    from commbench.workloads.zeroschedule import MAX_GRAD_ACCUM

    out: ZeroKnobs = {}
    if grad_accum is not None:
        try:
            values = [int(v) for v in grad_accum.split(",") if v.strip()]
        except ValueError:
            raise BadInput(f"--grad-accum {grad_accum[:40]!r} is not a list of whole numbers: e.g. 1,4,8") from None
        if not values or any(not 1 <= v <= MAX_GRAD_ACCUM for v in values):
            raise BadInput(f"--grad-accum {grad_accum[:40]!r}: gradient_accumulation_steps are whole numbers from 1 "
                           f"to {MAX_GRAD_ACCUM}, e.g. 1,4,8")
        out["grad_accums"] = list(dict.fromkeys(values))
    if engine == "deepspeed" and overlap is not None:
        raise BadInput("--overlap shapes the schedule; the engine takes overlap_comm from --ds-config: set it there, "
                       "or drop --engine deepspeed")
    if engine == "deepspeed" and curve:
        raise BadInput("--curve predicts the schedule's time; the engine is measured, not predicted: drop --curve "
                       "or --engine deepspeed")
    if overlap is not None:
        out["overlap_comm"] = overlap == "on"
    if curve:
        out["curve"] = list(curve)
    return out


def _zero_stages(stages: str) -> list[int]:
    try:
        wanted = [int(s) for s in stages.split(",") if s.strip()]
    except ValueError:
        raise BadInput(f"--stages {stages[:40]!r} is not a list of stages: e.g. 0,1,2,3") from None
    if not wanted or any(s not in (0, 1, 2, 3) for s in wanted):
        raise BadInput(f"--stages {stages[:40]!r}: ZeRO stages are 0, 1, 2 and 3")
    return list(dict.fromkeys(wanted))


def _zero_buckets(bucket_size: str | None, engine: str) -> list[int]:
    if bucket_size is None:
        return []
    if engine == "deepspeed":
        raise BadInput("--bucket-size shapes the schedule; the engine takes reduce_bucket_size from --ds-config: "
                       "set it there, or drop --engine deepspeed")
    from commbench.core import units

    return list(dict.fromkeys(units.parse_count_list(bucket_size, "--bucket-size", most=100)))


SCALE = Number(float, 0, 1, low_open=True, rule="must be in (0, 1]", example="0.01")


def _zero_scale(scale: str, backend: str, shape: Shape, itemsize: int) -> float:
    """--scale as a factor; auto: 1 on GPU, the model fitted in DEFAULT_CPU_STEP_BYTES on CPU."""
    from commbench.workloads.zeroschedule import DEFAULT_CPU_STEP_BYTES, param_count

    if scale == "auto":
        params_bytes = param_count(*shape) * itemsize
        return 1.0 if backend == "nccl" else min(1.0, DEFAULT_CPU_STEP_BYTES / params_bytes)
    return check_number(scale, "--scale", SCALE)


def _engine_fits(shape: Shape, stages: list[int], backend: str, nproc: int | None) -> None:
    """The real engine builds the whole model on every rank: refuse a shape that cannot fit here."""
    import torch

    from commbench.core import launch
    from commbench.harness.memory import check_need
    from commbench.workloads.zeroschedule import engine_bytes_per_rank, param_count

    env = launch.detect()
    ranks_here = env.local_world_size if env is not None else (nproc or 2)
    gpu = env.local_rank % max(1, torch.cuda.device_count()) if env is not None else 0
    device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", gpu)
    check_need(engine_bytes_per_rank(*shape, stages=stages), ranks_here, device,
               f"the DeepSpeed engine's {shape[0]}x{shape[1]} model ({param_count(*shape):.3g} parameters)",
               "pass a smaller --layers/--hidden/--vocab")
