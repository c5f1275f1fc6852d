"""The measuring commands (sweep, buckets, pairs, zero): parse and check the flags, build the
workload's plan, hand it to the launcher."""

from __future__ import annotations

import os
import sys

import click

from commbench.cli.launcher import launch_workload
from commbench.cli.options import fraction, positive_int, run_fields, run_options
from commbench.core.errors import BadInput

CPU_MAX_BYTES = "64M"
GPU_MAX_BYTES = "1G"


@click.command()
@click.option("--collective", "collective", default="all_reduce", show_default=True,
              help="all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, sendrecv, "
                   "a comma-separated list, or all. nccl-tests spellings work (allreduce, all-reduce).")
@click.option("-b", "--min-bytes", default="8", show_default=True, help="Smallest size (binary units: 8, 4K, 1M).")
@click.option("-e", "--max-bytes", default=None, help=f"Largest size [default: {CPU_MAX_BYTES} on CPU, {GPU_MAX_BYTES} on GPU].")
@click.option("-f", "--step-factor", type=float, default=2.0, show_default=True, help="Multiply the size by this.")
@click.option("-i", "--step-bytes", default=None, help="Add this many bytes per step (with -f 1).")
@click.option("--sizes", default=None, help="Explicit sizes instead of -b/-e/-f, e.g. 1K,64K,4M.")
@click.option("-d", "--dtype", default="float32", show_default=True, help="float32, float16, bfloat16, int8, ... or nccl-tests names (float, half).")
@click.option("-o", "--op", default="sum", show_default=True, help="Reduction: sum, prod, max, min, avg (nccl only).")
@click.option("-r", "--root", type=int, default=0, show_default=True, help="Root rank of broadcast and reduce.")
@click.option("--placement", type=click.Choice(["out", "in", "both"]), default="both", show_default=True,
              help="Out-of-place, in-place or both (each where torch offers it).")
@click.option("--mtu", "mtus", default=None,
              help="MTU axis (root): e.g. 1500,9000 set on --iface of every host in turn, restored at the end.")
@click.option("--nccl-debug", is_flag=True,
              help="NCCL_DEBUG=INFO into <out>/<run_id>.nccl-debug.<host>.<pid>.log; the transport column "
                   "records what NCCL used (NET/IB, NET/Socket, P2P/IPC, SHM).")
@run_options
def sweep(collective, min_bytes, max_bytes, step_factor, step_bytes, sizes, dtype, op, root, placement, mtus,
          nccl_debug, nproc, **run) -> int:
    """Measure collectives over a range of message sizes (the nccl-tests grid)."""
    from commbench.core import vocab
    from commbench.harness import plan as planning
    from commbench.core import units
    from commbench.workloads.sweep import SweepWorkload

    entries = vocab.resolve(collective)
    dt = vocab.get_dtype(dtype)
    op_name = vocab.get_op(op)
    fields = run_fields(nproc=nproc, workload="sweep", **run)

    if placement != "both":
        unable = [c for c in entries if not c.supports(placement)]
        if unable and collective.strip().lower() != "all":
            where = "in place" if unable[0].placements == ("in",) else "out of place"
            raise BadInput(f"torch offers {unable[0].name} {where} only: use --placement "
                           f"{unable[0].placements[0]} or both")
        entries = [c for c in entries if c.supports(placement)]

    if sizes is not None:
        grid = units.parse_size_list(sizes)
    else:
        lo = units.parse_size(min_bytes, "--min-bytes")
        hi = units.parse_size(max_bytes or (GPU_MAX_BYTES if fields["backend"] == "nccl" else CPU_MAX_BYTES),
                              "--max-bytes")
        step = units.parse_size(step_bytes, "--step-bytes") if step_bytes else None
        grid = planning.size_grid(lo, hi, step_factor, step)

    mtu_axis = _mtu_axis(mtus, run.get("iface"))
    plan = planning.SweepPlan(collectives=[c.name for c in entries], sizes=grid, dtype=dt.name, op=op_name,
                              root=root, placement=placement, mtus=mtu_axis, iface=run.get("iface"), **fields)
    vocab.check_backend_support(fields["backend"], dt, op_name if any(c.reduces for c in entries) else None)
    if nccl_debug:
        from commbench.net.ncclinfo import enable_debug_file
        enable_debug_file(fields["out"], fields["run_id"], fields["backend"])
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
    if os.geteuid() != 0:
        raise BadInput("--mtu sets the MTU of --iface on every host and needs root: run as root, or drop --mtu")
    from commbench.net import netctl

    netctl.get_mtu(iface)  # the interface must exist here
    return mtus


@click.command()
@click.option("--params", default=None, help="Model parameters whose gradients are reduced, e.g. 125M, 1.3B.")
@click.option("--grad-bytes", default=None, help="Or gradient bytes per step directly, e.g. 2G [default: 64M].")
@click.option("-d", "--dtype", default="bfloat16", show_default=True, help="Gradient dtype (bf16, fp16, float32).")
@click.option("--bucket-size", default="1e5,1e6,1e7,5e7,5e8", show_default=True,
              help="Bucket sizes in ELEMENTS, as DeepSpeed's reduce_bucket_size counts them.")
@click.option("--op", "op", default="all_reduce", show_default=True,
              help="all_reduce (ZeRO 1/2, DDP) or reduce_scatter (ZeRO 3) per bucket.")
@click.option("--overlap", type=int, default=1, show_default=True,
              help="Buckets in flight at once (async collectives, each waited on).")
@run_options
def buckets(params, grad_bytes, dtype, bucket_size, op, overlap, nproc, **run) -> int:
    """Reduce one step's gradients in buckets, per bucket size, as DeepSpeed does."""
    from commbench.core import vocab
    from commbench.core import units
    from commbench.workloads.buckets import OPS, BucketPlan, BucketWorkload

    dt = vocab.get_dtype(dtype)
    if params is not None and grad_bytes is not None:
        raise BadInput("--params and --grad-bytes both set the gradient size: pass one of them")
    n_params = units.parse_count(params, "--params") if params is not None else None
    size = n_params * dt.itemsize if n_params else units.parse_size(grad_bytes or "64M", "--grad-bytes")
    sizes = [units.parse_count(b, "--bucket-size") for b in bucket_size.split(",") if b.strip()]
    if not sizes:
        raise BadInput("--bucket-size is empty: give element counts, e.g. 1e6,5e7,5e8")
    entry = vocab.resolve(op)
    if len(entry) != 1 or entry[0].name not in OPS:
        raise BadInput(f"--op {op} is not a gradient reduction: use all_reduce or reduce_scatter")
    positive_int(overlap, "--overlap")
    fields = run_fields(nproc=nproc, workload="buckets", **run)
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
@run_options
def pairs(size, mode, hosts_only, slow_below, from_results, nproc, **run) -> int:
    """Bandwidth between every pair of hosts, in rounds of disjoint pairs; ranks the slowest links.

    Exit 1 when a host is singled out as slow (or data arrived wrong). See docs/PAIRS.md.
    """
    from commbench.core import units

    threshold = fraction(slow_below, "--slow-below", low_open=True)
    if from_results:
        if size is not None or mode is not None or hosts_only:
            raise BadInput("--from ranks results already measured: drop --size, --mode and --hosts-only")
        from commbench.analysis import linkfaults
        from commbench.core.results import read_results

        frame = read_results(list(from_results))
        lines, verdicts = linkfaults.report(frame, threshold)
        click.echo("\n".join(lines))
        for line in verdicts:
            print(f"commbench: {line}", file=sys.stderr)
        if verdicts:  # a slow host, or a failed host or link, is named
            return 1
        stuck = {run_id: v for run_id, v in linkfaults.faults_by_run(frame).items() if v.exit_code == 3}
        for run_id, v in stuck.items():
            print(f"commbench: run {run_id}: no verdict: {v.undecided}", file=sys.stderr)
        return 3 if stuck else 0
    from commbench.workloads.pairs import PairsPlan, PairsWorkload

    nbytes = units.parse_size(size or "64M", "--size")
    fields = run_fields(nproc=nproc, workload="pairs", **run)
    if hosts_only:
        from commbench.core import launch

        if launch.detect() is None:
            raise BadInput("--hosts-only pairs the hosts of a launcher's ranks, but no launcher started this run: "
                           "run under torchrun/srun/lab run, or drop --hosts-only")
    plan = PairsPlan(size_bytes=nbytes, mode=mode or "sendrecv", hosts_only=hosts_only, threshold=threshold,
                     **fields)
    return launch_workload(PairsWorkload(plan), nproc)


@click.command()
@click.option("--ds-config", "ds_config", default=None, type=click.Path(dir_okay=False),
              help="Your ds_config.json: its stage and bucket sizes (elements) shape the schedule.")
@click.option("--model", default="1.3b", show_default=True, help="Model shape: gpt2-125m, 1.3b, 7b.")
@click.option("--layers", type=int, default=None, help="Custom shape: transformer layers (with --hidden).")
@click.option("--hidden", type=int, default=None, help="Custom shape: hidden size.")
@click.option("--vocab", type=int, default=None, help="Custom shape: vocabulary [default: 50257].")
@click.option("--stages", default=None, help="ZeRO stages to run, e.g. 0,1,2,3 [default: all, or the config's].")
@click.option("--bucket-size", "bucket_size", default=None,
              help="reduce_bucket_size in ELEMENTS, or a list (e.g. 1e6,5e7,5e8) for a stage x bucket grid "
                   "[default: the config's, else 5e8].")
@click.option("-d", "--dtype", default="bfloat16", show_default=True, help="Communication dtype.")
@click.option("--scale", default="auto", show_default=True,
              help="Multiply every message by this (auto: fit the model in 32 MiB on CPU, 1 on GPU).")
@click.option("--engine", type=click.Choice(["schedule", "deepspeed"]), default="schedule", show_default=True,
              help="schedule: commbench's collectives; deepspeed: the real DeepSpeed engine and its comms logger.")
@click.option("--steps", type=int, default=2, show_default=True, help="Timed optimizer steps (--engine deepspeed).")
@click.option("--validate", "validate_schedule", is_flag=True,
              help="With --engine deepspeed: compare the schedule's bytes per op type with the engine's.")
@run_options
def zero(ds_config, model, layers, hidden, vocab, stages, bucket_size, dtype, scale, engine, steps,
         validate_schedule, nproc, **run) -> int:
    """One training step's ZeRO communication schedule per stage, run with real collectives."""
    from commbench.core import units
    from commbench.core.vocab import get_dtype
    from commbench.workloads.zero import DEFAULT_CPU_STEP_BYTES, MODELS, ZeroPlan, ZeroWorkload, module_sizes

    dt = get_dtype(dtype)
    if (layers is None) != (hidden is None):
        raise BadInput("--layers and --hidden go together: pass both for a custom shape, or --model")
    if layers is not None:
        positive_int(layers, "--layers")
        positive_int(hidden, "--hidden")
        shape, name = (layers, hidden, vocab or 50257), f"custom-{layers}x{hidden}"
    else:
        if model.lower() not in MODELS:
            raise BadInput(f"unknown --model {model!r}: use one of {', '.join(MODELS)}, or --layers/--hidden")
        shape, name = MODELS[model.lower()], model.lower()
        if vocab is not None:
            shape = (shape[0], shape[1], positive_int(vocab, "--vocab"))
    buckets = {}
    wanted = [0, 1, 2, 3]
    if ds_config:
        from commbench.integrations.deepspeed import config as dsconfig

        cfg = dsconfig.load(ds_config)
        buckets = dict(reduce_bucket_size=cfg.reduce_bucket_size, prefetch_bucket_size=cfg.stage3_prefetch_bucket_size,
                       micro_batches=cfg.gradient_accumulation_steps or 1,
                       multi_rank_allreduce=cfg.use_multi_rank_bucket_allreduce)
        wanted = [cfg.zero_stage]
    if stages is not None:
        try:
            wanted = [int(s) for s in stages.split(",") if s.strip()]
        except ValueError:
            raise BadInput(f"--stages {stages!r} is not a list of stages: e.g. 0,1,2,3") from None
        if not wanted or any(s not in (0, 1, 2, 3) for s in wanted):
            raise BadInput(f"--stages {stages!r}: ZeRO stages are 0, 1, 2 and 3")
    bucket_grid = []
    if bucket_size is not None:
        if engine == "deepspeed":
            raise BadInput("--bucket-size shapes the schedule; the engine takes reduce_bucket_size from --ds-config: "
                           "set it there, or drop --engine deepspeed")
        bucket_grid = [units.parse_count(b, "--bucket-size") for b in bucket_size.split(",") if b.strip()]
        if not bucket_grid:
            raise BadInput("--bucket-size is empty: give element counts, e.g. 1e6,5e7,5e8")
        bucket_grid = list(dict.fromkeys(bucket_grid))
    fields = run_fields(nproc=nproc, workload="zero", **run)
    params_bytes = sum(module_sizes(*shape)) * dt.itemsize
    if scale == "auto":
        factor = 1.0 if fields["backend"] == "nccl" else min(1.0, DEFAULT_CPU_STEP_BYTES / params_bytes)
    else:
        try:
            factor = float(scale)
        except ValueError:
            raise BadInput(f"--scale {scale!r} is not a number: e.g. 0.01, or auto") from None
        if not 0 < factor <= 1:
            raise BadInput(f"--scale {scale} must be in (0, 1]: it shrinks every message")
    if validate_schedule and engine != "deepspeed":
        raise BadInput("--validate compares the schedule with the real engine: add --engine deepspeed")
    if engine == "deepspeed":
        from commbench.workloads.engine import SMALL_SHAPE, EnginePlan, EngineWorkload

        positive_int(steps, "--steps")
        if layers is None:  # a preset shape does not train on a small machine: say what runs instead
            shape, name = (SMALL_SHAPE["layers"], SMALL_SHAPE["hidden"], SMALL_SHAPE["vocab"]), "small-2x64"
            print(f"commbench: note: --engine deepspeed trains a {shape[0]}-layer, hidden-{shape[1]} model here; "
                  "pass --layers/--hidden for another shape", file=sys.stderr)
        fields["workload"] = "deepspeed"
        plan = EnginePlan(stages=wanted, layers=shape[0], hidden=shape[1], vocab=shape[2], model=name,
                          dtype=dt.name, scale=1.0, ds_config=ds_config, steps=steps,
                          validate_schedule=validate_schedule, **buckets, **fields)
        return launch_workload(EngineWorkload(plan), nproc)
    plan = ZeroPlan(stages=wanted, layers=shape[0], hidden=shape[1], vocab=shape[2], model=name, dtype=dt.name,
                    scale=factor, ds_config=ds_config, reduce_bucket_sizes=bucket_grid, **buckets, **fields)
    return launch_workload(ZeroWorkload(plan), nproc)
