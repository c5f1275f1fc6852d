"""`commbench tune`: candidate DeepSpeed settings for a model, each one's communication time per
step predicted from a measured curve, the best K measured with real collectives.

Candidates: the ZeRO stages whose model states fit one rank's memory x reduce_bucket_size x
allgather_bucket_size x gradient_accumulation_steps x dtype, each a small grid around the user's
config. Two candidates whose schedules issue the same collectives at the same sizes are one: the
one nearest the user's config stays (stage 0 ignores reduce_bucket_size, and DeepSpeed 0.19.8
ignores allgather_bucket_size on torch >= 1.13, so those axes often collapse).

Each candidate is predicted twice from the curve (analysis/tune/predict.py): at full scale (the
recommendation), and at the scale the measurement runs at (on CPU ranks the zero workload's
--scale shrinks every message) so measured and predicted compare like for like. Measuring runs
the real CLI in a child process: `commbench sweep` for a quick curve (the collectives and sizes
the candidates need, out of place), `commbench zero` once per measured candidate; the parent
reads their results files back.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from commbench.analysis.tune.predict import Curve, load_curve, predict_us
from commbench.analysis.tune.tuneview import Row
from commbench.core import options
from commbench.core.errors import BadInput, CommbenchError, RuntimeFailure
from commbench.core.results import read_results
from commbench.core.units import format_size
from commbench.core.vocab import get_dtype
from commbench.workloads.zeroschedule import (DEFAULT_CPU_STEP_BYTES, MAX_STEP_COLLECTIVES, MODELS, curve_comms,
                                              module_sizes, param_count, scaled, step_collectives,
                                              step_schedule)

BUCKET_FACTORS = (0.1, 1.0, 10.0)  # reduce_bucket_size grid around the user's value
GRAD_ACCUM_FACTORS = (1, 2, 4)  # gradient_accumulation_steps grid: the user's value times these
CPU_SWEEP_MAX = 64 << 20  # the quick curve's largest message on CPU ranks (sweep's own default)
GPU_SWEEP_MAX = 1 << 30


@dataclass
class TunePlan:
    layers: int
    hidden: int
    vocab: int
    model: str
    ds_config: str
    world: int
    backend: str
    stages: list[int]
    reduce_buckets: list[int]
    allgather_buckets: list[int]
    grad_accums: list[int]
    dtypes: list[str]
    prefetch_bucket: int
    multi_rank_allreduce: bool
    scale: float
    out: str
    run_id: str
    child_args: list[str] = field(default_factory=list)  # shared run flags passed to each child run
    # how child runs get their ranks: "local" (--nproc), "lab" (`lab run`, a rank a host) or "srun"
    # (a step of the Slurm job tune runs in, on all of its tasks)
    launcher: str = "local"
    # one rank's memory for its model states (--memory-per-rank, or the GPU's); None: not checked
    # (CPU ranks rehearse for accelerators whose memory RAM / ranks says nothing about)
    memory: int | None = None
    user_itemsize: int = 2  # the user's training dtype's bytes, for the memory check

    @property
    def params(self) -> int:
        return param_count(self.layers, self.hidden, self.vocab)


def state_bytes_per_rank(params: int, stage: int, world: int, itemsize: int) -> float:
    """Model states one rank holds (ZeRO paper section 3): weights and gradients in the training
    dtype, and Adam's states (fp32 master copy and two moments with 16-bit training: 12 B per
    parameter; two fp32 moments with fp32 training: 8 B), partitioned from stage 1 (optimizer),
    2 (+ gradients) and 3 (+ weights). Activations and buffers are not counted."""
    k = 12 if itemsize == 2 else 8
    w, g, o = params * itemsize, params * itemsize, params * k
    return {0: w + g + o, 1: w + g + o / world, 2: w + (g + o) / world, 3: (w + g + o) / world}[stage]


def fitting_stages(params: int, world: int, itemsize: int, budget: int | None, stages: list[int],
                   model: str) -> list[int]:
    """The stages whose model states fit `budget` bytes a rank (None: every stage, memory not checked)."""
    if budget is None:
        return list(stages)
    fit = [s for s in stages if state_bytes_per_rank(params, s, world, itemsize) <= budget]
    if not fit:
        need = state_bytes_per_rank(params, 3, world, itemsize)
        raise BadInput(f"{model} ({params:.3g} parameters) fits no ZeRO stage in {format_size(budget)} per rank "
                       f"on {world} ranks (stage 3 needs {format_size(need)} of model states): use more ranks, "
                       "a smaller model, or a larger --memory-per-rank")
    return fit


def left_out(params: int, world: int, itemsize: int, budget: int | None, wanted: list[int],
             fit: list[int]) -> list[str]:
    """One note per stage that memory ruled out, so a missing stage is never a mystery; one that
    says memory was not checked where no budget is known (CPU ranks without --memory-per-rank)."""
    if budget is None:
        return ["memory per rank not checked (CPU ranks, no --memory-per-rank): every stage is a candidate; "
                "pass --memory-per-rank 80G to leave out the stages your accelerators cannot hold"]
    return [f"ZeRO-{s} left out: its model states need {format_size(state_bytes_per_rank(params, s, world, itemsize))} "
            f"per rank, more than {format_size(budget)} (--memory-per-rank)" for s in wanted if s not in fit]


def full_schedule(plan: TunePlan, row: Row):
    return step_schedule(row.stage, module_sizes(plan.layers, plan.hidden, plan.vocab), row.reduce_bucket,
                         plan.prefetch_bucket, row.grad_accum, plan.multi_rank_allreduce)


def comms(plan: TunePlan, row: Row, scale: float) -> list[tuple[str, int, int]]:
    """The prediction's terms: full scale (scale 1) or as the zero workload runs at `scale`."""
    sched, itemsize = full_schedule(plan, row), get_dtype(row.dtype).itemsize
    if scale != 1:
        sched = scaled(sched, scale, itemsize, plan.world)
    return curve_comms(sched, itemsize, plan.world)


def candidates(plan: TunePlan, user: Row) -> list[Row]:
    """The grid and the user's own config (unless memory rules its stage out), too-large schedules
    left out, duplicates (same collectives at the same sizes) merged into the one nearest the
    user's config."""
    seen: dict[tuple, Row] = {}
    grid = itertools.product(plan.stages, plan.reduce_buckets, plan.allgather_buckets, plan.grad_accums, plan.dtypes)
    mine = [user.setting()] if user_fits(plan, user) else []
    for stage, rb, ab, g, dt in [*mine, *grid]:
        if step_collectives(stage, plan.layers, plan.params, rb, g) > MAX_STEP_COLLECTIVES:
            continue
        row = Row(stage, rb, ab, g, dt, 0.0)
        key = (stage, g, dt, tuple(comms(plan, row, 1)))
        if key not in seen or _distance(row, user) < _distance(seen[key], user):
            seen[key] = row
    if not seen:
        raise BadInput(f"every candidate of {plan.model} issues more than {MAX_STEP_COLLECTIVES:,} collectives "
                       "per step: pass larger --reduce-buckets")
    return list(seen.values())


def user_fits(plan: TunePlan, user: Row) -> bool:
    """Whether the user's own stage holds its model states in plan.memory (always, unchecked)."""
    return plan.memory is None or state_bytes_per_rank(plan.params, user.stage, plan.world,
                                                        plan.user_itemsize) <= plan.memory


def unmeasured(plan: TunePlan, user: Row) -> str:
    """Why the user's config is not among the measured candidates (said first, before the winner)."""
    if not user_fits(plan, user):
        need = state_bytes_per_rank(plan.params, user.stage, plan.world, plan.user_itemsize)
        return (f"your config was NOT measured: its ZeRO-{user.stage} model states need {format_size(need)} per rank, "
                f"more than {format_size(plan.memory or 0)} (--memory-per-rank); the winner is not compared with it")
    return (f"your config was NOT measured: its step issues more than {MAX_STEP_COLLECTIVES:,} collectives; "
            "the winner is not compared with it")


def stage_memory(plan: TunePlan, best: Row, user: Row) -> str | None:
    """Where the winner lowers the ZeRO stage: the model states a rank holds then, and whether
    that was checked against a memory budget."""
    if best.stage >= user.stage:
        return None
    now, then = (state_bytes_per_rank(plan.params, s, plan.world, plan.user_itemsize) for s in (user.stage, best.stage))
    checked = (f"within --memory-per-rank {format_size(plan.memory)}" if plan.memory is not None
               else "memory NOT checked on CPU ranks: pass --memory-per-rank")
    return (f"ZeRO-{user.stage} -> ZeRO-{best.stage}: model states {format_size(now)} -> {format_size(then)} a rank "
            f"({checked})")


def _distance(row: Row, user: Row) -> tuple:
    return (row.reduce_bucket != user.reduce_bucket, row.allgather_bucket != user.allgather_bucket,
            abs(row.reduce_bucket - user.reduce_bucket), abs(row.allgather_bucket - user.allgather_bucket))


def predict(plan: TunePlan, rows: list[Row], curve: Curve) -> list[str]:
    """Fill each row's predictions; a full-scale size beyond the curve leaves that figure None
    (the notes say so once), a scaled one beyond it is refused (the curve must cover what runs)."""
    notes: list[str] = []
    for row in rows:
        row.predicted_scaled_us = predict_us(curve, comms(plan, row, plan.scale), plan.world, row.dtype)
        try:
            row.predicted_full_us = predict_us(curve, comms(plan, row, 1), plan.world, row.dtype)
        except BadInput as exc:
            if plan.scale == 1:
                raise
            row.predicted_full_us = None
            if not notes:
                notes.append(f"full-scale predictions n/a where the curve stops short: {exc}")
    return notes


def quick_sizes(plan: TunePlan, rows: list[Row], dtype: str) -> dict[str, set[int]]:
    """Per collective, the sizes the candidates of `dtype` send: scaled ones always, full-scale ones
    up to the largest message a quick sweep holds here."""
    limit = GPU_SWEEP_MAX if plan.backend == "nccl" else CPU_SWEEP_MAX
    need: dict[str, set[int]] = {}
    for row in (r for r in rows if r.dtype == dtype):
        for scale in {plan.scale, 1.0}:
            terms = comms(plan, row, scale)
            if scale == 1 and plan.scale != 1 and any(size > limit for _, size, _ in terms):
                continue
            for op, size, _ in terms:
                need.setdefault(op, set()).add(size)
    return need


def child_command(argv: list[str], launcher: str) -> list[str]:
    """The argv of one child run: local ranks of its own (--nproc), one rank on every lab host
    through `commbench lab run` (tune itself stays on the machine that owns the lab), or an srun
    step on the job's tasks (tune runs in the batch script; the same Python on every node, as the
    job's environment gives it)."""
    own = [sys.executable, "-m", "commbench", *argv]
    if launcher == "srun":
        return ["srun", "--kill-on-bad-exit=1", *own]
    return own if launcher == "local" else [sys.executable, "-m", "commbench", "lab", "run", "--", *own]


def srun_world(environ: dict | None = None) -> tuple[int, int]:
    """(ranks, ranks on the busiest node) of the Slurm job tune runs in (--launcher srun): every
    srun step of the job starts one rank per task."""
    env = os.environ if environ is None else environ
    if not env.get("SLURM_JOB_ID"):
        raise BadInput("--launcher srun runs each measurement as an srun step of this job: run tune inside "
                       "an sbatch script or an salloc allocation")
    if shutil.which("srun", path=env.get("PATH")) is None:
        raise BadInput("--launcher srun: srun is not on PATH: load the Slurm module (or add Slurm's bin folder)")
    tasks, nodes = env.get("SLURM_NTASKS", ""), env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1"
    if not tasks.isdigit() or int(tasks) < 2 or not nodes.isdigit() or int(nodes) < 1:
        raise BadInput(f"--launcher srun needs a job of 2 or more tasks (SLURM_NTASKS={tasks or 'unset'}): submit it "
                       "with --ntasks or --ntasks-per-node, e.g. sbatch --nodes 2 --ntasks-per-node 8")
    return int(tasks), -(-int(tasks) // int(nodes))


def child(argv: list[str], what: str, launcher: str = "local") -> None:
    """Run one commbench command as a child process (its own ranks, signals and exit code)."""
    cmd = child_command(argv, launcher)
    code = subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False).returncode
    if code == 2:
        raise BadInput(f"{what} refused its input (above): `commbench {' '.join(argv[:1])}` exited 2")
    if code != 0:
        raise RuntimeFailure(f"{what} failed (exit {code}, above): nothing measured is lost; rerun tune")


def quick_curve(plan: TunePlan, rows: list[Row]) -> tuple[Curve, list[str]]:
    """A lean sweep per dtype of exactly the collectives and sizes the candidates need."""
    os.makedirs(plan.out, exist_ok=True)
    files = []
    for dtype in sorted({r.dtype for r in rows}):
        need = quick_sizes(plan, rows, dtype)
        colls = sorted(need)
        sizes = sorted(set().union(*need.values()))
        path = Path(plan.out) / f"{plan.run_id}.curve-{dtype}.parquet"
        print(f"# tune: quick curve, {dtype}: {', '.join(colls)} at {len(sizes)} sizes "
              f"({format_size(sizes[0])}..{format_size(sizes[-1])}) -> {path}", flush=True)
        child(["sweep", "--collective", ",".join(colls), "--sizes", ",".join(map(str, sizes)), "-d", dtype,
               "--placement", "both", "--out", str(path), *plan.child_args], "the quick curve's sweep", plan.launcher)
        files.append(str(path))
    return load_curve(files), files


def measure(plan: TunePlan, row: Row, index: int) -> str:
    """The zero workload with this candidate's stage, bucket, accumulation and dtype at plan.scale."""
    os.makedirs(plan.out, exist_ok=True)
    path = Path(plan.out) / f"{plan.run_id}.zero-{index}.parquet"
    print(f"# tune: measuring candidate {index}: ZeRO-{row.stage}, reduce_bucket_size {row.reduce_bucket:.3g}, "
          f"gradient_accumulation_steps {row.grad_accum}, {row.dtype} -> {path}", flush=True)
    child(["zero", "--ds-config", plan.ds_config, *shape_args(plan), "--vocab", str(plan.vocab),
           "--stages", str(row.stage), "--bucket-size", str(row.reduce_bucket),
           "--grad-accum", str(row.grad_accum), "-d", row.dtype, "--scale", repr(plan.scale),
           "--out", str(path), *plan.child_args], f"candidate {index}'s zero run", plan.launcher)
    frame = read_results([str(path)], columns=["time_us", "zero_stage"])
    times = frame.loc[frame["collective"] == "zero_step", "time_us"].dropna()
    if times.empty:
        raise RuntimeFailure(f"{path} holds no zero_step row: the zero run measured nothing; rerun tune")
    row.measured_us = float(statistics.median(times))
    return str(path)


def shape_args(plan: TunePlan) -> list[str]:
    """The model's flags for a child zero run: its name where it has one, so that the run's header
    and rows say '1.3b' as the user asked, not 'custom-24x2048'."""
    if plan.model in MODELS:
        return ["--model", plan.model]
    return ["--layers", str(plan.layers), "--hidden", str(plan.hidden)]


def cpu_scale(params: int, itemsize: int, backend: str) -> float:
    """The zero workload's --scale auto: 1 on GPUs, the model fitted in DEFAULT_CPU_STEP_BYTES on CPU."""
    return 1.0 if backend == "nccl" else min(1.0, DEFAULT_CPU_STEP_BYTES / (params * itemsize))


def memory_budget(backend: str) -> int | None:
    """One rank's memory for the memory check: the GPU's; None on CPU ranks (not checked): a CPU
    run rehearses for accelerators, and this machine's RAM / ranks says nothing about theirs."""
    if backend == "nccl":
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    return None


def run(plan: TunePlan, user: Row, curve_files: list[str],
        top: int) -> tuple[list[Row], list[str], list[str], str | None]:
    """Predict every candidate, measure the best `top` and the user's own config (the baseline the
    winner must beat); returns rows, notes, the files written, and why the user's config was not
    measured (None: it was)."""
    rows = candidates(plan, user)
    written: list[str] = []
    curve = load_curve(curve_files) if curve_files else None
    if curve is None:
        curve, written = quick_curve(plan, rows)
    notes = predict(plan, rows, curve)
    from commbench.analysis.tune.tuneview import ranked

    order, full = ranked(rows)
    yours = next((r for r in order if r.setting() == user.setting()), None)
    if yours is not None:
        yours.yours = True
    for rank, row in enumerate(order, 1):
        if rank <= top or row is yours:
            written.append(measure(plan, row, rank))
    return order, notes, written, None if yours is not None else unmeasured(plan, user)


def launched() -> bool:
    from commbench.core import launch

    try:
        return launch.detect() is not None
    except CommbenchError:
        return True


def child_flags(run: dict, nproc: int | None) -> list[str]:
    """The shared run flags as a child command takes them (its --out is its own)."""
    return options.child_flags(run, leave=("out",)) + (["--nproc", str(nproc)] if nproc is not None else [])


def world_size(nproc: int | None, backend: str) -> int:
    """The local ranks a child run starts (--launcher local)."""
    if nproc is not None:
        return nproc
    if backend == "nccl":
        import torch

        return torch.cuda.device_count()
    return 2


def out_folder(out: str) -> str:
    if out.endswith(".parquet"):
        raise BadInput(f"--out {out} names a file: tune writes several (curves, zero runs, the config); pass a folder")
    return out
