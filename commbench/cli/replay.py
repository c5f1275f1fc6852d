"""`commbench replay TRACE`: a recorded job's communication issued again on this fabric
(workloads/replay.py; docs/REPLAY.md). The trace is read and worked out here first, so that a
trace replay cannot issue is refused in one line before any rank starts."""

from __future__ import annotations

import click

from commbench.cli.launcher import launch_workload, launcher_checked
from commbench.cli.options import Number, env_option, run_fields, run_options, settings_axes


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(), metavar="TRACE...")
@click.option("--steps", default="marked", show_default=True, metavar="marked|all|N[,N...]",
              help="Which recorded steps: the job's marked steps (everything when it marked none), all (the "
                   "ops outside any step too, as step -1), or step numbers. Steps that issue the same ops are "
                   "replayed once.")
@click.option("--with-gaps", "with_gaps", is_flag=True,
              help="Keep the compute gaps between ops (slept), as recorded; the step time then is its span.")
@click.option("--world-size", "world_size", type=Number(int, 1, 1 << 20, example="16"), default=None,
              help="Replay the job at this many ranks (a data-parallel trace only: each op keeps its size); "
                   "with --layout, every rank of the run.")
@env_option
@run_options
@launcher_checked
def replay(traces, steps, with_gaps, world_size, env_axes, nproc, **run) -> int:
    """Replay a captured job's communication (commbench capture, an Execution Trace) on this fabric."""
    from commbench.core import replayprogram as rp
    from commbench.core.tracereaders import read_any

    name = ", ".join(click.format_filename(t, shorten=True) for t in traces)
    program = rp.build(read_any(list(traces)), name, steps, with_gaps)
    if world_size and not run.get("layout"):
        program = rp.scaled(program, world_size, name)
    fields = run_fields(nproc=nproc, workload="replay", **run)
    fields["axes"] = settings_axes(env_axes, fields["backend"], run.get("iface"))
    from commbench.workloads.replay import ReplayPlan, ReplayWorkload  # torch: once the trace is checked

    plan = ReplayPlan(traces=[str(t) for t in traces], steps=steps, with_gaps=with_gaps, replay_world=world_size,
                      **fields)
    from commbench.core import launch

    # a local run starts the trace's ranks (--world-size's with --layout) unless --nproc says otherwise
    local = launch.detect() is None
    ranks = world_size if world_size and run.get("layout") else program.world_size
    return launch_workload(ReplayWorkload(plan), ranks if nproc is None and local else nproc)
