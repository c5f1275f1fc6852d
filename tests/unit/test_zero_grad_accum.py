"""zero --grad-accum / --overlap / --curve: the reductions per optimizer step as DeepSpeed 0.19.8
issues them per stage and micro-batch, reductions kept in flight as overlap_comm does, a
prediction from a measured curve, and the refusals (exit 2, one line)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commbench.analysis.tune.predict import load_curve
from commbench.cli.app import main
from commbench.core.errors import BadInput
from commbench.core.results import SCHEMA, SCHEMA_VERSION
from commbench.harness import collectives
from commbench.workloads import zero as zeroing
from commbench.workloads.dsengine import reduction_sizes
from commbench.workloads.zero import ZeroPlan, ZeroWorkload
from commbench.workloads.zeroschedule import Comm, curve_comms, in_flight, module_sizes, param_count, step_schedule

SHAPE = dict(layers=2, hidden=64, vocab=256)  # P = 132 480 elements, the engine's small model
P = param_count(2, 64, 256)


def reductions(stage, g, bucket=10**9, multi_rank=True, world=2):
    sched = step_schedule(stage, module_sizes(2, 64, 256), bucket, 5 * 10**7, g, multi_rank)
    return {op: Counter(sizes) for op, sizes in reduction_sizes(curve_comms(sched, 2, world)).items()}


@pytest.mark.parametrize("g", [1, 4, 8])
def test_reductions_per_step_follow_deepspeed_per_stage(g):
    # stage 0 and 1 reduce at the accumulation boundary only (engine.py allreduce_gradients),
    # stage 2 after every micro-batch (stage_1_and_2.py L2293), stage 3 too (stage3.py L2160)
    assert reductions(0, g) == {"all_reduce": Counter({2 * P: 1})}
    assert reductions(1, g) == {"all_reduce": Counter({2 * P: 1})}
    assert reductions(2, g) == {"all_reduce": Counter({2 * P: g})}
    assert reductions(3, g) == {"reduce_scatter": Counter({2 * P: g})}
    # reduce to the owners: one reduce of half the bucket per rank, per micro-batch in stage 2
    assert reductions(2, g, multi_rank=False) == {"reduce": Counter({P: 2 * g})}


def test_buckets_multiply_with_the_micro_batches():
    got = reductions(2, 4, bucket=50_000)
    assert sum(got["all_reduce"].values()) == 4 * 3  # 132 480 elements in buckets of 5e4: 3 per micro-batch
    assert sum(got["all_reduce"].elements()) == 4 * 2 * P


def test_the_grad_accum_axis_runs_every_value_with_every_stage_and_bucket():
    w = ZeroWorkload(ZeroPlan(stages=[1, 2], grad_accums=[1, 4], reduce_bucket_sizes=[10**6, 10**8], **SHAPE))
    assert w.settings() == [(g, b, s) for g in (1, 4) for b in (10**6, 10**8) for s in (1, 2)]
    assert w.total_points(2) == 8
    # without the axis: the config's gradient_accumulation_steps alone
    assert ZeroWorkload(ZeroPlan(stages=[2], micro_batches=8, **SHAPE)).grad_accums() == [8]
    n2 = len(w.schedule(2, 2, 10**8, 4))
    assert n2 == 4 + 1 and len(w.schedule(1, 2, 10**8, 4)) == 2


@pytest.mark.parametrize("stage, overlap, depth", [
    (0, True, 1), (1, True, 2), (2, True, 2), (3, True, 3), (2, False, 1), (3, False, 1),
    (1, None, 1), (2, None, 1), (3, None, 3),  # DeepSpeed's default: overlap_comm on for stage 3 only
])
def test_reductions_in_flight_per_stage(stage, overlap, depth):
    assert in_flight(stage, overlap) == depth


class _Work:
    def __init__(self, log, name):
        self.log, self.name, self.done = log, name, False
        log.append(("start", name))

    def wait(self):
        self.done = True
        self.log.append(("wait", self.name))


def test_overlap_keeps_that_many_reductions_in_flight_and_gathers_wait_for_them(monkeypatch):
    log, works = [], []

    def launch(name):
        def call(*args, **kwargs):
            assert kwargs.get("async_op") is True
            works.append(_Work(log, name))
            return works[-1]
        return call

    # zero starts its collectives through their one torch binding (harness/collectives.py)
    monkeypatch.setattr(collectives.dist, "all_reduce", launch("all_reduce"))
    monkeypatch.setattr(collectives, "all_gather_flat", launch("all_gather"))
    sched = [Comm("all_reduce", 8, "backward")] * 5 + [Comm("all_gather", 8, "step")]
    zeroing._bind(sched, zeroing.torch.float32, "cpu", 2, depth=2)()
    pending, most = 0, 0
    for what, name in log:
        if name == "all_reduce":
            pending += 1 if what == "start" else -1
            most = max(most, pending)
        elif what == "start":
            assert pending == 0, "the all-gather started while reductions were in flight"
    assert most == 2 and all(w.done for w in works)
    log.clear()
    zeroing._bind(sched, zeroing.torch.float32, "cpu", 2, depth=1)()
    assert [what for what, _ in log] == ["start", "wait"] * 6  # off: one at a time


def write_curve(path, points, world=2, dtype="bfloat16"):
    rows = [dict(collective=c, dtype=dtype, size_bytes=s, world_size=world, time_us=t, busbw_GBps=1.0,
                 workload="sweep", in_place=False, schema_version=SCHEMA_VERSION) for c, s, t in points]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return str(path)


def full_curve(path, world=2):
    # time = size / 1 GB/s + 10 us per call, at 1 KiB and 1 GiB (straight in log-log between: not
    # exact in between, so the test asks the curve itself for the per-call times)
    pts = [(c, s, 10 + s / 1e3) for c in ("all_reduce", "all_gather", "reduce_scatter", "reduce")
           for s in (1024, 1 << 30)]
    return write_curve(path, pts, world)


def test_prediction_is_calls_times_the_curve_at_full_scale(tmp_path):
    path = full_curve(tmp_path / "curve.parquet")
    plan = ZeroPlan(stages=[0, 2, 3], grad_accums=[1, 4], scale=0.01, curve=[path], **SHAPE)
    w = ZeroWorkload(plan)
    w.validate(2)
    curve = load_curve([path])
    t = curve.time_us("all_reduce", 2 * P, 2, "bfloat16")
    # stage 2 at GAS 4: four all-reduces of the whole gradient and one all-gather, at FULL size
    assert w.predicted_us(2, plan.reduce_bucket_size, 4) == pytest.approx(
        4 * t + curve.time_us("all_gather", 2 * P, 2, "bfloat16"))
    assert w.predicted_us(0, plan.reduce_bucket_size, 4) == pytest.approx(t)
    one = w.predicted_us(3, plan.reduce_bucket_size, 1)
    assert w.predicted_us(3, plan.reduce_bucket_size, 4) == pytest.approx(4 * one)
    assert len(plan.predicted) == 6


def test_a_curve_without_the_needed_collective_or_at_another_world_is_refused(tmp_path):
    only_ar = write_curve(tmp_path / "ar.parquet", [("all_reduce", 1024, 10.0), ("all_reduce", 1 << 30, 1e6)])
    with pytest.raises(BadInput, match="no all_gather rows"):
        ZeroWorkload(ZeroPlan(stages=[2], curve=[only_ar], **SHAPE)).validate(2)
    ZeroWorkload(ZeroPlan(stages=[0], curve=[only_ar], **SHAPE)).validate(2)  # stage 0 needs all_reduce only
    with pytest.raises(BadInput, match="measured at 2 ranks, the schedule runs on 4"):
        ZeroWorkload(ZeroPlan(stages=[0], curve=[only_ar], **SHAPE)).validate(4)


@pytest.mark.parametrize("args, message", [
    (["--grad-accum", "0"], "whole numbers from 1 to 1024"),
    (["--grad-accum", "x"], "not a list of whole numbers"),
    (["--grad-accum", "2000"], "whole numbers from 1 to 1024"),
    (["--overlap", "on", "--engine", "deepspeed"], "overlap_comm from --ds-config"),
    (["--curve", "CURVE", "--engine", "deepspeed"], "drop --curve"),
    (["--curve", "AR", "--stages", "2"], "no all_gather rows"),
    (["--curve", "AR", "--stages", "0", "--nproc", "3"], "the schedule runs on 3"),
    (["--curve", "SMALL", "--stages", "0", "--layers", "2", "--hidden", "64", "--vocab", "256"],
     "outside the curve's measured"),
    (["--curve", "/nonexistent/curve.parquet"], "does not exist"),
])
def test_bad_axis_or_curve_is_one_line_exit_2(tmp_path, capsys, args, message):
    files = {"CURVE": full_curve(tmp_path / "full.parquet"),
             "AR": write_curve(tmp_path / "ar.parquet", [("all_reduce", 1024, 10.0), ("all_reduce", 1 << 34, 1e7)]),
             "SMALL": write_curve(tmp_path / "small.parquet", [("all_reduce", 1024, 10.0), ("all_reduce", 4096, 20.0)])}
    args = [files.get(a, a) for a in args]
    with pytest.raises(SystemExit) as info:
        main(["zero", "--out", str(tmp_path / "out"), "--scale", "0.001", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("args, flag", [
    (["--layout", "dp=auto"], "--layout"),
    (["--order", "dp-tp"], "--order"),
    (["--group", "dp"], "--group"),
    (["--solo"], "--solo"),
])
def test_the_engine_refuses_the_schedules_groups(tmp_path, capsys, args, flag):
    """The DeepSpeed engine trains over every rank as one group (core/workloadspec.py: deepspeed takes
    no --layout family); zero takes them for its schedule, so the engine refuses rather than ignore them."""
    with pytest.raises(SystemExit) as info:
        main(["zero", "--out", str(tmp_path / "out"), "--engine", "deepspeed", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1, err
    assert err[0] == (f"commbench: {flag} runs the schedule in parallel groups, and the DeepSpeed engine trains "
                      "over every rank as one: drop it, or drop --engine deepspeed"), err


def test_compare_keeps_each_grad_accum_value_its_own_point(tmp_path):
    """Rows of one stage and bucket at GAS 1 and GAS 4 are two points, not repetitions of one."""
    from commbench.analysis.compare import compare as cmp
    from unit.synthetic import frame, make_rows

    def side(run_id, name):
        rows = []
        for gas in (1, 4):
            for r in make_rows(collectives=("all_reduce",), sizes=(1 << 24,), placements=(True,), repetitions=3,
                               run_id=run_id, seed=gas):
                rows.append(dict(r, workload="zero", zero_stage=2, bucket_bytes=1 << 24, grad_accum=gas,
                                 time_us=r["time_us"] * gas))
        return frame(rows, tmp_path, name)

    c = cmp.compare_frames(side("20250101-000000-aaaaaa", "a.parquet"), side("20250102-000000-bbbbbb", "b.parquet"))
    assert len(c.points) == 2
