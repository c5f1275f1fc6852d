"""The command line: parses and validates, then hands over to the modules that do the work."""

from __future__ import annotations

import functools
import os
import sys

import click

from commbench import __version__
from commbench.errors import EXIT_SIGINT, EXIT_USAGE, BadInput, CommbenchError

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
@click.option("-w", "--warmup", type=int, default=5, show_default=True, help="Warm-up iterations per point.")
@click.option("-n", "--iters", type=int, default=None, help="Timed iterations per point [default: adaptive].")
@click.option("--time-budget", type=float, default=0.2, show_default=True, help="Seconds of timed iterations per point (adaptive).")
@click.option("--min-iters", type=int, default=10, show_default=True)
@click.option("--max-iters", type=int, default=2000, show_default=True)
@click.option("-R", "--repetitions", type=int, default=1, show_default=True, help="Run the whole grid this many times, interleaved.")
@click.option("--check/--no-check", default=True, show_default=True, help="Check every output, like nccl-tests' #wrong.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: nccl when CUDA GPUs are visible, else gloo.")
@click.option("--nproc", type=int, default=None, help="Local ranks to spawn when no launcher started us [default: visible GPUs, or 2].")
@click.option("--iface", default=None, help="Network interface for the traffic (sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds any collective may take before the run fails.")
@click.option("--out", default="results", show_default=True, help="Folder for <run_id>.parquet, or a .parquet file name.")
@click.option("--label", default="", help="Free text stored with every row (e.g. mtu9000-after).")
def sweep(collective, min_bytes, max_bytes, step_factor, step_bytes, sizes, dtype, op, root, placement, warmup,
          iters, time_budget, min_iters, max_iters, repetitions, check, backend, nproc, iface, timeout, out,
          label) -> int:
    """Measure collectives over a range of message sizes (the nccl-tests grid)."""
    from commbench import collectives, dtypes, launch, plan as planning, units

    entries = collectives.resolve(collective)
    dt = dtypes.get_dtype(dtype)
    op_name = dtypes.get_op(op)
    if warmup < 0:
        raise BadInput(f"--warmup {warmup} must be 0 or more")
    for value, flag in ((min_iters, "--min-iters"), (max_iters, "--max-iters"), (repetitions, "--repetitions")):
        _positive_int(value, flag)
    _positive_int(iters, "--iters")
    _positive_float(time_budget, "--time-budget")
    _positive_float(timeout, "--timeout")
    if min_iters > max_iters:
        raise BadInput(f"--min-iters {min_iters} is larger than --max-iters {max_iters}: lower one of them")
    if nproc is not None and nproc < 1:
        raise BadInput(f"--nproc {nproc} must be at least 1: e.g. --nproc 2")

    if placement != "both":
        unable = [c for c in entries if not c.supports(placement)]
        if unable and collective.strip().lower() != "all":
            where = "in place" if unable[0].placements == ("in",) else "out of place"
            raise BadInput(f"torch offers {unable[0].name} {where} only: use --placement "
                           f"{unable[0].placements[0]} or both")
        entries = [c for c in entries if c.supports(placement)]

    env = launch.detect()
    from commbench.runner import choose_backend

    chosen_backend = choose_backend(backend)
    if sizes is not None:
        grid = units.parse_size_list(sizes)
    else:
        lo = units.parse_size(min_bytes, "--min-bytes")
        hi = units.parse_size(max_bytes or (GPU_MAX_BYTES if chosen_backend == "nccl" else CPU_MAX_BYTES), "--max-bytes")
        step = units.parse_size(step_bytes, "--step-bytes") if step_bytes else None
        grid = planning.size_grid(lo, hi, step_factor, step)

    plan = planning.SweepPlan(
        collectives=[c.name for c in entries], sizes=grid, dtype=dt.name, op=op_name, root=root,
        placement=placement, warmup=warmup, iters=iters, time_budget=time_budget, min_iters=min_iters,
        max_iters=max_iters, repetitions=repetitions, check=check, timeout=timeout, backend=chosen_backend,
        label=label, out=out, run_id=planning.make_run_id())
    dtypes.check_backend_support(chosen_backend, dt, op_name if any(c.reduces for c in entries) else None)
    if iface:
        os.environ["GLOO_SOCKET_IFNAME"] = iface
        os.environ["NCCL_SOCKET_IFNAME"] = iface

    from commbench.runner import rank_main

    if env is not None:
        if nproc is not None:
            raise BadInput(f"--nproc is for local runs, but {env.launcher} started {env.world_size} ranks: "
                           "drop --nproc or set the rank count in the launcher")
        planning.validate(plan, env.world_size)
        return launch.run_as_rank(functools.partial(rank_main, plan), env)

    return _spawn(plan, nproc, chosen_backend)


def _spawn(plan, nproc: int | None, backend: str) -> int:
    import torch

    from commbench import launch, memory, plan as planning, results
    from commbench.runner import rank_main

    if nproc is None:
        nproc = torch.cuda.device_count() if backend == "nccl" else 2
    planning.validate(plan, nproc)
    memory.check_fits(plan, nproc, nproc, torch.device("cpu") if backend == "gloo" else torch.device("cuda", 0))
    results.check_writable(results.resolve_out(plan.out, plan.run_id))
    return launch.spawn_local(nproc, functools.partial(rank_main, plan))


def _register_subcommands() -> None:
    from commbench.cli_lab import lab

    cli.add_command(lab)


_register_subcommands()


def _fail(message: str, code: int) -> None:
    print(f"commbench: {message}", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="commbench", standalone_mode=False)
    except click.exceptions.NoSuchOption as exc:
        hint = f" (did you mean {exc.possibilities[0]}?)" if exc.possibilities else ""
        _fail(f"no such option {exc.option_name}{hint}: see 'commbench {_sub(exc)} --help'", EXIT_USAGE)
    except click.UsageError as exc:
        _fail(f"{exc.format_message().rstrip('.')}: see 'commbench {_sub(exc)} --help'", EXIT_USAGE)
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


if __name__ == "__main__":
    main()
