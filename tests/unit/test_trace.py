"""The trace model (core/trace.py) and its readers (core/tracereaders.py) on the real files in
tests/data/traces/ (one 2-rank gloo DeepSpeed ZeRO-2 job recorded three ways: commbench capture,
an Execution Trace, DeepSpeed's comms logger; README.md there says how), and bad input: another
format, a truncated file, a newer version, each one BadInput line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from commbench.core import trace as tr
from commbench.core.errors import BadInput
from commbench.core.tracereaders import read_any

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
CAPTURE = TRACES / "ds_zero2.trace"
ET = sorted(TRACES.glob("et_rank*.json.gz"))
DS = sorted(TRACES.glob("dscomms_rank*.json"))


def test_capture_reads_in_order_with_groups_steps_and_dtype():
    t = read_any([CAPTURE])
    assert (t.source, t.world_size, t.ordered, t.meta["missing_ranks"]) == ("commbench-capture", 2, True, [])
    assert t.groups["0"] == tr.Group("0", (0, 1), "default_pg")
    ops = t.rank_ops(0)
    assert [o.index for o in ops] == list(range(len(ops)))
    steps = [o for o in ops if o.step is not None]
    assert {o.step for o in steps} == {0, 1}
    gathers = [o for o in steps if o.op == "all_gather"]
    assert {(o.call, o.bytes_in, o.bytes_out, o.dtype) for o in gathers} == {
        ("all_gather_into_tensor", 16736, 33472, "bfloat16")}
    assert all(o.end_ns >= o.start_ns > 1.7e18 for o in ops)


def test_three_sources_of_one_job_agree_on_ops_and_bytes():
    """The Done-when: the Execution Trace and the comms logger of the same steps hold the
    capture's collectives and bytes (barriers aside: log_summary's own barrier is logged)."""
    captured = read_any([CAPTURE])
    for rank in (0, 1):
        want = captured.totals(rank, step_only=True)
        assert want == {"all_gather": (2, 66944), "all_reduce": (8, 133898)}
        assert read_any(ET).totals(rank) == want
        logged = read_any(DS).totals(rank)
        assert logged.pop("barrier") == (1, 0)
        assert logged == want


def test_execution_trace_groups_and_c10d_facts():
    t = read_any(ET)
    assert (t.source, t.world_size, sorted(t.groups)) == ("execution-trace", 2, ["0", "1"])
    assert t.groups["0"].desc == "default_pg" and t.groups["0"].ranks == (0, 1)
    first = t.rank_ops(1)[0]
    assert (first.call, first.op, first.bytes_in, first.bytes_out, first.dtype) == (
        "c10d::allreduce_", "all_reduce", 33472, 33472, "bfloat16")
    gather = next(o for o in t.rank_ops(1) if o.op == "all_gather")
    assert (gather.call, gather.bytes_in, gather.bytes_out) == ("c10d::_allgather_base_", 16736, 33472)


def test_deepspeed_log_is_unordered_and_sized_as_deepspeed_logs():
    t = read_any(DS)
    assert (t.source, t.ordered, t.world_size) == ("deepspeed-comms-logger", False, 2)
    gather = next(o for o in t.rank_ops(0) if o.op == "all_gather")
    assert (gather.call, gather.bytes_in, gather.bytes_out) == ("all_gather_into_tensor", 16736, 33472)
    assert gather.event_ms and gather.event_ms > 0


def test_write_read_round_trip(tmp_path):
    op = tr.Op(rank=1, index=0, op="all_to_all", call="all_to_all_single", group="3", bytes_in=40, bytes_out=32,
               dtype="float32", async_op=True, step=7, in_splits=(6, 4), out_splits=(4, 4), start_ns=1, end_ns=2)
    t = tr.Trace(world_size=2, source="commbench-capture", groups={"3": tr.Group("3", (0, 1), "dp")}, ops=(op,))
    tr.write(t, tmp_path / "t.trace")
    back = tr.read(tmp_path / "t.trace")
    assert back.ops == (op,) and back.groups == t.groups and back.world_size == 2


def test_execution_trace_record_param_comms_style(tmp_path):
    """PARAM's node style (NCCL builds), written here by hand: no such node on CPU/gloo."""
    def attrs(**kv):
        return [{"name": k, "type": "string", "value": v} for k, v in kv.items()]

    nodes = [{"id": 1, "name": "## process_group:init ##", "inputs": {"values": [json.dumps(
                [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4, "group_count": 1}])]}},
             {"id": 2, "name": "record_param_comms", "attrs": attrs(
                 collective_name="allreduce", dtype="BFloat16", in_msg_nelems=1024, out_msg_nelems=1024, pg_name="0")},
             {"id": 3, "name": "record_param_comms", "attrs": attrs(collective_name="wait")},
             {"id": 4, "name": "record_param_comms", "attrs": attrs(
                 collective_name="all_to_allv", dtype="Float", in_msg_nelems=10, out_msg_nelems=12,
                 in_split_size="[4, 6]", out_split_size="[5, 7]", pg_name="0")}]
    path = tmp_path / "rank2.json"
    path.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    t = read_any([path])
    assert t.world_size == 4 and t.groups["0"].ranks == (0, 1, 2, 3)
    assert [(o.rank, o.op, o.bytes_in, o.bytes_out, o.dtype) for o in t.ops] == [
        (2, "all_reduce", 2048, 2048, "bfloat16"), (2, "all_to_all", 40, 48, "float32")]
    assert (t.ops[1].in_splits, t.ops[1].out_splits) == ((4, 6), (5, 7))


def _cut(src: Path, dst: Path) -> Path:
    data = gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return dst


@pytest.mark.parametrize("make, message", [
    (lambda d: _cut(ET[0], d / "et_rank0.json"), "is not JSON (a truncated file?)"),
    (lambda d: _cut(DS[0], d / "ds_rank0.json"), "is not JSON (a truncated file?)"),
    (lambda d: _cut(CAPTURE, d / "cut.trace"), "a truncated"),
    (lambda d: (d / "lines.trace").write_text("".join(CAPTURE.read_text().splitlines(True)[:5])) and d / "lines.trace",
     "holds 4 ops of the 48 its header names (a truncated trace?)"),
    (lambda d: (d / "x.json").write_text('{"rows": []}') and d / "x.json", "is not a trace commbench reads"),
    (lambda d: (d / "x.csv").write_bytes(b"\x00\xffjunk") and d / "x.csv", "cannot read trace"),
    (lambda d: (d / "n.trace").write_text(CAPTURE.read_text().replace('"version":1', '"version":9', 1))
     and d / "n.trace", "has trace version 9, newer than this commbench reads (1): upgrade commbench"),
    (lambda d: (d / "et.json").write_text('{"schema": "2.0.0-chakra", "nodes": []}') and d / "et.json",
     "Execution Trace schema 2.0.0-chakra, newer than this commbench reads"),
    (lambda d: (d / "ds.json").write_text('{"summary": {"all_reduce": {"4": {"count": "x"}}}, "metadata": '
                                          '{"world_size": 2, "rank": 0}}') and d / "ds.json", "is not a whole number"),
], ids=["et-truncated", "ds-truncated", "capture-truncated", "capture-whole-lines", "foreign-json", "binary",
        "newer-version", "et-newer-schema", "ds-bad-count"])
def test_bad_trace_is_one_line(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(BadInput) as err:
        read_any([path])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_mixed_sources_refused():
    with pytest.raises(BadInput, match="mix trace formats"):
        read_any([ET[0], DS[1]])
