"""What the harness itself costs a measurement: the timer loop against the loop one writes by
hand, Session.time_call on a real one-rank gloo group (warm-up, batches, the MAX all_reduce
between them, the gathers after), Session.record building a row, ResultWriter appending a
point's batch, and the adaptive StopRule's decisions.

These figures are the harness's overhead per call, per point and per row; the collectives' own
fidelity needs two processes and stays in fidelity.py and bare_loop.py."""

from __future__ import annotations

import math
import socket
import statistics
import sys
import time

import numpy as np
import pytest

ITERS = 10_000  # timed calls of a no-op: the loop's own cost per iteration is the figure
BATCH = 2  # rows a sweep appends at once: a size's out-of-place and in-place points


def noop() -> None:
    return None


def bare_loop(call, iters: int) -> list[float]:
    """The timing loop one writes by hand: perf_counter around each call, appended to a list."""
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


@pytest.mark.benchmark(group="timer loop: 10,000 calls of a no-op")
def test_bare_loop(benchmark):
    out = benchmark(bare_loop, noop, ITERS)
    assert len(out) == ITERS and min(out) >= 0


@pytest.mark.benchmark(group="timer loop: 10,000 calls of a no-op")
def test_cpu_timer_loop(benchmark):
    from commbench.harness.timing import CpuTimer

    out = benchmark(CpuTimer().run, noop, ITERS)
    assert len(out) == ITERS and min(out) >= 0


# ---- a Session on a real one-rank gloo group ----------------------------------------------------


@pytest.fixture(scope="module")
def session():
    """A Session as rank_main builds it, on a one-rank gloo group (in this process, a HashStore:
    no port), with this host's real network facts."""
    import datetime as dt

    import torch
    import torch.distributed as dist

    from commbench.core.binding import current_cpulist
    from commbench.core.launch import RankEnv
    from commbench.core.options import RunOptions
    from commbench.core.results import make_run_id
    from commbench.harness.console import Reporter
    from commbench.harness.session import RunContext, Session
    from commbench.harness.timing import CpuTimer
    from commbench.net.envinfo import iface_facts, traffic_iface
    from commbench.net.netinfo import host_summary

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    excepthook = sys.excepthook  # init_process_group prefixes "[rank0]: " to every later traceback
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        env = RankEnv("local", 0, 1, 0, 1, "127.0.0.1", 29500)
        plan = RunOptions(run_id=make_run_id(), label="bench", wire=False)
        iface = traffic_iface(env.master_addr)
        host = socket.gethostname()
        facts = {"host": host, **iface_facts(iface), "host_net": host_summary(iface)}
        ctx = RunContext(plan, env, "gloo", torch.device("cpu"), "cpu", [host], 1, 1,
                         {**facts, "per_host": {host: facts}}, dt.datetime.now(dt.timezone.utc), None,
                         [current_cpulist()])
        yield Session(ctx=ctx, timer=CpuTimer(), reporter=Reporter(False, 1), writer=None)
    finally:
        dist.destroy_process_group()
        sys.excepthook = excepthook


@pytest.mark.benchmark(group="harness: a point")
def test_time_call(benchmark, session):
    """One adaptive point of a no-op (defaults: 3% precision, 0.05 s budget): what the loop,
    StopRule and the group operations around it cost when the call itself costs nothing."""
    timing = benchmark(session.time_call, noop, "a no-op")
    plan = session.ctx.plan
    assert plan.min_iters <= timing.iters <= plan.max_iters
    assert len(timing.samples_s) == timing.iters and len(timing.ranks.time_s) == 1
    assert session.warmup_done is not None and 1 <= session.warmup_done <= plan.warmup


@pytest.fixture(scope="module")
def measurement(session):
    from commbench.harness.session import Measurement

    timing = session.time_call(noop)
    return Measurement(timing.samples_s, timing.iters, 0, timing.ranks, None)


def point_row(session, measurement, in_place: bool = False) -> dict:
    return session.record(collective="all_reduce", dtype="float32", op="sum", root=-1, size_bytes=1 << 20,
                          count=1 << 18, in_place=in_place, busbw_factor=1.0, m=measurement, repetition=0)


@pytest.mark.benchmark(group="harness: a point")
def test_record(benchmark, session, measurement):
    from commbench.core.results import COLUMNS

    row = benchmark(point_row, session, measurement)
    assert set(row) <= set(COLUMNS)
    assert math.isclose(row["time_us"], statistics.median(measurement.samples_s) * 1e6, rel_tol=1e-12)
    assert row["iters"] == measurement.iters == len(row["samples_us"])


@pytest.mark.benchmark(group="harness: a point")
def test_result_append(benchmark, session, measurement, tmp_path):
    """ResultWriter.append of one size's rows to a run that has rows already: a part of its own,
    written to a temporary and renamed into place (what every point after the first costs)."""
    from commbench.core.results import ResultWriter, read_results

    batch = [point_row(session, measurement, in_place) for in_place in (False, True)]
    assert len(batch) == BATCH
    writers = []

    def fresh():
        writer = ResultWriter(tmp_path / f"run-{len(writers)}.parquet")
        writer.create()
        writer.append(batch)  # the first batch is the file itself; the timed one is a part
        writers.append(writer)
        return (writer, batch), {}

    benchmark.pedantic(lambda writer, rows: writer.append(rows), setup=fresh, rounds=100, iterations=1)
    last = writers[-1]
    df = read_results([last.path])  # the file and its part, as a reader sees a running run
    assert len(df) == 2 * BATCH and sorted(df["in_place"]) == [False, False, True, True]
    assert np.allclose(df["time_us"], batch[0]["time_us"])
    last.close()
    assert len(read_results([last.path])) == 2 * BATCH and not last.parts.exists()


# ---- StopRule ------------------------------------------------------------------------------------


def _rule():
    from commbench.core.options import RunOptions
    from commbench.harness.timing import StopRule

    o = RunOptions()
    return StopRule(o.time_budget, o.min_iters, o.max_iters, o.precision)


def _times(n: int, spread: float, typical_s: float, seed: int = 19) -> list[float]:
    """Per-iteration maxima of a collective: lognormal around `typical_s`, with the odd 3x stall."""
    rng = np.random.default_rng(seed)
    t = typical_s * rng.lognormal(0.0, spread, n)
    t[rng.random(n) < 0.02] *= 3
    return t.tolist()


@pytest.mark.benchmark(group="StopRule")
def test_stop_rule_check_at_1000(benchmark):
    """One decision after 1,000 noisy iterations of 10 us (the CI of the median over 1,000
    values; 20 ms of the 50 ms budget spent)."""
    from commbench.core.stats import median_ci_halfwidth

    rule, slowest = _rule(), _times(1000, 1.0, 10e-6)
    assert median_ci_halfwidth(slowest) > rule.precision  # too noisy to stop: the rule must ask for more
    batch = benchmark(rule.next_batch, slowest)
    assert 0 < batch <= rule.max_iters - len(slowest)


def run_point(rule, stream: list[float]) -> tuple[int, int]:
    """Batches as Session._until_precise asks for them, from a stream of iteration times:
    (iterations, checks)."""
    slowest: list[float] = []
    checks = 1
    batch = rule.next_batch(slowest)
    while batch:
        slowest += stream[len(slowest):len(slowest) + batch]
        batch = rule.next_batch(slowest)
        checks += 1
    return len(slowest), checks


@pytest.mark.benchmark(group="StopRule")
def test_stop_rule_whole_point(benchmark):
    """Every decision of one point of 100 us iterations, from the first batch to the stop, at a
    10% spread."""
    from commbench.core.stats import median_ci_halfwidth

    rule = _rule()
    stream = _times(rule.max_iters, 0.1, 100e-6)
    n, checks = benchmark(run_point, rule, stream)
    assert rule.min_iters <= n <= rule.max_iters
    assert median_ci_halfwidth(stream[:n]) <= rule.precision or n == rule.max_iters
    assert checks <= 12  # a handful of checks a point, never one per iteration
