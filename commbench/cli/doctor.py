"""`commbench doctor`: parse and delegate to net/doctor.py."""

from __future__ import annotations

import click

from commbench.cli.options import DAY_S, Number


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (facts per host, findings, exit code).")
@click.option("--root", "roots", multiple=True, metavar="DIR",
              help="Check a recorded sysfs tree instead of this host (repeat for several hosts).")
@click.option("--timeout", type=Number(float, 0, DAY_S, low_open=True, example="60"), default=60.0, show_default=True,
              help="Seconds to wait for the other hosts under a launcher.")
@click.option("--watch", "watch_s", type=Number(float, 0, DAY_S, low_open=True, example="10"), default=None,
              metavar="S",
              help="Also sample the NIC, port and TCP counters for S seconds and name what rose (errors, drops, "
                   "retransmissions, pause frames, congestion).")
@click.option("--verbose", "-v", is_flag=True,
              help="Also print each host's facts in full (interfaces, RDMA ports, GPUs, NCCL/GLOO settings); "
                   "by default the findings come first and each host gets one line.")
def doctor(as_json, roots, timeout, watch_s, verbose) -> int:
    """Check the network setup for NCCL/gloo: interfaces, RDMA ports, GPUs, NCCL_* settings, across hosts."""
    from commbench.net import doctor as doctoring

    return doctoring.run(as_json=as_json, roots=list(roots), timeout=timeout, watch_s=watch_s,
                          verbose=verbose)
