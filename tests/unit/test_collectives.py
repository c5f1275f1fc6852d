"""commbench.harness.collectives: names, layouts and bus factors, checked against real nccl-tests output."""

from pathlib import Path

import pytest

from commbench.core.vocab import busbw, chunk_elements
from commbench.harness.collectives import BY_NAME, COLLECTIVES, resolve
from commbench.core.errors import BadInput

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
TABLE_ORDER = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "sendrecv"]


def nccl_rows(name: str):
    """The result rows of an nccl-tests log (current format, or the legacy one): a tiny reader for
    these tests only. Yields (size, count, [(time_us, algbw, busbw, time_text)] for out/in place)."""
    for line in (DATA / name).read_text().splitlines():
        fields = line.split()
        if not fields or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        size, count = int(fields[0]), int(fields[1])
        tail = fields[-8:]  # time algbw busbw #wrong, twice
        cells = [(float(tail[i]), float(tail[i + 1]), float(tail[i + 2]), tail[i]) for i in (0, 4)]
        yield size, count, cells


# ---- names ----

@pytest.mark.parametrize("spelling, name", [
    ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("all-reduce", "all_reduce"),
    ("all_reduce_perf", "all_reduce"), ("AllReduce", "all_reduce"), ("ALLGATHER", "all_gather"),
    ("all_gather_perf", "all_gather"), ("reduce_scatter_perf", "reduce_scatter"), ("reducescatter", "reduce_scatter"),
    ("a2a", "all_to_all"), ("alltoall_perf", "all_to_all"), ("bcast", "broadcast"), ("broadcast_perf", "broadcast"),
    ("reduce_perf", "reduce"), ("sendrecv_perf", "sendrecv"), ("p2p", "sendrecv"), (" all_reduce ", "all_reduce"),
])
def test_resolve_accepts_nccl_tests_spellings(spelling, name):
    assert [c.name for c in resolve(spelling)] == [name]


def test_resolve_all_gives_every_collective_in_table_order():
    assert [c.name for c in resolve("all")] == TABLE_ORDER
    assert [c.name for c in resolve("ALL")] == TABLE_ORDER
    assert [c.name for c in COLLECTIVES] == TABLE_ORDER


def test_resolve_lists_are_deduplicated_in_table_order():
    assert [c.name for c in resolve("sendrecv,allreduce,all-reduce,all_reduce_perf")] == ["all_reduce", "sendrecv"]
    assert [c.name for c in resolve("all_gather,all")] == TABLE_ORDER
    assert [c.name for c in resolve("a2a,,alltoall,")] == ["all_to_all"]


@pytest.mark.parametrize("text, guess", [("allreduse", "all_reduce"), ("reducescater", "reduce_scatter"),
                                         ("all-gahter", "all_gather"), ("sendrecieve", "sendrecv"),
                                         ("alltoal_perf", "all_to_all"), ("bogus", None), ("perf", None)])
def test_a_near_miss_names_the_collective_meant(text, guess):
    with pytest.raises(BadInput) as err:
        resolve(text)
    message = str(err.value)
    hint = f"unknown collective {text!r} (did you mean {guess}?): use one of"
    assert (hint in message) if guess else ("did you mean" not in message and f"{text!r}: use one of" in message)


@pytest.mark.parametrize("names", ["allreduse", "all_reduce,scatter", "perf", "gather"])
def test_resolve_rejects_unknown_names_listing_the_choices(names):
    with pytest.raises(BadInput) as err:
        resolve(names)
    message = str(err.value)
    assert "unknown collective" in message
    for name in TABLE_ORDER:
        assert name in message


def test_resolve_rejects_an_empty_list():
    with pytest.raises(BadInput, match="empty"):
        resolve(" , ")


# ---- layouts: size S -> count, against nccl-tests' printed columns ----

def test_all_reduce_layout_matches_nccl_tests_8_ranks():
    rows = list(nccl_rows("all_reduce_v2.19.4_1node_8xA100.txt"))
    assert len(rows) == 25
    coll = BY_NAME["all_reduce"]
    for size, count, _ in rows:
        for rank in (0, 7):
            lay = coll.for_size(size, 4, 8, rank)
            assert (lay.count, lay.send_numel, lay.recv_numel) == (count, count, count)
            assert lay.size_bytes(4) == size


def test_all_gather_layout_matches_nccl_tests_2_ranks():
    rows = list(nccl_rows("all_gather_v2.19.6_2node_roce.txt"))
    assert rows[0][:2] == (536870912, 67108864)
    coll = BY_NAME["all_gather"]
    for size, count, _ in rows:
        for rank in (0, 1):
            lay = coll.for_size(size, 4, 2, rank)
            assert lay.count == count  # elements per rank
            assert lay.send_numel == count and lay.recv_numel == 2 * count
            assert lay.send_inplace_offset == rank * count
            assert lay.size_bytes(4) == size


def test_all_gather_layout_matches_nccl_tests_2_ranks_v2_18():
    coll = BY_NAME["all_gather"]
    rows = list(nccl_rows("all_gather_v2.18.0_2ranks_stderr_noise.txt"))
    assert len(rows) == 8
    for size, count, _ in rows:
        lay = coll.for_size(size, 4, 2, 0)
        assert (lay.count, lay.size_bytes(4)) == (count, size)


def test_all_reduce_layout_matches_nccl_tests_16_ranks():
    coll = BY_NAME["all_reduce"]
    for size, count, _ in nccl_rows("all_reduce_2node_16xH100.txt"):
        lay = coll.for_size(size, 4, 16, 3)
        assert (lay.count, lay.size_bytes(4)) == (count, size)


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter", "all_to_all"])
def test_gather_scatter_family_rounds_like_nccl_tests_16_bytes(name):
    # nccl-tests: count = 1000 / 4 = 250; base = (250 / 3) & ~(16/4 - 1) = 83 & ~3 = 80.
    assert chunk_elements(4) == 4
    lay = BY_NAME[name].for_size(1000, 4, 3, 1)
    assert lay.count == 80
    assert lay.size_bytes(4) == 80 * 3 * 4 == 960
    per_rank, whole = 80, 240
    expected = {"all_gather": (per_rank, whole), "reduce_scatter": (whole, per_rank), "all_to_all": (whole, whole)}
    assert (lay.send_numel, lay.recv_numel) == expected[name]


def test_in_place_offsets_follow_nccl_tests():
    assert BY_NAME["all_gather"].layout(240, 4, 3, 2).send_inplace_offset == 160
    assert BY_NAME["all_gather"].layout(240, 4, 3, 2).recv_inplace_offset == 0
    assert BY_NAME["reduce_scatter"].layout(240, 4, 3, 2).recv_inplace_offset == 160
    assert BY_NAME["reduce_scatter"].layout(240, 4, 3, 2).send_inplace_offset == 0
    for name in ("all_reduce", "broadcast", "reduce", "sendrecv", "all_to_all"):
        lay = BY_NAME[name].layout(240, 4, 3, 2)
        assert (lay.send_inplace_offset, lay.recv_inplace_offset) == (0, 0)


def test_tiny_sizes_round_to_zero_in_the_gather_family_only():
    assert BY_NAME["all_gather"].layout(11, 4, 3, 0).send_numel == 0
    assert BY_NAME["all_reduce"].layout(1, 4, 3, 0).send_numel == 1


# ---- bus bandwidth factors and algbw = S / t ----

@pytest.mark.parametrize("name, world, factor", [
    ("all_reduce", 8, 2 * 7 / 8), ("all_reduce", 16, 2 * 15 / 16), ("all_reduce", 1, 0.0),
    ("all_gather", 2, 0.5), ("all_gather", 8, 7 / 8), ("reduce_scatter", 4, 0.75), ("all_to_all", 3, 2 / 3),
    ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 8, 1.0),
])
def test_busbw_factors(name, world, factor):
    assert BY_NAME[name].busbw_factor(world) == pytest.approx(factor)
    assert busbw(BY_NAME[name], 10.0, world) == pytest.approx(10.0 * factor)


def _half_unit(text: str) -> float:
    """Half of the last printed digit of a number as nccl-tests printed it ('14594.4' -> 0.05)."""
    decimals = len(text.partition(".")[2])
    return 0.5 * 10.0 ** -decimals


@pytest.mark.parametrize("fixture, name, world", [
    ("all_reduce_v2.19.4_1node_8xA100.txt", "all_reduce", 8),
    ("all_reduce_2node_16xH100.txt", "all_reduce", 16),
    ("all_reduce_legacy_8xA100_nocheck.txt", "all_reduce", 8),
    ("all_gather_v2.19.6_2node_roce.txt", "all_gather", 2),
    ("all_gather_v2.18.0_2ranks_stderr_noise.txt", "all_gather", 2),
    ("all_gather_legacy_8xA100_nocheck.txt", "all_gather", 8),
])
def test_algbw_and_busbw_reproduce_nccl_tests_within_rounding(fixture, name, world):
    coll = BY_NAME[name]
    factor = coll.busbw_factor(world)
    checked = 0
    for size, count, cells in nccl_rows(fixture):
        if size == 0:
            continue
        lay = coll.for_size(size, 4, world, 0)
        if lay.count != count:  # legacy logs predate the 16-byte rounding; only their big sizes agree
            assert "legacy" in fixture and size < 4 * chunk_elements(4) * world * 4
            continue
        S = lay.size_bytes(4)
        assert S == size
        for time_us, algbw, bus, time_text in cells:
            h = _half_unit(time_text)
            # The printed time is rounded: algbw lies between S/(t+h) and S/(t-h), then printed to 2 decimals.
            lo, hi = S / ((time_us + h) * 1e-6) / 1e9, S / ((time_us - h) * 1e-6) / 1e9
            assert lo - 0.005 - 1e-9 <= algbw <= hi + 0.005 + 1e-9, (size, time_us, algbw)
            assert lo * factor - 0.005 - 1e-9 <= bus <= hi * factor + 0.005 + 1e-9, (size, time_us, bus)
            # busbw is algbw times the factor, up to the printed rounding of both.
            assert abs(bus - algbw * factor) <= 0.005 + 0.005 * factor + 1e-9
            checked += 1
    assert checked >= 12


def test_all_reduce_8_ranks_example_row():
    # 134217728 B in 1295.41 us: algbw 103.61 GB/s, busbw 181.32 GB/s (= algbw * 2 * 7/8).
    size, count, cells = list(nccl_rows("all_reduce_v2.19.4_1node_8xA100.txt"))[-1]
    assert (size, count) == (134217728, 33554432)
    time_us, algbw, bus, _ = cells[0]
    S = BY_NAME["all_reduce"].layout(count, 4, 8, 0).size_bytes(4)
    assert round(S / (time_us * 1e-6) / 1e9, 2) == algbw == 103.61
    assert round(busbw(BY_NAME["all_reduce"], S / (time_us * 1e-6) / 1e9, 8), 2) == bus == 181.32


def test_all_gather_2_ranks_example_row():
    size, count, cells = list(nccl_rows("all_gather_v2.19.6_2node_roce.txt"))[0]
    time_us, algbw, bus, _ = cells[1]  # in place: 13778.0 us, 38.97, 19.48
    S = BY_NAME["all_gather"].for_size(size, 4, 2, 0).size_bytes(4)
    assert round(S / (time_us * 1e-6) / 1e9, 2) == algbw == 38.97
    assert round(busbw(BY_NAME["all_gather"], S / (time_us * 1e-6) / 1e9, 2), 2) == bus == 19.48
