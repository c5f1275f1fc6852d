"""The settings loop: with --env/--mtu axes (core/settings.py), repetition after repetition, each
setting in turn measures the workload's whole grid once, every other repetition in reverse order
(A B, B A, A B ...: a balanced order, as pyperf alternates its benchmarks), each time on a fresh
process group, everything put back afterwards.

One setting after the other, all its repetitions
at once (A A A B B B), would put a slow drift of the machine (another job, heat, a noisy
neighbour) on the later settings and read as their effect; reversing every other repetition also
cancels a steady drift between two settings over each pair of repetitions, and the setting at a
repetition's end carries on into the next, so an MTU changes R + 1 times rather than 2R (some
NICs reset their link on each change).

Every rank sets the setting's environment variables in its own process; the first local rank of
each host sets an MTU axis's value on --iface. Then a new process group connects: gloo makes its
devices (GLOO_SOCKET_IFNAME) and NCCL tunes its communicator (NCCL_ALGO, NCCL_PROTO) when a group
is made, and TCP keeps the MSS it agreed when it connected. The rows say which setting they were
measured under (Session.record adds the `settings` column) and in which repetition. On the way
out, also on Ctrl-C or a dead rank, the environment and the MTU are restored.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from collections.abc import Callable, Iterator

import torch.distributed as dist

from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.settings import Setting, combinations, from_plan
from commbench.harness.session import Session
from commbench.net import netctl


def settings_of(plan) -> list[Setting]:
    return combinations(from_plan(getattr(plan, "axes", [])))


def axis_interfaces(plan) -> list[str]:
    """The interfaces the run sends over besides the reading rank's own, for the wire counters: the
    axes' (GLOO_SOCKET_IFNAME=eth0,eth1|eth1) and an --iface list's (each local rank its own name,
    core/ifaces.py), so that a host's counters cover every local rank's rail."""
    names = [v for axis in from_plan(getattr(plan, "axes", [])) if axis.name.endswith("_SOCKET_IFNAME")
             for value in axis.values for v in value.lstrip("^=").split(",")]
    iface = getattr(plan, "iface", None)
    if iface and "," in iface:
        names += [n.strip() for n in iface.split(",")]
    return list(dict.fromkeys(n for n in names if n))


def run_each(session: Session, run: Callable[[Session, range], bool]) -> bool:
    """`run(session, repetitions)`: without axes once, with every repetition (the workload loops over
    them itself); with axes once per repetition and setting, repetition outermost, the settings
    in reverse order every other repetition. True if any output was wrong."""
    repetitions = range(session.ctx.plan.repetitions)
    settings = settings_of(session.ctx.plan)
    if not settings:
        return run(session, repetitions)
    original_mtu = _original_mtu(session, settings)
    any_wrong = False
    try:
        for repetition in repetitions:
            for setting in settings if repetition % 2 == 0 else settings[::-1]:
                with _applied(session, setting, repetition):
                    any_wrong |= run(session, range(repetition, repetition + 1))
    finally:
        if original_mtu is not None and _sets_mtu(session):
            netctl.set_mtu(_mtu_iface(session), original_mtu)
    return any_wrong


def _pass_line(setting: Setting, repetition: int, repetitions: int) -> str:
    """The console line before a setting's pass: which setting, and of -R N which repetition."""
    return f"# Settings: {setting.label}" + (f"  (repetition {repetition + 1}/{repetitions})"
                                            if repetitions > 1 else "")


def _sets_mtu(session: Session) -> bool:
    return session.ctx.env.local_rank == 0


def _mtu_iface(session: Session) -> str:
    """--iface, the interface an MTU axis changes (the CLI refuses --mtu without it: cli/measure.py)."""
    iface = session.ctx.plan.iface
    if iface is None:
        raise BadInput("--mtu changes an interface: name it with --iface (e.g. --iface eth0)")
    return iface


def _original_mtu(session: Session, settings: list[Setting]) -> int | None:
    return netctl.get_mtu(_mtu_iface(session)) if settings[0].mtu is not None else None


@contextlib.contextmanager
def _applied(session: Session, setting: Setting, repetition: int) -> Iterator[None]:
    """The setting on every rank, a fresh group for it; the environment as it was afterwards."""
    saved = {name: os.environ.get(name) for name in setting.env}
    try:
        os.environ.update(setting.env)
        if setting.mtu is not None:
            _set_mtu(session, setting.mtu)
        session.reporter.line(_pass_line(setting, repetition, session.ctx.plan.repetitions))
        # new_group's own default timeout is 30 minutes: keep --timeout on every collective
        session.group = dist.new_group(list(range(session.world)),
                                       timeout=timedelta(seconds=session.ctx.plan.timeout))
        session.setting = setting
        try:
            yield
        finally:
            session.setting = None
            group, session.group = session.group, None
            dist.destroy_process_group(group)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _set_mtu(session: Session, mtu: int) -> None:
    """The MTU on --iface of every host (by its first local rank), checked on every rank."""
    iface = _mtu_iface(session)
    if _sets_mtu(session):
        netctl.set_mtu(iface, mtu)
    dist.barrier()
    off = session.sum_over_ranks(int(netctl.get_mtu(iface) != mtu))
    if off:
        raise RuntimeFailure(f"MTU {mtu} did not take on {iface} of {off} rank(s): "
                             "check that every host runs a rank and the interface allows it")
    session.reporter.line(f"# MTU {mtu} on {iface} of every host")
