"""commbench.net.nccltuning: the algorithm and protocol NCCL chose per collective and size, from
recorded NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING output (tests/data/nccl_debug/README.md names
every file's source and NCCL version), into the `nccl_algo` / `nccl_proto` columns of a sweep's
rows and of imported nccl-tests rows.

Where a test puts real lines of two sources together (no recorded log has both), it says so.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commbench.core.errors import BadInput
from commbench.core.results import ResultWriter
from commbench.integrations.nccl_tests.importer import parse_file
from commbench.integrations.nccl_tests.records import RecordBuilder, base_columns
from commbench.integrations.nccl_tests.text import parse_text
from commbench.net.ncclinfo import enable_debug_file, record_debug
from commbench.net.nccltuning import DEFAULT_SUBSYS, TuningCollector, collect, merged_subsys

DATA = Path(__file__).resolve().parents[1] / "data"
DEBUG = DATA / "nccl_debug"
ISSUE_1453 = "nccl1453_nccl2.22_24xH100_all_reduce_perf_{}.log"


def lines(name: str) -> list[str]:
    return (DEBUG / name).read_text().splitlines()


def rows(collective: str, sizes: list[int], world: int, settings: str | None = None) -> list[dict]:
    return [{"collective": collective, "size_bytes": s, "world_size": world, "settings": settings,
             "nccl_algo": None, "nccl_proto": None} for s in sizes]


def chosen(rs: list[dict]) -> list[tuple]:
    return [(r["nccl_algo"], r["nccl_proto"]) for r in rs]


# ---- the three shapes NCCL printed ------------------------------------------------------------


def test_named_shape_2_24_and_later_counts_one_ranks_part_of_all_gather():
    """NVIDIA/nccl#1906 (2.26/2.27, 8 GPUs): AllGather prints sendcount x item size, S / n."""
    c = collect(lines("nccl1906_nccl2.27_8xGPU_allgather.log"))
    assert dict(c.choices) == {(0, "all_gather", 579600, True): {("NVLS", "Simple"): 1},
                               (0, "all_gather", 515200, True): {("Ring", "LL"): 1}}
    rs = rows("all_gather", [579600 * 8, 515200 * 8, 579600, 4121600 + 1], world=8)
    assert c.fill(rs) == 2
    assert chosen(rs) == [("NVLS", "Simple"), ("Ring", "LL"), (None, None), (None, None)]


def test_named_shape_with_the_host_prefix_and_coll_lines_of_every_rank():
    """A 2 x 8-GPU SGLang deployment, NCCL 2.27.5: the 4-byte AllReduce went Tree/LL by default
    and Ring/Simple once NCCL_ALGO=Ring NCCL_PROTO=Simple were set; only rank 0 prints the choice,
    and only rank 0's "Init COMPLETE" starts a communicator."""
    default = collect(lines("sglang_notes_nccl2.27.5_16rank_default.log"))
    forced = collect(lines("sglang_notes_nccl2.27.5_16rank_algo_ring.log"))
    assert dict(default.choices) == {(0, "all_reduce", 4, False): {("Tree", "LL"): 1}}
    assert dict(forced.choices) == {(1, "all_reduce", 4, False): {("Ring", "Simple"): 1}}
    assert forced.comm == 1  # ranks 2, 4 and 6 also printed Init COMPLETE: not counted
    assert default.choice("all_reduce", 4, 16) == ("Tree", "LL")
    assert forced.choice("all_reduce", 4, 16) == ("Ring", "Simple")
    assert default.choice("all_reduce", 8, 16) is None


def test_numeric_shape_of_2_23_counts_the_whole_all_gather():
    """awslabs/ai-on-eks (FSDP on 4 nodes, NCCL 2.23 by the shape): the AllGather's bytes are
    nranks x count x 4 of its COLL lines (count 2359808, datatype 7 = float32, nranks=4)."""
    text = lines("ai-on-eks_nccl2.23_4node_fsdp_allgather_coll.log")
    assert 4 * 2359808 * 4 == 37756928
    c = collect(text)
    assert dict(c.choices) == {(0, "all_gather", 37756928, False): {("Ring", "Simple"): 1}}
    rs = rows("all_gather", [37756928, 37756928 // 4], world=4)
    assert c.fill(rs) == 1 and chosen(rs) == [("Ring", "Simple"), (None, None)]


def test_unnamed_shape_of_2_20_to_2_22_fills_a_run_of_one_collective():
    """NVIDIA/nccl#1453 (NCCL 2.22, 24 x H100, all_reduce_perf through mpiexec -prepend-rank):
    the line names no collective, so it fills only a run that measured one."""
    c = TuningCollector()
    for part in ("header", "8B", "256B_512B", "64K_128K", "256K"):
        for line in lines(ISSUE_1453.format(part)):
            c.feed(line)
    assert {k[2]: dict(v) for k, v in c.choices.items()} == {
        8589934592: {("Ring", "Simple"): 1}, 8: {("Tree", "LL"): 14}, 256: {("Tree", "LL"): 11},
        512: {("Tree", "LL"): 2}, 65536: {("Tree", "LL"): 6}, 131072: {("Tree", "LL128"): 7},
        262144: {("Tree", "LL128"): 14}}
    assert {k[1] for k in c.choices} == {None}
    one = rows("all_reduce", [8, 256, 131072, 262144, 1024], world=24)
    assert c.fill(one) == 4
    assert chosen(one) == [("Tree", "LL"), ("Tree", "LL"), ("Tree", "LL128"), ("Tree", "LL128"), (None, None)]
    two = rows("all_reduce", [8], 24) + rows("reduce_scatter", [8 * 24], 24)
    assert c.fill(two) == 0  # which of the two the line was for, NCCL did not say


def test_unnamed_shape_takes_the_collective_of_the_process_coll_line():
    """Put together from two sources (no recorded log has both): a COLL line of ai-on-eks' and a
    tuning line of #1453's, the tuning line's host:pid made the COLL line's."""
    coll = lines("ai-on-eks_nccl2.23_4node_fsdp_allgather_coll.log")[1]  # 1: node-3:278:278 ... AllGather
    tune = lines(ISSUE_1453.format("256K"))[0].replace("h100clust-worker-1:497888:497888", "node-3:278:278")
    c = collect([coll, tune])
    assert dict(c.choices) == {(0, "all_gather", 262144, False): {("Tree", "LL128"): 1}}
    other_process = collect([coll, lines(ISSUE_1453.format("256K"))[0]])
    assert list(other_process.choices) == [(0, None, 262144, False)]


def test_a_commbench_run_without_tuning_in_the_subsystems_says_no_choice():
    """tests/data/ncclinfo: a real `sweep --nccl-debug` debug file of NCCL 2.28.9 recorded before
    TUNING was added: one communicator (ncclCommInitRankConfig ... Init COMPLETE), no choice."""
    c = collect((DATA / "ncclinfo" / "h200_1rank_nccl2.28.9_sweep.nccl-debug.log").read_text().splitlines())
    assert c.comm == 1 and dict(c.choices) == {}


def test_numbers_of_the_older_shapes_are_nccl_enum_values():
    """NVIDIA/nccl#1595 (8 x H100, NCCL_PROTO=Simple): 'Algo 1 proto 2' is Ring/Simple."""
    c = collect(lines("nccl1595_nccl2.2x_8xH100_allreduce_proto_simple.log"))
    assert c.choice("all_reduce", 805306368, 8, only_collective=True) == ("Ring", "Simple")
    assert c.choice("all_reduce", 1026048, 8, only_collective=True) == ("Ring", "Simple")


# ---- several choices, several settings ----------------------------------------------------------


def test_the_most_frequent_choice_wins_and_a_tie_goes_to_the_first_printed():
    default = lines("sglang_notes_nccl2.27.5_16rank_default.log")
    forced = lines("sglang_notes_nccl2.27.5_16rank_algo_ring.log")
    tie = collect(default + forced)
    assert tie.choice("all_reduce", 4, 16) == ("Tree", "LL")
    more = collect(default + forced + forced)
    assert more.choice("all_reduce", 4, 16) == ("Ring", "Simple")


def test_rows_of_each_setting_take_their_own_communicator():
    """--env runs each setting on a fresh communicator: the last ones, in order, are the settings'."""
    c = collect(lines("sglang_notes_nccl2.27.5_16rank_default.log")
                + lines("sglang_notes_nccl2.27.5_16rank_algo_ring.log"))
    assert c.comms() == [0, 1]
    rs = rows("all_reduce", [4], 16, "NCCL_ALGO=Tree") + rows("all_reduce", [4], 16, "NCCL_ALGO=Ring")
    assert c.fill(rs) == 2 and chosen(rs) == [("Tree", "LL"), ("Ring", "Simple")]
    three = rs[:1] + rows("all_reduce", [4], 16, "A=1") + rows("all_reduce", [4], 16, "A=2")
    for r in three:
        r["nccl_algo"] = r["nccl_proto"] = None
    assert c.fill(three) == 0  # fewer communicators than settings: nothing is guessed


def test_with_repetitions_each_pass_of_a_setting_takes_its_own_communicator():
    """Every repetition applies each setting on a fresh communicator again: a pass is a
    (repetition, setting). Real lines of two sources: each block gets the ring log's rank-0 "Init
    COMPLETE" line, and the blocks are put in an order no setting would give (Tree, Ring, Ring,
    Tree), so that a row of the first repetition taking a later pass's communicator would show."""
    ring = lines("sglang_notes_nccl2.27.5_16rank_algo_ring.log")
    ready = next(line for line in ring if "rank 0 nranks" in line and "Init COMPLETE" in line)
    tree = [ready] + lines("sglang_notes_nccl2.27.5_16rank_default.log")
    ring = [ready] + [line for line in ring if "Init COMPLETE" not in line]
    c = collect(tree + ring + ring + tree)
    assert c.comms() == [1, 2, 3, 4]
    rs = [dict(r, repetition=rep) for rep in (0, 1) for r in rows("all_reduce", [4], 16, "X=1")
          + rows("all_reduce", [4], 16, "X=2")]
    assert c.fill(rs) == 4 and chosen(rs) == [("Tree", "LL"), ("Ring", "Simple"), ("Ring", "Simple"), ("Tree", "LL")]
    one = [dict(r, repetition=rep) for rep in (0, 1) for r in rows("all_reduce", [4], 16, "X=1")]
    assert c.fill(one) == 2  # one setting: every communicator is its own, however many repetitions


def test_a_row_that_has_a_choice_or_is_not_a_commbench_collective_is_left_alone():
    c = collect(lines("sglang_notes_nccl2.27.5_16rank_default.log"))
    rs = rows("all_reduce", [4], 16) + rows("hypercube", [4], 16)
    rs[0]["nccl_algo"], rs[0]["nccl_proto"] = "Ring", "LL"
    assert c.fill(rs) == 0 and chosen(rs) == [("Ring", "LL"), (None, None)]


# ---- lines of other shapes ----------------------------------------------------------------------


OTHER_LINES = [
    "[0] h100clust-worker-1:497888:497888 [0] NCCL INFO 512 Bytes -> Algo 0 pr",  # cut (#1453's excerpt)
    "n129-118-012:1802:1851 [0] NCCL INFO Latency/AlgBw |    Tree/    LL |    Tree/ LL128 |",  # #89's table
    "n129-118-012:1802:1851 [0] NCCL INFO     Broadcast |     0.0/   0.0 |     0.0/   0.0 |",
    "host:1:1 [0] NCCL INFO AllReduce: 4 Bytes -> Algo RING proto 2 channel{Lo..Hi}={0..0}",  # mixed
    "host:1:1 [0] NCCL INFO 4 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",  # named, no function
    "host:1:1 [0] NCCL INFO AllReduce: 4 Bytes -> Algo 7 proto 2 time 1.0",  # no such algorithm
    "host:1:1 [0] NCCL INFO AllReduce: 4 Bytes -> Algo 1 proto 3 time 1.0",  # no such protocol
    "host:1:1 [0] NCCL INFO AllReduce: 4 Bytes -> Algo UNDEF proto SIMPLE channel{Lo..Hi}={0..0}",
    "host:1:1 [0] NCCL INFO Hypercube: 4 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",
    "host:1:1 [0] NCCL INFO AllReduce: -4 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",
    "host:1:1 [0] NCCL INFO AllReduce: 4 Bytes -> Algo RINGX proto SIMPLE",
    "host:1:1 [0] NCCL WARN AllReduce: 4 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",
    "AllReduce: 4 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",  # no NCCL INFO
    "host:1:1 [0] NCCL INFO AllReduce: 4\u00a0Bytes -> Algo RING proto SIMPLE",
    "",
]


def test_lines_of_other_shapes_and_damaged_lines_are_ignored():
    c = collect(OTHER_LINES)
    assert dict(c.choices) == {} and c.comms() == []
    assert c.fill(rows("all_reduce", [4, 512], 16)) == 0


def test_random_damage_never_raises():
    rnd = random.Random(17)
    real = [ln for name in sorted(os.listdir(DEBUG)) if name.endswith(".log") for ln in lines(name)]
    c = TuningCollector()
    for _ in range(3000):
        line = list(rnd.choice(real))
        for _ in range(rnd.randint(1, 4)):
            i = rnd.randrange(len(line) + 1)
            line[i:i + rnd.randint(0, 3)] = rnd.choice(["", "9" * 25, "\x00", "é", " ", "Algo", ":", "{"])
        c.feed("".join(line))
    c.fill(rows("all_gather", [0, 1, 8, 2 ** 62], 0) + [{"collective": None, "size_bytes": "x"}])


# ---- NCCL_DEBUG_SUBSYS --------------------------------------------------------------------------


@pytest.mark.parametrize("current, merged", [
    (None, DEFAULT_SUBSYS),
    ("", DEFAULT_SUBSYS),
    ("  ", DEFAULT_SUBSYS),
    ("INIT", "INIT,NET,TUNING"),
    ("coll,init", "coll,init,NET,TUNING"),
    ("INIT,TUNING,NET", "INIT,TUNING,NET"),
    ("COLL, ENV ,", "COLL,ENV,INIT,NET,TUNING"),
    ("ALL", "ALL"),
    ("all,COLL", "all,COLL"),
    ("^TUNING,COLL", "^COLL"),
    ("^tuning", "ALL"),
    ("^ALLOC", "^ALLOC"),
])
def test_the_users_nccl_debug_subsys_is_kept_and_what_is_needed_added(current, merged):
    assert merged_subsys(current) == merged


def test_enable_debug_file_merges_nccl_debug_subsys(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "COLL")
    enable_debug_file(str(tmp_path), "run1", "nccl")
    assert os.environ["NCCL_DEBUG_SUBSYS"] == "COLL,INIT,NET,TUNING"
    monkeypatch.delenv("NCCL_DEBUG_SUBSYS")
    enable_debug_file(str(tmp_path), "run2", "nccl")
    assert os.environ["NCCL_DEBUG_SUBSYS"] == "INIT,BOOTSTRAP,ENV,NET,TUNING"
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "INIT")
    with pytest.raises(BadInput):
        enable_debug_file(str(tmp_path), "run3", "gloo")
    assert os.environ["NCCL_DEBUG_SUBSYS"] == "INIT"  # refused: nothing changed


# ---- a sweep's rows (rank 0's debug file) ---------------------------------------------------------


def test_record_debug_fills_the_results_file(tmp_path):
    """Put together from two sources: the rows of a real all_reduce_perf log (8 x A100, sizes 8 B to
    128 MiB) and #1453's tuning lines as rank 0's debug file; read back from the parquet file."""
    parsed = parse_file(DATA / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt", "20250101-000000-abcdef")
    writer = ResultWriter(tmp_path / "r.parquet")
    writer.create()
    writer.append(parsed.records)
    debug = tmp_path / "r.nccl-debug.node1.4242.log"
    debug.write_text("\n".join(lines(ISSUE_1453.format("8B")) + lines(ISSUE_1453.format("64K_128K"))) + "\n")
    (tmp_path / "r.nccl-debug.node1.4243.log").write_text("\n".join(lines(ISSUE_1453.format("256K"))))  # rank 1's
    record_debug(writer, {"NCCL_DEBUG_FILE": str(tmp_path / "r.nccl-debug.%h.%p.log")}, pid=4242)
    back = pq.read_table(tmp_path / "r.parquet").to_pylist()
    got = {(r["size_bytes"], r["nccl_algo"], r["nccl_proto"]) for r in back}
    assert {g for g in got if g[1] is not None} == {(8, "Tree", "LL"), (65536, "Tree", "LL"),
                                                   (131072, "Tree", "LL128")}
    assert (262144, None, None) in got  # only another rank's file named it
    assert {r["transport"] for r in back} == {None}


def test_record_debug_without_a_debug_file_changes_nothing(tmp_path):
    writer = ResultWriter(tmp_path / "r.parquet")
    writer.create()
    writer.append(parse_file(DATA / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt", "20250101-000000-abcdef"
                             ).records)
    record_debug(writer, {}, pid=1)
    record_debug(writer, {"NCCL_DEBUG_FILE": str(tmp_path / "none.%h.%p.log")}, pid=1)
    assert {r["nccl_algo"] for r in pq.read_table(tmp_path / "r.parquet").to_pylist()} == {None}


# ---- nccl-tests output with NCCL's lines inside its rows ------------------------------------------


def builder(name: str = "all_reduce_perf.log") -> RecordBuilder:
    return RecordBuilder(base_columns("20250101-000000-abcdef", "", dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
                                      {}, {"source": "import"}), None, "all_reduce", name)


@pytest.mark.parametrize("part, cut", [("header", 0), ("8B", 0), ("256B_512B", 1), ("64K_128K", 1), ("256K", 0)])
def test_issue_1453_excerpts_read_without_error(part, cut):
    """Each excerpt as recorded: the pieces of rows whose start or end lies outside it are counted
    and skipped; the tuning lines, glued to row pieces or not, are all read."""
    text = (DEBUG / ISSUE_1453.format(part)).read_text()
    p = parse_text(text, part, builder(), strict=False)
    assert p.records == []
    assert p.skipped == ({"cut apart by NCCL debug lines": cut} if cut else {})
    with pytest.raises(BadInput, match="no nccl-tests result rows"):
        parse_text(text, part, builder())


def assembled(tagged: bool) -> str:
    """Three real pieces of #1453's output that belong to different rows (the 512 B row's start,
    the 8 B row's out-of-place results, the 256 B row's in-place results), with real tuning lines
    between them, in the order nccl-tests prints a row: the joining is checked, not the numbers.
    Untagged: the launcher's "[0]" tags taken out, as a run without mpiexec prints it."""
    header = lines(ISSUE_1453.format("header"))
    start = lines(ISSUE_1453.format("256B_512B"))[12:14]
    middle = lines(ISSUE_1453.format("8B"))[11:13]
    end = lines(ISSUE_1453.format("256B_512B"))[11:12]
    out = header + start + middle + end
    if not tagged:
        out = [ln.replace("-1[0] ", "-1").replace("0[0] ", "0").removeprefix("[0] ") for ln in out]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("tagged", [True, False])
def test_a_row_cut_apart_by_nccl_lines_is_put_back_together(tagged):
    p = parse_text(assembled(tagged), "all_reduce_perf.log", builder())
    assert [(r["size_bytes"], r["count"], r["in_place"], r["time_us"], r["nccl_algo"], r["nccl_proto"])
            for r in p.records] == [(512, 128, False, 64.18, "Tree", "LL"), (512, 128, True, 62.05, "Tree", "LL")]
    assert p.skipped == {}


def test_an_unglued_host_that_a_rank_line_named():
    """Without the launcher's tag, the host runs into the row's root field ("-1h100clust-..."); a
    host starting with digits is found through the Rank line that names it."""
    text = assembled(False).replace("h100clust-worker-1", "10-90-43-152")
    rank = "#  Rank  0 Group  0 Pid 497888 on 10-90-43-152 device  0 [0xa4] NVIDIA H100 80GB HBM3"
    p = parse_text(rank + "\n" + text, "all_reduce_perf.log", builder())
    assert [r["size_bytes"] for r in p.records] == [512, 512]
    assert p.records[0]["hosts"] == ["10-90-43-152"]
    without_rank = parse_text(text, "all_reduce_perf.log", builder(), strict=False)
    assert without_rank.records == [] and without_rank.skipped == {"cut apart by NCCL debug lines": 2}


def test_a_row_start_followed_by_another_line_is_dropped_and_reading_goes_on():
    cut = lines(ISSUE_1453.format("256B_512B"))[12]
    sample = (DATA / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt").read_text()
    p = parse_text(cut + "\n" + sample, "all_reduce_perf.log", builder())
    whole = parse_text(sample, "all_reduce_perf.log", builder())
    assert len(p.records) == len(whole.records) > 0
    assert p.skipped == {"cut apart by NCCL debug lines": 1}


def test_imported_rows_without_tuning_lines_have_no_algorithm():
    for name in sorted(os.listdir(DATA / "nccl-tests")):
        if name.endswith(".txt") and "no_rows" not in name and "partial" not in name:
            recs = parse_file(DATA / "nccl-tests" / name, "20250101-000000-abcdef").records
            assert {(r["nccl_algo"], r["nccl_proto"]) for r in recs} == {(None, None)}, name
