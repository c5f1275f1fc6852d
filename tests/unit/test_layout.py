"""core/layout.py: --layout's rank order and groups as Megatron-LM makes them, --group, and
--split's colors as nccl-tests computes them; every bad input in one line."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core import layout as lay
from commbench.core.errors import BadInput
from commbench.core.layout import (DEFAULT_COLLECTIVE, DIMENSIONS, parse_groups, parse_layout, parse_split,
                                   parse_split_mask, stage_pairs)
from commbench.core.vocab import BY_NAME


def megatron_groups(world: int, sizes: list[int], mask: list[bool]) -> list[list[int]]:
    """Megatron-LM's generate_masked_orthogonal_rank_groups (megatron/core/parallel_state.py),
    written out again: group g is g decomposed over the unmasked sizes (strides of the whole
    grid), plus every index of the masked sizes decomposed likewise."""
    strides = [1]
    for s in sizes:
        strides.append(strides[-1] * s)
    masked = [(s, d) for s, d, m in zip(sizes, strides, mask) if m]
    unmasked = [(s, d) for s, d, m in zip(sizes, strides, mask) if not m]

    def place(index: int, dims: list[tuple[int, int]]) -> int:
        total, inner = 0, 1
        for s, d in dims:
            total += (index // inner) % s * d
            inner *= s
        return total

    group_size = 1
    for s, _ in masked:
        group_size *= s
    return [[place(r, masked) + place(g, unmasked) for r in range(group_size)] for g in range(world // group_size)]


def test_megatrons_documented_example():
    """initialize_model_parallel's docstring: 16 GPUs, tensor 2, pipeline 4 (data 2)."""
    layout = parse_layout("tp=2,pp=4,dp=auto", 16)
    assert layout.groups("tp") == ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15))
    assert layout.groups("dp") == ((0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15))
    assert layout.groups("pp") == ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15))


def test_eight_ranks_tp2_pp2_dp2():
    layout = parse_layout("tp=2,pp=2,dp=2", 8)
    assert layout.order == ("tp", "cp", "ep", "dp", "pp") == DIMENSIONS
    assert layout.groups("tp") == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert layout.groups("dp") == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert layout.groups("pp") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert layout.groups("cp") == tuple((r,) for r in range(8))
    assert layout.coords(5) == {"tp": 1, "cp": 0, "ep": 0, "dp": 0, "pp": 1}
    assert layout.group_of("dp", 5) == 3


def test_generate_masked_docstring_example_with_order():
    """generate_masked_orthogonal_rank_groups' docstring: 8 ranks, order tp-pp-dp, 2-2-2: dp
    groups [[0, 4], [1, 5], [2, 6], [3, 7]]."""
    layout = parse_layout("tp=2,pp=2,dp=2", 8, order="tp-pp-dp")
    assert layout.order[:3] == ("tp", "pp", "dp")
    assert layout.groups("dp") == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_auto_takes_what_the_others_leave():
    layout = parse_layout("tp=2, pp=2, dp=auto", 16)
    assert (layout.size("tp"), layout.size("pp"), layout.size("dp"), layout.size("ep")) == (2, 2, 4, 1)
    assert layout.named == ("tp", "dp", "pp")
    assert layout.text() == "tp=2,dp=4,pp=2"
    assert parse_layout("DP=Auto", 4).size("dp") == 4


def test_default_collectives_come_from_the_vocabulary():
    assert set(DEFAULT_COLLECTIVE) == set(DIMENSIONS)
    assert all(name in BY_NAME for name in DEFAULT_COLLECTIVE.values())
    assert DEFAULT_COLLECTIVE["dp"] == DEFAULT_COLLECTIVE["tp"] == BY_NAME["all_reduce"].name
    assert DEFAULT_COLLECTIVE["pp"] == BY_NAME["sendrecv"].name


def test_group_work():
    layout = parse_layout("tp=2,pp=2,dp=auto", 8)
    (dp,) = parse_groups("dp", layout)
    assert (dp.dim, dp.collective, dp.groups) == ("dp", "all_reduce", ((0, 2), (1, 3), (4, 6), (5, 7)))
    both = parse_groups("dp:reduce-scatter, tp:allgather", layout)
    assert [(w.dim, w.collective) for w in both] == [("dp", "reduce_scatter"), ("tp", "all_gather")]
    (pp,) = parse_groups("pp", layout)
    assert pp.collective == "sendrecv"
    assert [stage_pairs(g) for g in pp.groups] == [((0, 4),), ((1, 5),), ((2, 6),), ((3, 7),)]
    assert stage_pairs((0, 4, 8, 12)) == ((0, 4), (4, 8), (8, 12))


LAYOUTS = st.tuples(*(st.integers(1, 4) for _ in DIMENSIONS)).filter(lambda s: s[0] * s[1] * s[2] * s[3] * s[4] <= 256)


@settings(max_examples=150, deadline=None)
@given(LAYOUTS, st.permutations(DIMENSIONS))
def test_every_rank_is_in_one_group_of_each_dimension(sizes, order):
    world = 1
    for s in sizes:
        world *= s
    text = ",".join(f"{d}={s}" for d, s in zip(DIMENSIONS, sizes))
    layout = parse_layout(text, world, order="-".join(order))
    ordered = [layout.size(d) for d in layout.order]
    for i, dim in enumerate(layout.order):
        groups = layout.groups(dim)
        assert sorted(r for g in groups for r in g) == list(range(world))
        assert all(len(g) == layout.size(dim) for g in groups)
        assert [list(g) for g in groups] == megatron_groups(world, ordered, [j == i for j in range(5)])
    for rank in range(world):
        assert layout.rank(layout.coords(rank)) == rank


# ---- --split: nccl-tests' colors ----------------------------------------------------------------


def c_color(op: str, value: int, rank: int) -> int:
    """src/common.cu run(): color = proc <op> value (ranks and values of 0 or more here)."""
    return {"AND": rank & value, "OR": rank | value, "MOD": rank % value if value else 0,
            "DIV": rank // value if value else 0}[op]


def spelled(value: int, radix: str) -> str:
    return {"dec": str(value), "hex": hex(value), "HEX": hex(value).upper(), "bin": bin(value),
            "oct": "0" + oct(value)[2:]}[radix]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["AND", "OR", "MOD", "DIV"]), st.booleans(), st.sampled_from(["", " ", "  ", "\t"]),
       st.integers(1, 4096), st.sampled_from(["dec", "hex", "HEX", "bin", "oct"]), st.booleans())
def test_split_colors_are_nccl_tests(op, symbol, blank, value, radix, lower):
    word = {"AND": "&", "OR": "|", "MOD": "%", "DIV": "/"}[op] if symbol else (op.lower() if lower else op)
    split = parse_split(f"{word}{blank}{spelled(value, radix)}")
    assert (split.op, split.value) == (op, value)
    assert split.colors(64) == tuple(c_color(op, value, r) for r in range(64))


def test_split_examples_from_the_readme():
    """nccl-tests README: AND 0x7 and MOD 8 give one GPU per node; OR 0x7 and DIV 8 one group per
    node; AND 0x1 and MOD 2 every other rank."""
    assert parse_split("AND 0x7").groups(16) == parse_split("MOD 8").groups(16) == \
        {c: (c, c + 8) for c in range(8)}
    assert list(parse_split("OR 0x7").groups(16).values()) == list(parse_split("DIV 8").groups(16).values()) == \
        [tuple(range(8)), tuple(range(8, 16))]
    assert parse_split("DIV 8").groups(16) == {0: tuple(range(8)), 1: tuple(range(8, 16))}
    assert parse_split("OR 0x7").groups(16) == {7: tuple(range(8)), 15: tuple(range(8, 16))}
    assert parse_split("AND 0x1").colors(6) == parse_split("MOD 2").colors(6) == (0, 1, 0, 1, 0, 1)


def test_split_reads_numbers_as_strtoul():
    assert parse_split("MOD 010").value == 8  # a leading 0 is octal
    assert parse_split("mod0b101").value == 5
    assert parse_split("DIV 4 ranks").value == 4  # strtoul stops at the blank; nccl-tests ignores the rest
    assert parse_split("AND 0b").value == 0  # parseInt takes "0b" alone as 0
    assert parse_split("MOD 2**32+3".replace("2**32+3", str(2**32 + 3))).value == 3  # (int) keeps the low 32 bits
    assert parse_split_mask("0x7").colors(10) == parse_split_mask("7").colors(10) == tuple(r & 7 for r in range(10))


BAD = [
    (lambda: parse_layout("tp=2,pp=2", 8),
     "--layout tp=2,pp=2: tp=2 x pp=2 = 4 ranks, but the world size is 8: make the product 8, or give one dimension "
     "as auto"),
    (lambda: parse_layout("tp=3,dp=auto", 8),
     "--layout tp=3,dp=auto: tp=3 = 3 does not divide the world size 8, so dp=auto has no size: make the product of "
     "the sizes a divisor of 8"),
    (lambda: parse_layout("tp=2,xp=2", 4),
     "unknown dimension 'xp' in --layout: use tp, cp, ep, dp, pp (e.g. --layout "
     "tp=2,pp=2,dp=auto)"),
    (lambda: parse_layout("tp=2,tp=2", 4), "--layout gives tp twice: give each dimension once (--layout "
                                           "tp=2,pp=2,dp=auto)"),
    (lambda: parse_layout("tp=auto,dp=auto", 4),
     "--layout has auto for both tp and dp: at most one dimension can be auto (give the others' sizes, e.g. "
     "--layout tp=2,pp=2,dp=auto)"),
    (lambda: parse_layout("tp=0", 4), "--layout tp=0 is not a size: give a whole number of ranks of 1 or more, or "
                                      "auto (--layout tp=2,pp=2,dp=auto)"),
    (lambda: parse_layout("tp2", 4), "--layout entry 'tp2' has no size: write dim=size, e.g. --layout "
                                     "tp=2,pp=2,dp=auto"),
    (lambda: parse_layout(" , ", 4), "--layout is empty: give the dimensions' sizes, e.g. --layout tp=2,pp=2,dp=auto"),
    (lambda: parse_layout("tp=2,pp=2", 4, order="tp-dp"),
     "--order tp-dp leaves out pp, which --layout gives 2 ranks: name it in --order too"),
    (lambda: parse_layout("tp=2,pp=2", 4, order="tp-tp-pp"),
     "--order names tp twice: name each dimension once, e.g. --order tp-cp-ep-dp-pp"),
    (lambda: parse_groups("pp", parse_layout("tp=2,dp=auto", 4)),
     "--group names pp, which --layout tp=2,dp=2 does not have: name one of tp, dp, or add pp=N to --layout"),
    (lambda: parse_groups("dp", parse_layout("tp=4,dp=auto", 4)),
     "--group dp: each dp group of --layout tp=4,dp=1 has 1 rank, too few for all_reduce (it needs 2 or more): give "
     "dp more ranks in --layout, or name another dimension"),
    (lambda: parse_groups("dp,dp:all_gather", parse_layout("dp=4", 4)),
     "--group names dp twice: give each dimension once, e.g. --group dp:all_reduce,tp"),
    (lambda: parse_groups("dp:allreduse", parse_layout("dp=4", 4)),
     "--group dp:allreduse: unknown collective (did you mean all_reduce?): use one of all_reduce, reduce_scatter, "
     "all_gather, all_to_all, broadcast, reduce, sendrecv"),
    (lambda: parse_groups("dq", parse_layout("dp=4", 4)),
     "unknown dimension 'dq' in --group: use tp, cp, ep, dp, pp (e.g. --group dp or --group "
     "dp:all_reduce,tp:all_gather)"),
    (lambda: parse_groups("", parse_layout("dp=4", 4)), "--group is empty: name a dimension of the layout, e.g. "
                                                        "--group dp"),
    (lambda: parse_split("XOR 2"),
     "--split 'XOR 2' starts with no operation nccl-tests knows (it would not split at all): write AND, OR, MOD or "
     "DIV (or &, |, %, /) and a number, e.g. --split 'MOD 2', 'AND 0x7', 'DIV 8'"),
    (lambda: parse_split(" MOD 2"),
     "--split ' MOD 2' starts with no operation nccl-tests knows (it would not split at all): write AND, OR, MOD or "
     "DIV (or &, |, %, /) and a number, e.g. --split 'MOD 2', 'AND 0x7', 'DIV 8'"),
    (lambda: parse_split("MOD two"),
     "--split 'MOD two' has no number after MOD (nccl-tests would not split at all): write AND, OR, MOD or DIV (or "
     "&, |, %, /) and a number, e.g. --split 'MOD 2', 'AND 0x7', 'DIV 8'"),
    (lambda: parse_split("DIV 0"),
     "--split 'DIV 0' divides by 0 (nccl-tests would crash): write AND, OR, MOD or DIV (or &, |, %, /) and a number, "
     "e.g. --split 'MOD 2', 'AND 0x7', 'DIV 8'"),
    (lambda: parse_split("OR -1").colors(4),
     "--split 'OR -1' gives rank 0 the color -1, and MPI_Comm_split takes no negative color: use a number of 0 or "
     "more, e.g. --split 'MOD 2'"),
    (lambda: parse_split_mask("zz"), "split mask 'zz' is not a hex number (nccl-tests would not split at all): "
                                     "e.g. 0x7"),
]


@pytest.mark.parametrize("call, message", BAD)
def test_bad_input_is_one_line_naming_the_fix(call, message):
    with pytest.raises(BadInput) as err:
        call()
    assert str(err.value) == message
    assert "\n" not in str(err.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=24))
def test_any_split_text_is_a_split_or_one_line(text):
    try:
        split = parse_split(text)
    except BadInput as exc:
        assert "\n" not in str(exc)
        return
    try:
        colors = split.colors(16)
    except BadInput as exc:
        assert "\n" not in str(exc)
        return
    assert all(c >= 0 for c in colors)


def test_the_module_stays_without_torch():
    assert "torch" not in vars(lay)
    assert list(itertools.chain.from_iterable(parse_layout("dp=auto", 3).groups("dp"))) == [0, 1, 2]
