"""The command line: parses and validates, then hands over to the modules that do the work."""

from __future__ import annotations

import functools
import os
import sys

import click

from commbench import __version__
from commbench.core.errors import EXIT_SIGINT, EXIT_USAGE, BadInput, CommbenchError

CPU_MAX_BYTES = "64M"
GPU_MAX_BYTES = "1G"


def _positive_int(value: int, flag: str) -> int:
    if value is not None and value < 1:
        raise BadInput(f"{flag} {value} must be at least 1")
    return value


def _positive_float(value: float, flag: str) -> float:
    if value is not None and not value > 0:
        raise BadInput(f"{flag} {value} must be more than 0")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="commbench")
def cli() -> None:
    """Communication benchmarks for distributed deep learning (NCCL, gloo)."""


def run_options(command):
    """The options every measuring command shares (iteration policy, launch, output)."""
    options = [
        click.option("-w", "--warmup", type=int, default=5, show_default=True, help="Warm-up iterations per point."),
        click.option("-n", "--iters", type=int, default=None, help="Timed iterations per point [default: adaptive]."),
        click.option("--time-budget", type=float, default=0.05, show_default=True,
                     help="Most seconds of timed iterations per point (adaptive)."),
        click.option("--precision", type=float, default=0.03, show_default=True,
                     help="Adaptive: stop a point once its median is known to this fraction (95%% CI "
                          "half-width); 0 fills --time-budget."),
        click.option("--min-iters", type=int, default=10, show_default=True),
        click.option("--max-iters", type=int, default=2000, show_default=True),
        click.option("-R", "--repetitions", type=int, default=1, show_default=True,
                     help="Run the whole grid this many times, interleaved."),
        click.option("--check/--no-check", default=True, show_default=True,
                     help="Check every output, like nccl-tests' #wrong."),
        click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
                     help="auto: nccl when CUDA GPUs are visible, else gloo."),
        click.option("--nproc", type=int, default=None,
                     help="Local ranks to spawn when no launcher started us [default: visible GPUs, or 2]."),
        click.option("--iface", default=None,
                     help="Network interface for the traffic (sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME)."),
        click.option("--timeout", type=float, default=300.0, show_default=True,
                     help="Seconds any collective may take before the run fails."),
        click.option("--out", default="results", show_default=True,
                     help="Folder for <run_id>.parquet, or a .parquet file name."),
        click.option("--label", default="", help="Free text stored with every row (e.g. mtu9000-after)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _run_fields(warmup, iters, time_budget, min_iters, max_iters, repetitions, check, backend, nproc, iface,
                timeout, out, label, workload: str, precision: float = 0.03) -> dict:
    """Validate the shared options; return the RunOptions fields (backend resolved)."""
    from commbench.core import results
    from commbench.harness.runner import choose_backend

    if warmup < 0:
        raise BadInput(f"--warmup {warmup} must be 0 or more")
    for value, flag in ((min_iters, "--min-iters"), (max_iters, "--max-iters"), (repetitions, "--repetitions")):
        _positive_int(value, flag)
    _positive_int(iters, "--iters")
    _positive_float(time_budget, "--time-budget")
    if not 0 <= precision < 1:
        raise BadInput(f"--precision {precision} must be 0 (off) or a fraction below 1, e.g. 0.03 for 3%")
    _positive_float(timeout, "--timeout")
    if min_iters > max_iters:
        raise BadInput(f"--min-iters {min_iters} is larger than --max-iters {max_iters}: lower one of them")
    if nproc is not None and nproc < 1:
        raise BadInput(f"--nproc {nproc} must be at least 1: e.g. --nproc 2")
    if iface:
        os.environ["GLOO_SOCKET_IFNAME"] = iface
        os.environ["NCCL_SOCKET_IFNAME"] = iface
    return dict(warmup=warmup, iters=iters, time_budget=time_budget, precision=precision, min_iters=min_iters,
                max_iters=max_iters,
                repetitions=repetitions, check=check, timeout=timeout, backend=choose_backend(backend),
                label=label, out=out, run_id=results.make_run_id(), workload=workload)


def _warn_socket_ifname(env) -> None:
    """Before running: one stderr line per NCCL/GLOO_SOCKET_IFNAME that matches no interface here
    (rank 0 under a launcher, or the local parent)."""
    if env is not None and env.rank != 0:
        return
    from commbench.net.netinfo import socket_ifname_warnings

    for line in socket_ifname_warnings():
        print(f"commbench: warning: {line} (see `commbench doctor`)", file=sys.stderr)


def _launch(workload, nproc: int | None) -> int:
    """Run `workload` on the ranks a launcher started, or spawn `nproc` local ranks."""
    import torch

    from commbench.core import launch
    from commbench.core import results
    from commbench.harness.runner import rank_main

    env = launch.detect()
    _warn_socket_ifname(env)
    if env is not None:
        if nproc is not None:
            raise BadInput(f"--nproc is for local runs, but {env.launcher} started {env.world_size} ranks: "
                           "drop --nproc or set the rank count in the launcher")
        workload.validate(env.world_size)
        return launch.run_as_rank(functools.partial(rank_main, workload), env)

    backend = workload.plan.backend
    if nproc is None:
        nproc = torch.cuda.device_count() if backend == "nccl" else 2
    workload.validate(nproc)
    device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", 0)
    workload.prepare(backend, device, launch.RankEnv("local", 0, nproc, 0, nproc, "127.0.0.1", 0))
    results.check_writable(results.resolve_out(workload.plan.out, workload.plan.run_id))
    return launch.spawn_local(nproc, functools.partial(rank_main, workload))


@cli.command()
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
    fields = _run_fields(nproc=nproc, workload="sweep", **run)

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
    return _launch(SweepWorkload(plan), nproc)


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


@cli.command()
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
    _positive_int(overlap, "--overlap")
    fields = _run_fields(nproc=nproc, workload="buckets", **run)
    plan = BucketPlan(grad_bytes=size, bucket_elems=sizes, dtype=dt.name, op=entry[0].name, overlap=overlap,
                      params=n_params, **fields)
    return _launch(BucketWorkload(plan), nproc)


@cli.command()
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
    from commbench.analysis import linkrank
    from commbench.core import units

    threshold = _fraction(slow_below, "--slow-below", low_open=True)
    if from_results:
        if size is not None or mode is not None or hosts_only:
            raise BadInput("--from ranks results already measured: drop --size, --mode and --hosts-only")
        from commbench.core.results import read_results

        lines, verdicts = linkrank.report(read_results(list(from_results)), threshold)
        click.echo("\n".join(lines))
        for line in verdicts:
            print(f"commbench: {line}", file=sys.stderr)
        return 1 if verdicts else 0
    from commbench.workloads.pairs import PairsPlan, PairsWorkload

    nbytes = units.parse_size(size or "64M", "--size")
    fields = _run_fields(nproc=nproc, workload="pairs", **run)
    if hosts_only:
        from commbench.core import launch

        if launch.detect() is None:
            raise BadInput("--hosts-only pairs the hosts of a launcher's ranks, but no launcher started this run: "
                           "run under torchrun/srun/lab run, or drop --hosts-only")
    plan = PairsPlan(size_bytes=nbytes, mode=mode or "sendrecv", hosts_only=hosts_only, threshold=threshold,
                     **fields)
    return _launch(PairsWorkload(plan), nproc)


@cli.command()
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
        _positive_int(layers, "--layers")
        _positive_int(hidden, "--hidden")
        shape, name = (layers, hidden, vocab or 50257), f"custom-{layers}x{hidden}"
    else:
        if model.lower() not in MODELS:
            raise BadInput(f"unknown --model {model!r}: use one of {', '.join(MODELS)}, or --layers/--hidden")
        shape, name = MODELS[model.lower()], model.lower()
        if vocab is not None:
            shape = (shape[0], shape[1], _positive_int(vocab, "--vocab"))
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
    fields = _run_fields(nproc=nproc, workload="zero", **run)
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

        _positive_int(steps, "--steps")
        if layers is None:  # a preset shape does not train on a small machine: say what runs instead
            shape, name = (SMALL_SHAPE["layers"], SMALL_SHAPE["hidden"], SMALL_SHAPE["vocab"]), "small-2x64"
            print(f"commbench: note: --engine deepspeed trains a {shape[0]}-layer, hidden-{shape[1]} model here; "
                  "pass --layers/--hidden for another shape", file=sys.stderr)
        fields["workload"] = "deepspeed"
        plan = EnginePlan(stages=wanted, layers=shape[0], hidden=shape[1], vocab=shape[2], model=name,
                          dtype=dt.name, scale=1.0, ds_config=ds_config, steps=steps,
                          validate_schedule=validate_schedule, **buckets, **fields)
        return _launch(EngineWorkload(plan), nproc)
    plan = ZeroPlan(stages=wanted, layers=shape[0], hidden=shape[1], vocab=shape[2], model=name, dtype=dt.name,
                    scale=factor, ds_config=ds_config, reduce_bucket_sizes=bucket_grid, **buckets, **fields)
    return _launch(ZeroWorkload(plan), nproc)


def _fraction(text: str, flag: str, low_open: bool = False) -> float:
    """'5%' or '0.05' -> 0.05; anything else is one line of bad input."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInput(f"{flag} {text!r} is not a fraction: write e.g. 5% or 0.05") from None
    if not raw.endswith("%") and value >= 1:
        raise BadInput(f"{flag} {text} is not a fraction below 1: write {raw}% or {value / 100:g}")
    ok = (0 < value < 1) if low_open else (0 <= value < 1)
    if not ok:  # NaN fails too
        bound = "more than 0" if low_open else "0 or more"
        raise BadInput(f"{flag} {text} must be {bound} and below 100%: e.g. 5% or 0.05")
    return value


@cli.command()
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option("--threshold", default="3%", show_default=True,
              help="Minimum effect for bandwidth-bound points (5% or 0.05).")
@click.option("--latency-threshold", default="10%", show_default=True,
              help="Minimum effect for the other (latency-bound) points.")
@click.option("--alpha", default="0.05", show_default=True, help="Significance level, Holm-corrected over points.")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True)
@click.option("--allow-within-run", is_flag=True,
              help="Let per-iteration samples decide points with too few repetitions (they are not independent).")
@click.option("--out", default=None, help="Write the report to this file instead of stdout.")
@click.option("--plot", "plot_path", default=None, help="Also draw the comparison into this image file.")
def compare(before, after, threshold, latency_threshold, alpha, fmt, allow_within_run, out, plot_path) -> int:
    """Compare two sets of results (files or folders): a verdict per point and overall.

    Exit 0: no regression; 1: a regression; 3: inconclusive or nothing comparable. See docs/COMPARE.md.
    """
    from commbench.analysis import compare as comparing
    from commbench.core import results

    thr = _fraction(threshold, "--threshold")
    lat = _fraction(latency_threshold, "--latency-threshold")
    a = _fraction(alpha, "--alpha", low_open=True)
    if out is not None and (os.path.isdir(out) or out.lower().endswith(".parquet")):
        raise BadInput(f"--out {out} is a folder or a results file: pass a report file name, e.g. compare.md")
    # Read only what the comparison (and its figure) use: per-rank lists and plan stay on disk.
    read: dict = {"columns": comparing.READ_COLUMNS}
    if plot_path is not None:
        try:
            from commbench.analysis.plot import UNUSED_COLUMNS
        except ImportError:
            raise BadInput("--plot needs commbench.analysis.plot") from None
        read = {"skip": [c for c in UNUSED_COLUMNS if c not in comparing.READ_COLUMNS]}
    before_df = results.read_results([before], **read)
    after_df = results.read_results([after], **read)
    comparison = comparing.compare_frames(before_df, after_df, threshold=thr, latency_threshold=lat, alpha=a,
                                          allow_within_run=allow_within_run)
    if plot_path is not None:
        try:
            from commbench.analysis.plot import plot_comparison
        except ImportError:
            raise BadInput("--plot needs commbench.analysis.plot") from None
        plot_comparison(before_df, after_df, plot_path)
    for line in comparison.warnings:
        print(f"commbench: warning: {line}", file=sys.stderr)
    _emit(_render(fmt, comparison, comparing.render_markdown, comparing.render_table), out)
    if out is not None:
        print(f"{comparison.verdict}: report written to {out}")
    return comparison.exit_code()


def _render(fmt: str, result, markdown, table) -> str:
    """A verdict object (compare's, gate's) as json (its to_dict), markdown or a table."""
    if fmt == "json":
        import json

        return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"
    return markdown(result) if fmt == "markdown" else table(result)


def _emit(text: str, out: str | None) -> None:
    """To stdout, or to the --out file."""
    if out is None:
        sys.stdout.write(text)
        return
    try:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise BadInput(f"cannot write --out {out}: {exc.strerror or exc}") from None


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--expect", "expect", default=None, metavar="FILE.yaml", help="Reference bands to judge RESULTS against.")
@click.option("--suggest", is_flag=True, help="Write starting bands from RESULTS (a good run) instead of judging.")
@click.option("--lower", default=None, help="With --suggest: lower tolerance (5% or 0.05) [default: 5%, widened to "
              "3x the run's own spread].")
@click.option("--upper", default=None, help="With --suggest: upper tolerance (10% or 0.1) [default: none].")
@click.option("--min-size", default=None, help="With --suggest: smallest size to band [default: 1M].")
@click.option("--system", default=None, help="With --suggest: the system's name in the file [default: the hosts].")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True)
@click.option("--out", default=None, help="Write the report (or, with --suggest, the bands) to this file.")
def gate(results, expect, suggest, lower, upper, min_size, system, fmt, out) -> int:
    """Judge RESULTS against reference bands (--expect FILE.yaml), or suggest bands (--suggest).

    Exit 0: every entry within its band; 1: an entry missed (named in the summary); 2: bad input.
    See docs/GATE.md.
    """
    from commbench.analysis import gate as gating
    from commbench.core import results as store
    from commbench.core.units import parse_size

    if suggest == (expect is not None):
        raise BadInput("gate needs exactly one of --expect FILE.yaml (judge a run) and --suggest (write bands)")
    if out is not None and (os.path.isdir(out) or out.lower().endswith(".parquet")):
        raise BadInput(f"--out {out} is a folder or a results file: pass a file name, e.g. bands.yaml")
    if suggest:
        if fmt != "table":
            raise BadInput("--format is for judging; --suggest always writes YAML: remove --format")
        low = gating.DEFAULT_LOWER if lower is None else _fraction(lower, "--lower")
        up = None if upper is None else _fraction(upper, "--upper")
        if out is not None and os.path.exists(out):  # before reading anything: never overwrite
            raise BadInput(f"{out} already exists: gate --suggest never overwrites a file; pass another --out "
                           "or remove it first")
        smallest = gating.DEFAULT_MIN_SIZE if min_size is None else parse_size(min_size, "--min-size")
        made = gating.suggest(store.read_results(list(results)), sources=results, lower=low, upper=up,
                              min_size=smallest, system=system)
        for note in made.notes:
            print(f"commbench: note: {note}", file=sys.stderr)
        if out is None:
            sys.stdout.write(made.text)
        else:
            gating.write_new(out, made.text)
            print(f"{made.entries} bands written to {out}")
        return 0
    stray = [flag for flag, v in (("--lower", lower), ("--upper", upper), ("--min-size", min_size),
                                         ("--system", system)) if v is not None]
    if stray:
        raise BadInput(f"{stray[0]} is for --suggest; tolerances of --expect live in the bands file")
    bands = gating.load_bands(expect)
    report = gating.judge(bands, store.read_results(list(results)))
    _emit(_render(fmt, report, gating.render_markdown, gating.render_table), out)
    if out is not None or fmt != "table":
        print(report.summary(), file=sys.stderr)  # the verdict stays visible in a CI log
    return report.exit_code()


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--metric", type=click.Choice(["busbw", "algbw", "time"]), default="busbw", show_default=True,
              help="What the top panel shows against message size.")
@click.option("--out", default=None, help="Image file (.png or .svg) [default: next to the first result, as <name>.png].")
@click.option("--line-rate", default=None, help="Draw the link's rate as a reference line, e.g. 400Gbps, 100000Mbps, 50GB/s.")
def plot(results, metric, out, line_rate) -> int:
    """Draw bandwidth (or time) against message size, one line per collective, dtype, placement and run;
    `zero --bucket-size` grids and `pairs` runs as heat maps (beside the curves when both are there)."""
    from commbench.analysis import plot as plotting

    written = plotting.plot_results(list(results), metric=metric, out=out, line_rate=line_rate)
    print(f"plot written to {written[0]}" + (f" (also: {', '.join(map(str, written[1:]))})" if written[1:] else ""))
    return 0


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--baseline", multiple=True, type=click.Path(),
              help="Results to compare against (before); repeat for several files.")
@click.option("--out", default=None, help="Report file [default: next to the first result, as <name>.html or .md].")
@click.option("--format", "fmt", type=click.Choice(["html", "markdown"]), default=None,
              help="html (one self-contained page) or markdown (figure saved as a PNG beside it) "
                   "[default: from --out's suffix, else html].")
@click.option("--line-rate", default=None, help="Reference line on the curves, e.g. 400Gbps or 50GB/s.")
def report(results, baseline, out, fmt, line_rate) -> int:
    """Write one report of results: curves, peak busbw, run metadata, and the comparison with --baseline."""
    from commbench.analysis import report as reporting

    written = reporting.write_report(list(results), list(baseline) or None, out=out, fmt=fmt, line_rate=line_rate)
    print(f"report written to {written[0]}" + (f" (figures: {', '.join(map(str, written[1:]))})" if written[1:] else ""))
    return 0


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (facts per host, findings, exit code).")
@click.option("--root", "roots", multiple=True, metavar="DIR",
              help="Check a recorded sysfs tree instead of this host (repeat for several hosts).")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for the other hosts under a launcher.")
def doctor(as_json, roots, timeout) -> int:
    """Check the network setup for NCCL/gloo: interfaces, RDMA ports, GPUs, NCCL_* settings, across hosts."""
    from commbench.net import doctor as doctoring

    _positive_float(timeout, "--timeout")
    return doctoring.run(as_json=as_json, roots=list(roots), timeout=timeout)


def _register_subcommands() -> None:
    from commbench.cli.lab import lab
    from commbench.cli.nccl_tests import nccl_tests

    cli.add_command(lab)
    cli.add_command(nccl_tests)


_register_subcommands()


def _fail(message: str, code: int) -> None:
    print(f"commbench: {message}", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="commbench", standalone_mode=False)
    except click.exceptions.NoSuchOption as exc:
        hint = f" (did you mean {exc.possibilities[0]}?)" if exc.possibilities else ""
        _fail(f"no such option {exc.option_name}{hint}: see '{_help(exc)}'", EXIT_USAGE)
    except click.UsageError as exc:
        _fail(f"{exc.format_message().rstrip('.')}: see '{_help(exc)}'", EXIT_USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.exit(EXIT_SIGINT)
    except KeyboardInterrupt:
        sys.exit(EXIT_SIGINT)
    except CommbenchError as exc:
        _fail(str(exc), exc.exit_code)
    sys.exit(code or 0)


def _sub(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    return ctx.command_path.removeprefix("commbench").strip() or "" if ctx else ""


def _help(exc: click.ClickException) -> str:
    """'commbench lab up --help', or 'commbench --help' for the program itself."""
    return " ".join(filter(None, ("commbench", _sub(exc), "--help")))


if __name__ == "__main__":
    main()
