"""What the commands share: the run options (their defaults are RunOptions' fields, the one home
of those facts), and the checks of numbers and fractions that turn bad input into one line."""

from __future__ import annotations

import os

import click

from commbench.core.errors import BadInput
from commbench.core.options import RunOptions

DEFAULTS = RunOptions()


def positive_int(value: int, flag: str) -> int:
    if value is not None and value < 1:
        raise BadInput(f"{flag} {value} must be at least 1")
    return value


def positive_float(value: float, flag: str) -> float:
    if value is not None and not value > 0:
        raise BadInput(f"{flag} {value} must be more than 0")
    return value


def fraction(text: str, flag: str, low_open: bool = False) -> float:
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


def run_options(command):
    """The options every measuring command shares (iteration policy, launch, output)."""
    d = DEFAULTS
    options = [
        click.option("-w", "--warmup", type=int, default=d.warmup, show_default=True, help="Warm-up iterations per point."),
        click.option("-n", "--iters", type=int, default=d.iters, help="Timed iterations per point [default: adaptive]."),
        click.option("--time-budget", type=float, default=d.time_budget, show_default=True,
                     help="Most seconds of timed iterations per point (adaptive)."),
        click.option("--precision", type=float, default=d.precision, show_default=True,
                     help="Adaptive: stop a point once its median is known to this fraction (95%% CI "
                          "half-width); 0 fills --time-budget."),
        click.option("--min-iters", type=int, default=d.min_iters, show_default=True),
        click.option("--max-iters", type=int, default=d.max_iters, show_default=True),
        click.option("-R", "--repetitions", type=int, default=d.repetitions, show_default=True,
                     help="Run the whole grid this many times, interleaved."),
        click.option("--check/--no-check", default=d.check, show_default=True,
                     help="Check every output, like nccl-tests' #wrong."),
        click.option("--wire/--no-wire", default=d.wire, show_default=True,
                     help="Read NIC, port and TCP counters before and after every point (the wire column)."),
        click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default=d.backend, show_default=True,
                     help="auto: nccl when CUDA GPUs are visible, else gloo."),
        click.option("--nproc", type=int, default=None,
                     help="Local ranks to spawn when no launcher started us [default: visible GPUs, or 2]."),
        click.option("--iface", default=None,
                     help="Network interface for the traffic (sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME)."),
        click.option("--timeout", type=float, default=d.timeout, show_default=True,
                     help="Seconds any collective may take before the run fails."),
        click.option("--out", default=d.out, show_default=True,
                     help="Folder for <run_id>.parquet, or a .parquet file name."),
        click.option("--label", default=d.label, help="Free text stored with every row (e.g. mtu9000-after)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def run_fields(warmup, iters, time_budget, min_iters, max_iters, repetitions, check, backend, nproc, iface,
               timeout, out, label, workload: str, precision: float, wire: bool = DEFAULTS.wire) -> dict:
    """Validate the shared options; return the RunOptions fields (backend resolved)."""
    from commbench.core import results
    from commbench.harness.runner import choose_backend

    if warmup < 0:
        raise BadInput(f"--warmup {warmup} must be 0 or more")
    for value, flag in ((min_iters, "--min-iters"), (max_iters, "--max-iters"), (repetitions, "--repetitions")):
        positive_int(value, flag)
    positive_int(iters, "--iters")
    positive_float(time_budget, "--time-budget")
    if not 0 <= precision < 1:
        raise BadInput(f"--precision {precision} must be 0 (off) or a fraction below 1, e.g. 0.03 for 3%")
    positive_float(timeout, "--timeout")
    if min_iters > max_iters:
        raise BadInput(f"--min-iters {min_iters} is larger than --max-iters {max_iters}: lower one of them")
    if nproc is not None and nproc < 1:
        raise BadInput(f"--nproc {nproc} must be at least 1: e.g. --nproc 2")
    if iface:
        os.environ["GLOO_SOCKET_IFNAME"] = iface
        os.environ["NCCL_SOCKET_IFNAME"] = iface
    return dict(warmup=warmup, iters=iters, time_budget=time_budget, precision=precision, min_iters=min_iters,
                max_iters=max_iters,
                repetitions=repetitions, check=check, wire=wire, timeout=timeout, backend=choose_backend(backend),
                label=label, out=out, run_id=results.make_run_id(), workload=workload)
