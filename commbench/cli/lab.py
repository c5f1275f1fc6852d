"""`commbench lab ...`: parse and delegate to the lab package (network, run, slurm)."""

from __future__ import annotations

import click

from commbench.cli.options import DAY_S, WEEK_S, InOrder, Number
from commbench.lab import network as labmod
from commbench.lab import state as labstate


MTU = Number(int, 576, 65535, rule="is outside 576..65535", example="1500")


@click.group(cls=InOrder)
def lab() -> None:
    """An emulated cluster on this machine (root): hosts are network namespaces on one bridge,
    links have a tbf rate and an MTU, and a real Slurm can run on them."""


@lab.command()
@click.option("--nodes", type=Number(int, 2, 64, rule="is outside 2..64", example="2"), default=2, show_default=True,
              help="Number of hosts.")
@click.option("--rate", default="1gbit", show_default=True, help="Link rate (tc units: 800mbit, 1gbit).")
@click.option("--mtu", type=MTU, default=1500, show_default=True)
@click.option("--subnet", default="10.231.0.0/24", show_default=True, help="Private range used only inside the lab.")
@click.option("--frames", is_flag=True, help="Links count frames as a NIC does (tbf splits GSO packets; costs CPU).")
@click.option("--rails",
              type=Number(int, 1, labstate.MAX_RAILS, rule=f"is outside 1..{labstate.MAX_RAILS}", example="2"),
              default=1, show_default=True,
              help="NICs per host (eth0..): rail R of every host on bridge R, its own subnet (--subnet shifted by R).")
def up(nodes, rate, mtu, subnet, frames, rails) -> None:
    """Create the hosts, the bridge(s) and the shaped links."""

    state = labmod.up(nodes, rate, mtu, subnet, frames=frames, rails=rails)
    nets = labmod.rail_subnets(subnet, state.rails, nodes)
    on = f"{state.subnet}" if state.rails == 1 else \
        f"{state.rails} rails ({', '.join(f'eth{r} on {net}' for r, net in enumerate(nets))})"
    click.echo(f"lab up: {len(state.nodes)} hosts on {on}, {rate}, MTU {mtu}")
    _print_status(state)


@lab.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json) -> None:
    """Hosts and their rails: addresses, state, MTU, rate (as the kernel reports them now)."""
    import json


    labstate.require_root()
    state = labstate.require_state()
    if as_json:
        click.echo(json.dumps({"hosts": labmod.live_facts(state), "daemons": state.daemons}, indent=2))
    else:
        _print_status(state)


def _print_status(state) -> None:
    from rich.console import Console
    from rich.table import Table


    table = Table("host", "iface", "address", "state", "MTU", "rate", "queue")
    for f in labmod.live_facts(state):
        table.add_row(f["host"], f["iface"], f["addr"], str(f["state"]), str(f["mtu"]), _rate(f["rate_bits"]),
                      _queue(f))
    Console().print(table)
    for d in state.daemons:
        click.echo(f"daemon {d['name']} pid {d['pid']}")


def _queue(facts: dict) -> str:
    """'40000 B' for a queue `lab set --queue` set (full, it drops), '100 ms' for the lab's default
    (that much traffic at the rate), '-' for an unshaped link; the figures are the kernel's."""
    if facts["queue"] and facts["queue_bytes"]:
        return f"{facts['queue_bytes']} B"
    return f"{facts['queue_latency_us'] / 1000:g} ms" if facts["queue_latency_us"] else "-"


def _rate(bits: float | None) -> str:
    if bits is None:
        return "unshaped"
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits:g}bit"


@lab.command(name="set")
@click.option("--node", default=None, help="One host, cbnode3 or 3 (default: all).")
@click.option("--rail", default=None, help="One rail of the hosts, eth1 or 1 (default: every rail).")
@click.option("--mtu", type=MTU, default=None)
@click.option("--rate", default=None)
@click.option("--queue", type=Number(int, 0, 1 << 30, example="40000"), default=None,
              help="tbf's queue in bytes: a short one (e.g. 40000) drops like a shallow switch buffer; one of a few "
                   "frames (4000) starves TCP (16 MiB outlasted a 300 s timeout at 1gbit); 0 restores it.")
@click.option("--frames/--no-frames", default=None, help="Count frames on eth0 as a NIC does (tbf splits GSO packets).")
def set_cmd(node, rail, mtu, rate, queue, frames) -> None:
    """Change MTU, rate or queue live, for every host or one, every rail or one."""

    state = labmod.set_link(node, mtu, rate, queue, frames, rail=rail)
    _print_status(state)


@lab.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("node")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def exec_cmd(node, argv) -> int:
    """Run a command on one host: commbench lab exec cbnode1 -- ip addr."""
    from commbench.lab import ranklaunch as labrun

    labstate.require_root()
    return labrun.exec_on(labstate.require_state(), node, list(argv))


@lab.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                 "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def rsh(args) -> int:
    """ssh for launchers: [OPTIONS] HOST COMMAND... runs COMMAND inside lab host HOST, as ssh runs it
    on a remote host. For mpirun: --mca plm_rsh_agent 'commbench lab rsh' --host cbnode1,cbnode2
    (mpirun itself inside the first host: commbench lab exec cbnode1 -- mpirun ...)."""
    from commbench.lab import ranklaunch as labrun

    labstate.require_root()
    return labrun.rsh(labstate.require_state(), list(args))


@lab.command(context_settings={"ignore_unknown_options": True})
@click.option("--port", type=int, default=29400, show_default=True, help="Rendezvous port on the first host.")
@click.option("--ranks-per-host", "per_host", default=1, show_default=True,
              type=Number(int, 1, 64, rule="is outside 1..64", example="2"),
              help="Ranks on every host, numbered block-wise (host 1: ranks 0..N-1), each with its LOCAL_RANK; "
                   "with `lab up --rails N`, `--iface eth0,eth1` of the command puts local rank i on rail i.")
@click.option("--linger", type=Number(float, 0, 3600, rule="is outside 0..3600", example="10"), default=10.0,
              show_default=True, help="Seconds a rank may run on after rank 0 ended (one cut off by a dead link "
                                      "may never return) before it is killed and named.")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def run(port, per_host, linger, argv) -> int:
    """Run a command on every host, one rank each (or --ranks-per-host N): commbench lab run -- commbench sweep."""
    from commbench.lab import ranklaunch as labrun

    labrun.check_port(port)  # before the lab (or root) is looked at: 0 would hang, 70000 fail later
    labstate.require_root()
    return labrun.run_everywhere(labstate.require_state(), list(argv), port, per_host, linger)


@lab.command()
def down() -> None:
    """Remove everything `up` made (also after a crash), and nothing else."""

    removed = labmod.down()
    click.echo("lab down: " + (", ".join(removed) if removed else "no lab was up"))


@lab.group(cls=InOrder)
def slurm() -> None:
    """A real Slurm on the lab: munged, slurmctld on the first host, one slurmd per host
    (Debian/Ubuntu: apt-get install slurm-wlm munge)."""


@slurm.command(name="up")
@click.option("--timeout", type=Number(float, 0, DAY_S, low_open=True, example="60"), default=60.0, show_default=True,
              help="Seconds to wait for idle nodes.")
@click.option("--health-check", "health_check", default=None, metavar="PROGRAM",
              help="slurm.conf's HealthCheckProgram: an executable that slurmd runs with no argument on every host "
                   "(HealthCheckNodeState=ANY).")
@click.option("--health-check-interval", "health_check_interval",
              type=Number(int, 1, DAY_S, rule=f"is outside 1..{DAY_S}", example="300"), default=300,
              show_default=True, help="Seconds between two health checks (HealthCheckInterval).")
def slurm_up(timeout, health_check, health_check_interval) -> None:
    """Start munged, slurmctld and the slurmds; wait until every host is idle."""
    from commbench.lab import slurm as labslurm

    state = labslurm.up(timeout, health_check, health_check_interval)
    click.echo(f"lab slurm up: {len(state.nodes)} nodes idle in partition 'lab'; "
               f"SLURM_CONF={labslurm.conf_path()}")
    click.echo("try: commbench lab slurm submit --wait slurm/commbench.sbatch")


@slurm.command(name="status")
def slurm_status() -> None:
    """Daemons, node states (sinfo) and jobs (squeue)."""
    from commbench.lab import slurm as labslurm

    labstate.require_root()
    state = labstate.require_state()
    if not labslurm.is_up(state):
        click.echo("lab slurm: not up ('commbench lab slurm up' starts it)")
        return
    info = labslurm.status(state)
    for name, alive in info["daemons"].items():
        click.echo(f"{name}: {'running' if alive else 'STOPPED'}")
    for node, st in info["nodes"].items():
        click.echo(f"node {node}: {st}")
    click.echo(f"jobs:\n{info['queue']}" if info["queue"] else "jobs: none")
    click.echo(f"SLURM_CONF={info['conf']}")


@slurm.command(name="down")
def slurm_down() -> None:
    """Stop the lab's Slurm and munged and remove their files (the network stays)."""
    from commbench.lab import slurm as labslurm

    labstate.require_root()
    state = labstate.load_state()
    stopped = labslurm.down(state) if state is not None else []
    click.echo("lab slurm down: " + (", ".join(stopped) if stopped else "nothing was running"))


@slurm.command(name="submit", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.option("--wait", "wait_", is_flag=True, help="Wait for the job to end; exit with its result.")
@click.option("--timeout", type=Number(float, 0, WEEK_S, low_open=True, example="600"), default=None,
              help="With --wait: cancel the job after this many seconds.")
@click.argument("script")
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
def slurm_submit(wait_, timeout, script, sbatch_args) -> int:
    """Submit a batch script to the lab's Slurm: extra arguments go to sbatch (before the script).

    The job gets the caller's environment with GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME=eth0, e.g.
    COMMBENCH_ARGS="--sizes 64K,1M" commbench lab slurm submit --wait slurm/commbench.sbatch
    """
    from commbench.lab import slurm as labslurm
    from commbench.core.errors import EXIT_RUNTIME

    labstate.require_root()
    labslurm.require_tools()
    state = labstate.require_state()
    job = labslurm.submit(state, script, list(sbatch_args))
    click.echo(f"Submitted batch job {job}")
    if not wait_:
        return 0
    info = labslurm.wait(state, job, timeout)
    st, code, out = info.get("JobState", "?"), info.get("ExitCode", "?"), info.get("StdOut", "?")
    click.echo(f"job {job} {st} (exit {code}); output: {out}")
    if st == "COMPLETED":
        return 0
    exit_status = code.split(":")[0]
    return int(exit_status) if st == "FAILED" and exit_status.isdigit() and int(exit_status) > 0 else EXIT_RUNTIME
