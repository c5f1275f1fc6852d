"""`commbench tune`: parse and check the flags, hand the candidates to workloads/tune.py, print the
ranked table and write the winning config (docs/TUNING.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from commbench.analysis.tune.tuneview import MIN_GAIN
from commbench.cli.options import Number, model_shape, model_shape_options, run_fields, run_options
from commbench.cli.tables import wide_option
from commbench.core.errors import BadInput


@click.command()
@click.option("--ds-config", "ds_config", required=True, type=click.Path(dir_okay=False),
              help="Your ds_config.json: the settings the candidates start from.")
@model_shape_options
@click.option("--curve", "curve", multiple=True, type=click.Path(), metavar="RESULTS",
              help="A sweep's results to predict from (repeatable) [default: a quick sweep first].")
@click.option("--top", type=Number(int, 1, 100, example="3"), default=3, show_default=True,
              help="Measure the best K predictions with real collectives.")
@click.option("--memory-per-rank", "memory", default=None,
              help="Memory for one rank's model states, e.g. 80G [default: the GPU's; CPU ranks: not checked].")
@click.option("--stages", default=None, help="ZeRO stages to consider [default: 0,1,2,3 that fit].")
@click.option("--reduce-buckets", "reduce_buckets", default=None,
              help="reduce_bucket_size grid in elements [default: yours x 0.1, 1, 10].")
@click.option("--allgather-buckets", "allgather_buckets", default=None,
              help="allgather_bucket_size grid in elements [default: yours; DeepSpeed 0.19.8 ignores it].")
@click.option("--grad-accum", "grad_accum", default=None,
              help="gradient_accumulation_steps grid: other values than yours need --allow-batch-change "
                   "[default: yours; with --allow-batch-change yours x 1, 2, 4].")
@click.option("--allow-batch-change", "allow_batch", is_flag=True,
              help="Let candidates change gradient_accumulation_steps, and with it train_batch_size (the global "
                   "batch, a training hyperparameter); a winner that does says so first.")
@click.option("--dtypes", default=None, help="Communication dtypes [default: yours and a 2-byte one].")
@click.option("--scale", "scale", type=Number(float, 0, 1, low_open=True, example="0.01"), default=None,
              help="Measuring scale of every message [default: the zero workload's auto].")
@click.option("--min-gain", "min_gain", type=Number(float, 0, 100, example="10"), default=MIN_GAIN * 100,
              show_default=True,
              help="Percent: a candidate that changes more of your config must be this much faster to win.")
@click.option("--force", is_flag=True, help="Replace an existing tuned config in --out.")
@wide_option
@click.option("--launcher", type=click.Choice(["local", "lab", "srun"]), default="local", show_default=True,
              help="Where the curve and the zero runs get their ranks: local (--nproc), one on every lab host, "
                   "or srun steps on every task of the Slurm job tune runs in.")
@run_options
def tune(ds_config, model, layers, hidden, vocab, curve, top, memory, stages, reduce_buckets, allgather_buckets,
         grad_accum, allow_batch, dtypes, scale, min_gain, force, wide, launcher, nproc, **run) -> int:
    """Predict the communication time of candidate DeepSpeed settings, measure the best, recommend one."""
    from commbench.core import outputs, units
    from commbench.integrations.deepspeed import config as dsconfig

    cfg = dsconfig.load(ds_config)
    shape, name = model_shape(model, layers, hidden, vocab)
    target = Path(run["out"]) / f"{Path(ds_config).stem}.tuned.json"
    outputs.check_new(target, "tune", "--out", inputs=[ds_config], force=force)
    from commbench.workloads import tune as work

    if work.launched():
        raise BadInput("tune starts the ranks of its runs itself (--launcher local, lab or srun): run it outside "
                       "torchrun/srun/mpirun/lab run; in a Slurm job, in the batch script with --launcher srun")
    fields = run_fields(nproc=nproc, workload="tune", **run)
    world, _ = _ranks(launcher, nproc, run.get("iface"), fields["backend"])
    gas = cfg.gradient_accumulation_steps or 1
    accums = _grad_accums(grad_accum, gas, allow_batch)
    user = work.Row(cfg.zero_stage, cfg.reduce_bucket_size, cfg.allgather_bucket_size, gas, cfg.dtype_name, 0.0)
    dts = _list(dtypes, "--dtypes", lambda t: _dtype(t)) or _default_dtypes(cfg.dtype_name)
    itemsize = max(_dtype(d, size=True) for d in dts)
    params = work.param_count(*shape)
    budget = units.parse_size(memory, "--memory-per-rank") if memory else work.memory_budget(fields["backend"])
    wanted = _list(stages, "--stages", _stage) or [0, 1, 2, 3]
    plan = work.TunePlan(
        layers=shape[0], hidden=shape[1], vocab=shape[2], model=name, ds_config=ds_config, world=world,
        backend=fields["backend"],
        stages=work.fitting_stages(params, world, _dtype(cfg.dtype_name, size=True), budget, wanted, name),
        reduce_buckets=_counts(reduce_buckets, "--reduce-buckets")
        or sorted({max(1, int(cfg.reduce_bucket_size * f)) for f in work.BUCKET_FACTORS}),
        allgather_buckets=_counts(allgather_buckets, "--allgather-buckets", even=True) or [cfg.allgather_bucket_size],
        grad_accums=accums,
        dtypes=dts, prefetch_bucket=cfg.stage3_prefetch_bucket_size,
        multi_rank_allreduce=cfg.use_multi_rank_bucket_allreduce,
        scale=scale or work.cpu_scale(params, itemsize, fields["backend"]),
        out=work.out_folder(run["out"]), run_id=fields["run_id"], child_args=work.child_flags(fields, nproc),
        launcher=launcher, memory=budget, user_itemsize=_dtype(cfg.dtype_name, size=True))
    rows, notes, written, unmeasured = work.run(plan, user, list(curve), top)
    notes = work.left_out(params, world, plan.user_itemsize, budget, wanted, plan.stages) + notes
    _report(plan, (rows, notes, unmeasured), user, cfg, (target, ds_config), force, min_gain / 100, wide)
    return 0


def _report(plan, result, user, cfg, paths, force, min_gain, wide) -> None:
    """The recommendation first (a change to training on its first line, then the winner against
    the user's config and the patch), the ranked table and the notes after it."""
    from commbench.analysis.tune import tuneview
    from commbench.core import outputs
    from commbench.integrations.deepspeed import config as dsconfig

    rows, notes, unmeasured = result
    target, ds_config = paths
    _, full = tuneview.ranked(rows)
    best = tuneview.winner(rows, user, min_gain)
    new = tuneview.apply_setting(cfg.to_dict(), best, user.grad_accum, user.dtype)
    dsconfig.parse(new, source=str(target))  # the recommendation must be a config DeepSpeed accepts
    patch = tuneview.merge_patch(cfg.to_dict(), new)
    from commbench.workloads.tune import stage_memory

    lines = tuneview.recommendation(rows, best, user, min_gain, (cfg.to_dict(), new), ds_config, unmeasured,
                                    stage_memory(plan, best, user))
    lines += [f"# tune: {plan.model} ({plan.params / 1e9:.3g}B parameters), {plan.world} ranks, {len(rows)} candidates "
              "ranked by predicted communication per micro-batch "
              + ("at full scale" if full else f"at the measuring scale {plan.scale:g} (the curve stops short of full)"),
              f"# predicted, measured: one optimizer step, every message x{plan.scale:g}, like for like"
              + ("" if wide else "; --wide: the full-scale prediction")]
    after = [f"# note: {n}" for n in notes]
    missed = [r for r in rows if r.flagged]
    if missed:
        after.append(f"# {len(missed)} measured candidate(s) missed the prediction by more than "
                     f"{tuneview.MISS_LIMIT:.0%} (MISS>25%): the curve does not describe that schedule well")
    summary = Path(plan.out) / f"{plan.run_id}.tune.json"
    record = tuneview.record(plan, rows, full, best, patch, [unmeasured] * bool(unmeasured) + notes, min_gain)
    outputs.write_files([outputs.Output(target, (json.dumps(new, indent=2) + "\n").encode(), "--out"),
                         outputs.Output(summary, (json.dumps(record, indent=2) + "\n").encode(), "--out")],
                        "tune", [ds_config], force)
    after += [f"# wrote the tuned config: {target}", f"# wrote every candidate (JSON): {summary}"]
    for line in tuneview.wrapped(lines) + tuneview.table(rows, full, plan.scale, wide) + tuneview.wrapped(after):
        click.echo(line)


def _ranks(launcher: str, nproc: int | None, iface: str | None, backend: str) -> tuple[int, int]:
    """(ranks of every child run, ranks sharing one machine's memory) for --launcher."""
    from commbench.workloads import tune as work

    if launcher == "local":
        world = work.world_size(nproc, backend)
        return world, world
    if nproc is not None:
        where = "one rank on every lab host" if launcher == "lab" else "one rank on every task of the job"
        raise BadInput(f"--launcher {launcher} runs {where}: drop --nproc")
    if launcher == "srun":
        return work.srun_world()
    if iface:
        raise BadInput("--launcher lab runs one rank on every lab host over its lab link: drop --iface")
    from commbench.lab import state as labstate

    labstate.require_root()
    hosts = len(labstate.require_state().nodes)
    return hosts, hosts


def _list(text, flag, convert) -> list:
    if text is None:
        return []
    items = [t for t in text.split(",") if t.strip()]
    if not items or len(items) > 20:
        raise BadInput(f"{flag} {text[:40]!r} is not a list of 1 to 20 values: e.g. {flag} 1,2")
    return list(dict.fromkeys(convert(t.strip()) for t in items))


def _grad_accums(text: str | None, gas: int, allow: bool) -> list[int]:
    """The accumulation grid: the user's alone unless --allow-batch-change (it sets the global batch)."""
    from commbench.workloads import tune as work

    values = _list(text, "--grad-accum", _accum)
    if not allow and any(v != gas for v in values):
        raise BadInput(f"--grad-accum {str(text)[:40]} changes gradient_accumulation_steps (yours: {gas}) and with it "
                       "train_batch_size, a training hyperparameter: add --allow-batch-change, or drop --grad-accum")
    return values or ([gas * f for f in work.GRAD_ACCUM_FACTORS] if allow else [gas])


def _dtype(text, size=False):
    from commbench.core.vocab import get_dtype

    d = get_dtype(text)
    if d.name not in ("float32", "float16", "bfloat16"):
        raise BadInput(f"--dtypes {text!r}: DeepSpeed trains in float32, float16 or bfloat16")
    return d.itemsize if size else d.name


def _default_dtypes(user: str) -> list[str]:
    return [user, "float16" if user == "bfloat16" else "bfloat16"]


def _stage(text):
    if text not in ("0", "1", "2", "3"):
        raise BadInput(f"--stages {text!r}: ZeRO stages are 0, 1, 2 and 3")
    return int(text)


def _accum(text):
    from commbench.workloads.zeroschedule import MAX_GRAD_ACCUM

    if not text.isdigit() or not 1 <= int(text) <= MAX_GRAD_ACCUM:
        raise BadInput(f"--grad-accum {text[:20]!r}: gradient_accumulation_steps are whole numbers from 1 to "
                       f"{MAX_GRAD_ACCUM}, e.g. 1,4,8")
    return int(text)


def _counts(text, flag, even=False) -> list[int]:
    from commbench.core import units

    if text is None:
        return []
    values = list(dict.fromkeys(units.parse_count_list(text, flag, most=20)))
    if even and any(v % 2 for v in values):
        raise BadInput(f"{flag} {text[:40]!r}: DeepSpeed needs an even allgather_bucket_size, e.g. 500000000")
    return values
