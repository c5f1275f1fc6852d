"""`commbench check`: parse and check the flags, run the acceptance pass (workloads/check.py) or the
health check, print the verdict per host, and with --drain / --resume change Slurm node states
(integrations/slurmnodes.py; docs/CHECK.md)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

from commbench.cli.options import DAY_S, Number
from commbench.core.errors import BadInput


@click.command()
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="YAML: steps, sizes, time budget, gate bands, link rate (docs/CHECK.md) "
                   "[default: doctor and pairs, 300 s].")
@click.option("--mode", type=click.Choice(["acceptance", "healthcheck"]), default="acceptance", show_default=True,
              help="acceptance: every host of the job (doctor, pairs, sweep); healthcheck: this host alone, for "
                   "Slurm's Prolog or HealthCheckProgram (exit 1 on FAIL, no scontrol).")
@click.option("--launcher", type=click.Choice(["auto", "local", "lab", "srun"]), default="auto", show_default=True,
              help="Where the steps get one rank per host: srun (a Slurm job's nodes), lab (every lab host), local "
                   "(--nproc ranks here); auto: srun inside a Slurm job, else local.")
@click.option("--nproc", type=Number(int, 2, 4096, example="2"), default=None,
              help="Local ranks of pairs and sweep (--launcher local) [default: 2].")
@click.option("--time-budget", "time_budget", type=Number(float, 0, DAY_S, low_open=True, example="120"),
              default=None, help="Seconds for the whole check [default: the profile's].")
@click.option("--link-rate", "link_rate", default=None, metavar="RATE",
              help="The rate every host's rails should carry, e.g. 1gbit or 400Gbps [default: the profile's; "
                   "none: not checked].")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--drain", is_flag=True,
              help="Drain the FAIL hosts (scontrol, Reason 'commbench: ...'); an admin's job, never a prolog.")
@click.option("--resume", is_flag=True,
              help="Resume nodes drained by commbench (Reason 'commbench: ...') whose host now passes; a node "
                   "drained by someone else is never resumed.")
@click.option("--out", default="results", show_default=True, help="Folder for the steps' results and log.")
@click.option("--metrics", "metrics", default=None, metavar="FILE",
              help="Also write the verdicts and the steps' results as Prometheus metrics (a node_exporter "
                   "textfile, docs/METRICS.md).")
def check(profile_path, mode, launcher, nproc, time_budget, link_rate, fmt, drain, resume, out, metrics) -> int:
    """One acceptance pass over the hosts: doctor, pairs and a sweep judged by gate bands; a verdict per host.

    Exit 0 no host failed, 1 some host failed, 3 no verdict. See docs/CHECK.md."""
    import dataclasses

    from commbench.analysis.check import checkprofile
    from commbench.core.units import parse_rate

    profile = checkprofile.load(profile_path)
    if time_budget is not None:
        profile = dataclasses.replace(profile, time_budget_s=time_budget)
    if link_rate is not None:
        profile = dataclasses.replace(profile, link_rate_bits=parse_rate(link_rate, "--link-rate"))
    if mode == "healthcheck":
        if drain or resume:
            raise BadInput("--mode healthcheck never calls scontrol (Slurm acts on its exit code): drop "
                           f"--{'drain' if drain else 'resume'}, or run the acceptance pass in an admin's job")
        return _healthcheck(profile, out, fmt, metrics)
    _not_launched()
    launcher = _launcher(launcher, nproc)
    runner = _slurm_runner(launcher) if drain or resume else None
    from commbench.analysis.check import checkverdict
    from commbench.core.results import make_run_id
    from commbench.workloads import check as work

    plan = work.CheckPlan(profile, launcher, out, make_run_id(), nproc)
    result = work.Check(plan).run()
    lines = _slurm(result, runner, drain, resume) if runner is not None else []
    if metrics:
        _metrics(result, sorted(str(p) for p in Path(out).glob(f"{plan.run_id}.*.parquet")), metrics)
    if fmt == "json":
        click.echo(checkverdict.to_json(result, {"slurm": lines} if runner is not None else None))
    else:
        for line in checkverdict.table(result) + [f"# slurm: {line}" for line in lines]:
            click.echo(line)
    return result.exit_code


def _metrics(result, files: list[str], path: str) -> None:
    from commbench.analysis.export.metrics import write_metrics

    write_metrics(files, path, check={h.host: h.verdict for h in result.hosts}, command="check")


def _healthcheck(profile, out: str, fmt: str, metrics: str | None) -> int:
    from commbench.analysis.check import checkverdict
    from commbench.workloads import check as work

    result = work.healthcheck(profile, out)
    if metrics:
        _metrics(result, [], metrics)
    line = work.healthcheck_line(result)
    click.echo(checkverdict.to_json(result) if fmt == "json" else line)
    if result.exit_code:
        print(line, file=sys.stderr, flush=True)  # slurmd logs a failing prolog's stderr
    return result.exit_code


def _not_launched() -> None:
    from commbench.workloads.tune import launched

    if launched():
        raise BadInput("check starts the ranks of its steps itself (--launcher local, lab or srun): run it outside "
                       "torchrun/srun/mpirun/lab run; in a Slurm job, in the batch script")


def _launcher(choice: str, nproc: int | None) -> str:
    in_job = bool(os.environ.get("SLURM_JOB_ID"))
    if choice == "auto":
        choice = "srun" if in_job and shutil.which("srun") else "local"
    if choice == "srun" and not in_job:
        raise BadInput("--launcher srun runs each step on the nodes of this Slurm job: run check inside an sbatch "
                       "script (slurm/nightly-check.sbatch) or an salloc allocation")
    if choice == "srun" and shutil.which("srun") is None:
        raise BadInput("--launcher srun: srun is not on PATH: load the Slurm module (or add Slurm's bin folder)")
    if nproc is not None and choice != "local":
        raise BadInput(f"--launcher {choice} runs one rank on every host: drop --nproc")
    if choice == "lab":
        from commbench.lab import state as labstate

        labstate.require_root()
        labstate.require_state()
    return choice


def _slurm_runner(launcher: str):
    """How scontrol is reached: the lab's client under --launcher lab, else scontrol here inside a job."""
    from commbench.integrations import slurmnodes

    if launcher == "lab":
        from commbench.lab import slurm as labslurm
        from commbench.lab import state as labstate

        state = labstate.require_state()
        labslurm.require_up(state)
        return lambda argv: labslurm.client(state, argv, timeout=30)
    if not os.environ.get("SLURM_JOB_ID"):
        raise BadInput("--drain and --resume change Slurm node states, and this runs outside Slurm (no "
                       "SLURM_JOB_ID): run check in an admin's Slurm job (slurm/nightly-check.sbatch), or on the "
                       "lab with --launcher lab; or drop --drain/--resume")
    if shutil.which("scontrol") is None:
        raise BadInput("--drain and --resume need scontrol, which is not on PATH: load the Slurm module")
    return slurmnodes.subprocess_runner()


def _slurm(result, runner, drain: bool, resume: bool) -> list[str]:
    from commbench.integrations import slurmnodes

    if not result.judged:
        return ["no verdict: no node drained or resumed"]
    nodes = slurmnodes.read_nodes(runner)
    verdicts = {h.host: (h.verdict, h.reason) for h in result.hosts}
    return slurmnodes.carry_out(slurmnodes.plan(verdicts, nodes, drain, resume), runner) or ["nothing to change"]
