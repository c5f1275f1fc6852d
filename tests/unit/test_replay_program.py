"""core/replayprogram.py: what replay issues, worked out from real and made traces (no ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.core import replayprogram as rp
from commbench.core import trace as tr
from commbench.core.errors import BadInput
from commbench.core.tracereaders import read_any

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
CAPTURE = TRACES / "ds_zero2.trace"  # a real 2-rank DeepSpeed ZeRO-2 job, 2 marked steps


def _op(rank, index, op="all_reduce", group="0", size=1024, step=0, start=0, us=100.0, **kw) -> tr.Op:
    begin = 1_000_000_000 + start * 1000
    return tr.Op(rank=rank, index=index, op=op, call=op, group=group, bytes_in=size, bytes_out=size, step=step,
                 start_ns=begin, end_ns=begin + int(us * 1000), **kw)


def _trace(ops, world=2, groups=None) -> tr.Trace:
    groups = groups or {"0": tr.Group("0", tuple(range(world)), "default_pg")}
    return tr.Trace(world_size=world, source="commbench-capture", groups=groups, ops=tuple(ops))


def test_a_real_capture_replays_its_marked_steps_as_one_shape():
    program = rp.build(tr.read(CAPTURE), "ds_zero2.trace")
    assert [s.steps for s in program.shapes] == [(0, 1)]  # the two steps issue the same ops
    shape = program.shapes[0]
    assert [(shape.op_index[k], shape.first(k).op, shape.first(k).bytes) for k in shape.keys()] == [
        (12, "all_reduce", 33472), (13, "all_reduce", 33472), (14, "all_reduce", 1), (15, "all_reduce", 4),
        (16, "all_gather", 33472)]
    assert [g.id for g in program.groups] == ["1"]  # DeepSpeed's own world group, made before the steps
    # per step, the sum over its ops of the least time a rank spent in each; the median of the two steps
    t = tr.read(CAPTURE)
    per_step = [sum(min((o.end_ns - o.start_ns) / 1e3 for o in t.ops if o.step == step and o.index == i)
                    for i in {o.index for o in t.ops if o.step == step}) for step in (0, 1)]
    assert shape.recorded_us == pytest.approx(sum(per_step) / 2)


def test_all_adds_the_unmarked_ops_as_step_minus_1():
    program = rp.build(tr.read(CAPTURE), "x", "all")
    assert [s.step for s in program.shapes] == [-1, 0]
    setup = program.shapes[0]
    assert [setup.first(k).op for k in setup.keys()].count("broadcast") == 12


def test_an_op_time_is_the_rank_that_spent_least_in_it():
    # rank 1 arrived late: rank 0 waited 900 us more in the same all_reduce
    ops = [_op(0, 0, us=1000.0), _op(1, 0, us=100.0)]
    shape = rp.build(_trace(ops), "x").shapes[0]
    assert shape.op_recorded_us[shape.keys()[0]] == pytest.approx(100.0)
    assert shape.recorded_us == pytest.approx(100.0)


def test_steps_that_differ_are_replayed_apart_and_times_are_medians():
    ops = []
    for rank in (0, 1):
        for step, us in enumerate((100.0, 300.0, 200.0)):
            ops.append(_op(rank, step, step=step, start=step * 1000, us=us))
        ops.append(_op(rank, 3, step=3, size=4096, start=5000))
    program = rp.build(_trace(ops), "x")
    assert [s.steps for s in program.shapes] == [(0, 1, 2), (3,)]
    assert program.shapes[0].recorded_us == pytest.approx(200.0)
    assert rp.format_steps(program.shapes[0].steps) == "0-2"


def test_gaps_are_kept_per_op_for_with_gaps():
    ops = [_op(r, i, start=i * 1000, us=100.0) for r in (0, 1) for i in range(2)]  # 900 us between the two
    program = rp.build(_trace(ops), "x", with_gaps=True)
    gaps = [o.gap_s for o in program.shapes[0].ops[0]]
    assert gaps == pytest.approx([0.0, 900e-6])
    assert program.shapes[0].recorded_us == pytest.approx(1100.0)  # the span, first start to last end


def test_point_to_point_ops_pair_sender_and_receiver():
    ops = [_op(0, 0, op="send", peer=1), _op(1, 0, op="recv", peer=0), _op(0, 1, op="send", peer=1),
           _op(1, 1, op="recv", peer=0)]
    shape = rp.build(_trace(ops), "x").shapes[0]
    assert shape.keys() == [("p", 0, 1, 0), ("p", 0, 1, 1)]
    assert shape.ranks_of(("p", 0, 1, 1)) == [0, 1]


@pytest.mark.parametrize("steps, expected", [("0,1", [(0, 1)]), ("1", [(1,)])])
def test_steps_can_be_chosen(steps, expected):
    assert [s.steps for s in rp.build(tr.read(CAPTURE), "x", steps).shapes] == expected


def test_format_steps():
    assert rp.format_steps((0, 1, 2, 5, 7, 8)) == "0-2,5,7,8"
    assert rp.format_steps((-1,)) == "-1"


# ----------------------------------------------------------------------------- refusals (one line each)

def test_a_group_the_trace_never_created_is_refused():
    with pytest.raises(BadInput, match=r"runs on group '5', which the trace never created \(groups: 0\)"):
        rp.build(_trace([_op(0, 0, group="5"), _op(1, 0, group="5")]), "t.trace")


def test_an_aggregated_comms_log_is_refused():
    log = read_any([TRACES / "dscomms_rank0.json", TRACES / "dscomms_rank1.json"])
    with pytest.raises(BadInput, match="keeps no order: replay needs every op in order"):
        rp.build(log, "dscomms")


def test_a_world_the_run_lacks_is_refused_with_the_fix():
    program = rp.build(tr.read(CAPTURE), "ds_zero2.trace")
    with pytest.raises(BadInput, match=r"recorded with 2 ranks and this run has 4: launch 2 ranks \(--nproc 2"):
        rp.check_world(program, 4, "ds_zero2.trace")
    rp.check_world(program, 2, "ds_zero2.trace")


def test_a_step_the_trace_lacks_is_refused():
    with pytest.raises(BadInput, match=r"has no step 7 \(its steps: 0,1\)"):
        rp.build(tr.read(CAPTURE), "x", "7")
    with pytest.raises(BadInput, match="--steps 'first' is not"):
        rp.build(tr.read(CAPTURE), "x", "first")


# ----------------------------------------------------------------------------- --world-size

def test_a_data_parallel_trace_scales_every_op_keeping_its_size():
    program = rp.scaled(rp.build(tr.read(CAPTURE), "x"), 8, "x")
    assert program.world_size == 8 and program.recorded_world == 2
    assert [g.ranks for g in program.groups] == [tuple(range(8))]
    shape = program.shapes[0]
    assert sorted(shape.ops) == list(range(8))
    assert [o.op.bytes for o in shape.ops[7]] == [o.op.bytes for o in shape.ops[0]]
    with pytest.raises(BadInput, match="--world-size 8 replays x at 8 ranks and this run has 2"):
        rp.check_world(program, 2, "x")


def test_a_trace_with_smaller_groups_does_not_scale():
    groups = {"0": tr.Group("0", (0, 1, 2, 3)), "1": tr.Group("1", (0, 1)), "2": tr.Group("2", (2, 3))}
    ops = [_op(r, 0, group="1" if r < 2 else "2") for r in range(4)]
    program = rp.build(_trace(ops, world=4, groups=groups), "tp.trace")
    with pytest.raises(BadInput, match="has groups smaller than its world .* replay it at its 4 ranks"):
        rp.scaled(program, 8, "tp.trace")


def test_point_to_point_does_not_scale():
    ops = [_op(0, 0, op="send", peer=1), _op(1, 0, op="recv", peer=0)]
    with pytest.raises(BadInput, match="point-to-point ops"):
        rp.scaled(rp.build(_trace(ops), "pp.trace"), 4, "pp.trace")


# ----------------------------------------------------------------------------- --layout

def test_layout_replays_the_trace_in_every_data_parallel_group_at_once():
    # 8 ranks, tp=2: dp groups (0,2,4,6) and (1,3,5,7); the 2-rank trace scaled to 4 ranks in each
    program = rp.for_run(rp.build(tr.read(CAPTURE), "x"), 8, "x", layout="tp=2")
    assert program.world_size == 8 and program.recorded_world == 2
    assert [(g.id, g.ranks) for g in program.groups] == [
        ("0@0", (0, 2, 4, 6)), ("1@0", (0, 2, 4, 6)), ("0@1", (1, 3, 5, 7)), ("1@1", (1, 3, 5, 7))]
    shape = program.shapes[0]
    assert sorted(shape.ops) == list(range(8))
    first = shape.ops[3][0].op  # rank 3: the second rank of dp group 1
    assert (first.rank, first.group, first.bytes) == (3, "1@1", 33472 // 2)  # each op carries 1 / (tp x pp)
    assert len(shape.keys()) == 2 * 5 and {k[1] for k in shape.keys()} == {"1@0", "1@1"}
    assert rp.split_group("1@1") == ("1", 1) and rp.split_group("1") == ("1", None)


def test_layout_maps_a_trace_s_peers_into_each_group():
    ops = [_op(0, 0, op="send", peer=1), _op(1, 0, op="recv", peer=0)]
    program = rp.for_run(rp.build(_trace(ops), "pp.trace"), 4, "pp.trace", layout="tp=2")
    sends = {r: o.op.peer for r, ops in program.shapes[0].ops.items() for o in ops if o.op.op == "send"}
    assert sends == {0: 2, 1: 3}  # dp groups (0, 2) and (1, 3): each group's first rank sends to its second
    assert sorted(program.shapes[0].keys()) == [("p", 0, 2, 0), ("p", 1, 3, 0)]


def test_layout_refusals_name_the_fix():
    built = rp.build(tr.read(CAPTURE), "x")
    with pytest.raises(BadInput, match="replay --layout tp=2,dp=1 leaves dp groups of 1 rank"):
        rp.for_run(built, 2, "x", layout="tp=2")
    with pytest.raises(BadInput, match="--world-size 16 and this run's 8 ranks differ"):
        rp.for_run(built, 8, "x", world_size=16, layout="tp=2")
