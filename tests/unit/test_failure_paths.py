"""Failure paths that need no ranks and no root: how a failed collective is explained (which peer
was lost, or the timeout) and Slurm's task counts read without expanding them. The real runs are in
tests/integration/test_lost_rank.py, `lab run`'s supervision of its ranks on SIGTERM and Ctrl-C in
tests/integration/test_run_signals.py."""

from __future__ import annotations

import sys
import tracemalloc

import pytest

from commbench.core import launch
from commbench.core.launch import RankEnv
from commbench.harness.runner import failure_line

RESET = RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                     "[10.238.0.2]:41118: Connection reset by peer. This is typically caused by a remote worker")
TIMEOUT = RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms "
                       "for recv operation to complete")


def ranks(*entries):
    return [{"rank": r, "host": h, "pid": 100 + r, "addr": a} for r, h, a in entries]


def env(rank=0):
    return RankEnv("lab", rank, 2, 0, 1, "10.238.0.1", 29400)


@pytest.mark.failure(row="rank-killed-mid-sweep-under")
def test_a_lost_peer_is_named_by_rank_host_pid_and_address():
    line = failure_line(RESET, env(), ranks((0, "crnode1", "10.238.0.1"), (1, "crnode2", "10.238.0.2")), 20)
    assert line.startswith("lost rank 1 on crnode2 (pid 101, 10.238.0.2): Read error [10.238.0.2]:41118: "
                           "Connection reset by peer"), line
    assert "pair.cc" not in line  # gloo's source location is noise to a user


@pytest.mark.failure(row="rank-killed-mid-sweep-under")
def test_several_ranks_behind_one_address_name_the_host():
    same = ranks((0, "vm", "10.238.0.1"), (1, "n2", "10.238.0.2"), (2, "n2", "10.238.0.2"))
    assert failure_line(RESET, env(), same, 20).startswith("lost a rank on n2 (one of ranks 1, 2, 10.238.0.2): ")


@pytest.mark.failure(row="rank-killed-mid-sweep-under")
def test_an_unknown_peer_or_no_rank_table_keeps_the_backend_s_words():
    assert failure_line(RESET, env(), [], 20).startswith("Read error [10.238.0.2]:41118")
    other = ranks((0, "a", "10.0.0.1"), (1, "b", "10.0.0.9"))
    assert failure_line(RESET, env(), other, 20).startswith("Read error [10.238.0.2]")


@pytest.mark.failure(row="link-taken-down-mid-sweep")
def test_a_timeout_says_which_timeout():
    line = failure_line(TIMEOUT, env(), ranks((0, "a", "1.1.1.1"), (1, "b", "2.2.2.2")), 20)
    assert line.startswith("no answer within --timeout 20 s (a rank, its host or the link stopped responding): "
                           "Timed out waiting 20000ms"), line


@pytest.mark.parametrize("value, node, tasks", [
    ("2(x3),1", 0, 2), ("2(x3),1", 2, 2), ("2(x3),1", 3, 1), ("2(x3),1", 9, 2), ("1(x0),4", 0, 4),
    ("2(x99999999999999),1", 99999999999998, 2), ("2(x99999999999999),1", 99999999999999, 1), ("", 0, 1),
    ("junk", 0, 1),
])
@pytest.mark.failure(row="inputs-would-hang-exhaust-memory")
def test_slurm_tasks_per_node_are_walked_not_expanded(value, node, tasks):
    """The work follows the runs in the text, not the nodes they stand for: a few lines and bytes for
    99999999999999 nodes (an expansion would build that list, and stops at the budget instead)."""
    got, own_lines, peak = _bounded_call(launch._slurm_tasks_on_node, value, node)
    assert got == tasks
    assert own_lines <= 40 and peak < 256 * 1024, (own_lines, peak)


def _bounded_call(fn, *args, budget: int = 10_000):
    """fn(*args), the lines of fn itself that ran, and the peak of bytes allocated meanwhile: a
    measure of work that does not depend on how busy the machine is. Past `budget` lines in all
    (fn and what it calls) the call stops with an error instead of running on."""
    lines = own = 0

    def trace(frame, event, arg):
        nonlocal lines, own
        if event == "line":
            lines += 1
            own += frame.f_code is fn.__code__
            if lines > budget:
                raise AssertionError(f"{fn.__name__} ran more than {budget} lines")
        return trace

    before = sys.gettrace()
    tracemalloc.start()
    sys.settrace(trace)
    try:
        got = fn(*args)
    finally:
        sys.settrace(before)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return got, own, peak
