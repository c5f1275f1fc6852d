"""Local ranks that an external launcher bound to the same CPUs (issue #40: under mpirun both ranks
showed `cpus 0` and nothing said so): core/binding.py collisions."""

from __future__ import annotations

from commbench.core.binding import collisions


def rank(r: int, cpus: str, host: str = "n1", ncpus: int = 8) -> dict:
    return {"rank": r, "host": host, "cpus": cpus, "ncpus": ncpus}


def test_two_ranks_bound_to_cpu_0_are_named_with_their_cpus_and_the_fix():
    lines = collisions([rank(0, "0"), rank(1, "0")])
    assert lines == [
        "ranks 0, 1 on n1 are bound to the same CPUs (rank 0 cpus 0, rank 1 cpus 0): they take turns and measure "
        "the scheduler; fix: `mpirun --bind-to none`, or `--map-by slot:PE=N` (N CPUs per rank), or "
        "srun --cpu-bind=cores, or commbench --bind cores"]


def test_overlapping_sets_collide_and_only_the_ranks_that_share_are_named():
    lines = collisions([rank(0, "0-1"), rank(1, "1-2"), rank(2, "4-5"), rank(3, "0-1", host="n2")])
    assert len(lines) == 1 and lines[0].startswith("ranks 0, 1 on n1 ") and "rank 2" not in lines[0]


def test_one_line_per_host():
    lines = collisions([rank(0, "0"), rank(1, "0"), rank(2, "3", host="n2"), rank(3, "3", host="n2")])
    assert [line.split(" are ")[0] for line in lines] == ["ranks 0, 1 on n1", "ranks 2, 3 on n2"]


def test_no_warning_for_distinct_cpus_unbound_ranks_or_ranks_on_different_hosts():
    assert collisions([rank(0, "0"), rank(1, "1")]) == []  # --bind-to core --map-by core
    assert collisions([rank(0, "0-7"), rank(1, "0-7")]) == []  # unbound: every CPU of the host
    assert collisions([rank(0, "0"), rank(1, "0-7")]) == []  # one is free to move
    assert collisions([rank(0, "0", host="a"), rank(1, "0", host="b")]) == []
    assert collisions([rank(0, "0", ncpus=None), rank(1, "0", ncpus=None)]) == []  # the host's size unknown
    assert collisions([rank(0, "junk"), rank(1, "junk")]) == []
