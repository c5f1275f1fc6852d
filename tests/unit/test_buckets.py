"""Bucket layouts and the buckets command's refusals (no ranks started)."""

import pytest

from commbench.cli.app import main
from commbench.core.errors import BadInput
from commbench.core.units import parse_count
from commbench.workloads.buckets import BucketPlan, BucketWorkload, layout_for


@pytest.mark.parametrize("text, value", [("5e8", 500_000_000), ("1.3B", 1_300_000_000), ("125M", 125_000_000),
                                         ("1e6", 1_000_000), ("7b", 7_000_000_000), ("12", 12)])
def test_parse_count(text, value):
    assert parse_count(text, "--params") == value


@pytest.mark.parametrize("text", ["0", "1.5e-1", "12Q", "", "-3", "1.3GB"])
def test_parse_count_rejects(text):
    with pytest.raises(BadInput, match="--params"):
        parse_count(text, "--params")


def test_all_reduce_buckets_cover_the_gradients_exactly():
    plan = BucketPlan(grad_bytes=1000 * 2, dtype="bfloat16", op="all_reduce")
    lay = layout_for(plan, 300, world=3)
    assert lay.total == 1000 and lay.bucket == 300 and lay.n_buckets == 4
    assert list(lay.bounds()) == [(0, 300), (300, 600), (600, 900), (900, 1000)]


def test_reduce_scatter_buckets_split_evenly_over_ranks():
    plan = BucketPlan(grad_bytes=1000 * 4, dtype="float32", op="reduce_scatter")
    lay = layout_for(plan, 300, world=3)
    # multiples of world x 16 bytes = 12 float32 elements, as nccl-tests rounds reduce_scatter
    assert lay.total == 996 and lay.bucket == 300
    assert all((b - a) % 12 == 0 for a, b in lay.bounds())
    assert sum(b - a for a, b in lay.bounds()) == lay.total


def test_a_bucket_larger_than_the_gradients_is_one_bucket_and_duplicates_collapse():
    plan = BucketPlan(grad_bytes=4096, dtype="float32", bucket_elems=[10**6, 5 * 10**8, 256])
    lays = BucketWorkload(plan).layouts(world=2)
    assert [(lay.bucket, lay.n_buckets) for lay in lays] == [(1024, 1), (256, 4)]


def test_no_whole_bucket_is_bad_input():
    plan = BucketPlan(grad_bytes=8, dtype="float32", op="reduce_scatter")
    with pytest.raises(BadInput, match="--grad-bytes 8 holds no whole bucket on 4 ranks"):
        BucketWorkload(plan).validate(4)


@pytest.mark.parametrize("args, message", [
    (["--params", "1B", "--grad-bytes", "1G"], "pass one of them"),
    (["--op", "all_gather"], "not a gradient reduction"),
    (["--op", "bogus"], "unknown collective"),
    (["--overlap", "0"], "--overlap 0 must be at least 1"),
    (["--bucket-size", "1e6,abc"], "--bucket-size 'abc' is not a count"),
    (["--bucket-size", ","], "--bucket-size is empty"),
    (["--params", "1T"], "lower --grad-bytes"),
    (["-d", "float7"], "unknown dtype"),
])
def test_bad_bucket_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        main(["buckets", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and message in err[0], err
