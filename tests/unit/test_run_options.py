"""The shared run options are declared once, as RunOptions' flagged fields (core/options.py):
every measuring command takes each with its default, and a child run's flags read back as the
same options."""

from __future__ import annotations

import dataclasses

from commbench.cli.measure import buckets, pairs, sweep, zero
from commbench.cli.tune import tune
from commbench.core.options import RunOptions, child_flags, shared_options


def test_every_measuring_command_takes_every_shared_option_with_its_default():
    shared = {name: default for name, default, _ in shared_options()}
    assert {"warmup", "iters", "time_budget", "precision", "timeout", "backend", "out", "label"} <= set(shared)
    for command in (sweep, buckets, pairs, zero, tune):
        params = {p.name: p.default for p in command.params}
        own = {name: default for name, default, _ in shared_options(command.name)}
        assert {name: params.get(name) for name in own} == own, command.name
        assert not (set(shared) - set(own)) & set(params), command.name  # another command's option: not here
        assert "nproc" in params
    assert {"layout", "group", "solo"} <= set(p.name for p in sweep.params) - set(p.name for p in pairs.params)


def test_a_child_runs_flags_read_back_as_the_same_options():
    run = dataclasses.asdict(RunOptions(warmup=2, iters=7, time_budget=0.5, precision=0.0, repetitions=3,
                                        check=False, wire=False, backend="gloo", bind="none", iface="eth0",
                                        timeout=60.0, label="a b", progress="off"))
    ctx = sweep.make_context("sweep", child_flags(run, leave=("out",)))
    assert {name: ctx.params[name] for name, _, _ in shared_options() if name != "out"} == {
        name: run[name] for name, _, _ in shared_options() if name != "out"}
    assert child_flags(dataclasses.asdict(RunOptions()), leave=("out",))[:2] == ["-w", "5"]
    assert "--iters" not in child_flags(dataclasses.asdict(RunOptions())) and "-n" not in child_flags(
        dataclasses.asdict(RunOptions()))
