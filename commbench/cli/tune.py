"""`commbench tune`: parse and check the flags, hand the candidates to workloads/tune.py, print the
ranked table and write the winning config (docs/TUNING.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from commbench.analysis.tuneview import MIN_GAIN
from commbench.cli.options import Number, model_shape, model_shape_options, run_fields, run_options
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
              help="Memory for one rank's model states, e.g. 80G [default: the GPU's, or RAM / ranks].")
@click.option("--stages", default=None, help="ZeRO stages to consider [default: 0,1,2,3 that fit].")
@click.option("--reduce-buckets", "reduce_buckets", default=None,
              help="reduce_bucket_size grid in elements [default: yours x 0.1, 1, 10].")
@click.option("--allgather-buckets", "allgather_buckets", default=None,
              help="allgather_bucket_size grid in elements [default: yours; DeepSpeed 0.19.8 ignores it].")
@click.option("--grad-accum", "grad_accum", default=None,
              help="gradient_accumulation_steps grid [default: yours x 1, 2, 4].")
@click.option("--dtypes", default=None, help="Communication dtypes [default: yours and a 2-byte one].")
@click.option("--scale", "scale", type=Number(float, 0, 1, low_open=True, example="0.01"), default=None,
              help="Measuring scale of every message [default: the zero workload's auto].")
@click.option("--min-gain", "min_gain", type=Number(float, 0, 100, example="10"), default=MIN_GAIN * 100,
              show_default=True,
              help="Percent: a candidate that changes more of your config must be this much faster to win.")
@click.option("--force", is_flag=True, help="Replace an existing tuned config in --out.")
@click.option("--launcher", type=click.Choice(["local", "lab", "srun"]), default="local", show_default=True,
              help="Where the curve and the zero runs get their ranks: local (--nproc), one on every lab host, "
                   "or srun steps on every task of the Slurm job tune runs in.")
@run_options
def tune(ds_config, model, layers, hidden, vocab, curve, top, memory, stages, reduce_buckets, allgather_buckets,
         grad_accum, dtypes, scale, min_gain, force, launcher, nproc, **run) -> int:
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
    world, per_node = _ranks(launcher, nproc, run.get("iface"), fields["backend"])
    gas = cfg.gradient_accumulation_steps or 1
    user = work.Row(cfg.zero_stage, cfg.reduce_bucket_size, cfg.allgather_bucket_size, gas, cfg.dtype_name, 0.0)
    dts = _list(dtypes, "--dtypes", lambda t: _dtype(t)) or _default_dtypes(cfg.dtype_name)
    itemsize = max(_dtype(d, size=True) for d in dts)
    params = work.param_count(*shape)
    budget = (units.parse_size(memory, "--memory-per-rank") if memory
              else work.memory_budget(fields["backend"], per_node))
    wanted = _list(stages, "--stages", _stage) or [0, 1, 2, 3]
    plan = work.TunePlan(
        layers=shape[0], hidden=shape[1], vocab=shape[2], model=name, ds_config=ds_config, world=world,
        backend=fields["backend"],
        stages=work.fitting_stages(params, world, _dtype(cfg.dtype_name, size=True), budget, wanted, name),
        reduce_buckets=_counts(reduce_buckets, "--reduce-buckets")
        or sorted({max(1, int(cfg.reduce_bucket_size * f)) for f in work.BUCKET_FACTORS}),
        allgather_buckets=_counts(allgather_buckets, "--allgather-buckets", even=True) or [cfg.allgather_bucket_size],
        grad_accums=_list(grad_accum, "--grad-accum", _accum) or [gas * f for f in work.GRAD_ACCUM_FACTORS],
        dtypes=dts, prefetch_bucket=cfg.stage3_prefetch_bucket_size,
        multi_rank_allreduce=cfg.use_multi_rank_bucket_allreduce,
        scale=scale or work.cpu_scale(params, itemsize, fields["backend"]),
        out=work.out_folder(run["out"]), run_id=fields["run_id"], child_args=work.child_flags(fields, nproc),
        launcher=launcher)
    rows, notes, written = work.run(plan, user, list(curve), top)
    notes = work.left_out(params, world, _dtype(cfg.dtype_name, size=True), budget, wanted, plan.stages) + notes
    _report(plan, rows, notes, user, cfg, target, force, ds_config, min_gain / 100)
    return 0


def _report(plan, rows, notes, user, cfg, target, force, ds_config, min_gain) -> None:
    from commbench.analysis import tuneview
    from commbench.core import outputs
    from commbench.integrations.deepspeed import config as dsconfig

    _, full = tuneview.ranked(rows)
    click.echo(f"# tune: {plan.model} ({plan.params / 1e9:.3g}B parameters) on {plan.world} ranks, "
               f"{len(rows)} candidates; ranked by predicted communication per micro-batch "
               + ("at full scale" if full
                  else f"at the measuring scale {plan.scale:g} (the curve does not reach full scale)"))
    click.echo(f"# predicted and measured: one optimizer step at scale {plan.scale:g} (every message x{plan.scale:g}), "
               "like for like; full-scale predicted: the same step at the model's real size, not measured")
    for line in tuneview.table(rows, full, plan.scale) + [f"# note: {n}" for n in notes]:
        click.echo(line)
    missed = [r for r in rows if r.flagged]
    if missed:
        click.echo(f"# {len(missed)} measured candidate(s) missed the prediction by more than "
                   f"{tuneview.MISS_LIMIT:.0%} (MISS>25%): the curve does not describe that schedule well")
    best = tuneview.winner(rows, user, min_gain)
    for line in tuneview.verdict_lines(rows, best, user, min_gain):
        click.echo(line)
    new = tuneview.apply_setting(cfg.to_dict(), best, user.grad_accum, user.dtype)
    dsconfig.parse(new, source=str(target))  # the recommendation must be a config DeepSpeed accepts
    patch = tuneview.merge_patch(cfg.to_dict(), new)
    click.echo(f"# winner: ZeRO-{best.stage}, reduce_bucket_size {best.reduce_bucket:.3g}, gradient_accumulation_steps "
               f"{best.grad_accum}, {best.dtype}; change to {ds_config} (JSON merge patch, RFC 7386):")
    for line in tuneview.diff_lines(patch) if patch else ["{}  (your config is already the winner)"]:
        click.echo(line)
    summary = Path(plan.out) / f"{plan.run_id}.tune.json"
    record = tuneview.record(plan, rows, full, best, patch, notes, min_gain)
    outputs.write_files([outputs.Output(target, (json.dumps(new, indent=2) + "\n").encode(), "--out"),
                         outputs.Output(summary, (json.dumps(record, indent=2) + "\n").encode(), "--out")],
                        "tune", [ds_config], force)
    click.echo(f"# wrote {target} (the tuned config) and {summary} (every candidate, machine-readable)")


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
