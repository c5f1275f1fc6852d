"""core/vocab.py is the one home of the collectives: no module writes out a list of their names
(a new collective is one CollectiveSpec entry, and every tuple, set or name table follows from it)."""

from __future__ import annotations

from commbench.core.vocab import COLLECTIVES, NCCL_TESTS_ONLY

from unit.oncescan import literal_lists, scan_package

NAMES = {c.name for c in COLLECTIVES + NCCL_TESTS_ONLY}
MOST = 2  # two names are a pair a module picks (all_reduce against reduce_scatter); three are a list


def lists_of_collectives(tree):
    return literal_lists(tree, NAMES, MOST)


def test_the_scan_finds_a_list_of_collectives():
    assert lists_of_collectives('X = ("all_gather", "reduce_scatter", "all_to_all")\n')
    assert lists_of_collectives('f({"AllReduce": "all_reduce", "Reduce": "reduce", "SendRecv": "sendrecv"})\n')
    assert lists_of_collectives('if op in ["all_reduce", "reduce", "all_gather"]: pass\n')
    assert not lists_of_collectives('X = ("all_reduce", "reduce_scatter")\n')
    assert not lists_of_collectives('X = {"all_reduce": f, "reduce": g, "sendrecv": h}\n')


def test_a_planted_list_of_collectives_is_found():
    planted = 'REDUCING = ("all_reduce", "reduce", "reduce_scatter")\n'
    assert lists_of_collectives(planted) == [(1, ["all_reduce", "reduce", "reduce_scatter"])]


def test_no_module_but_the_vocabulary_lists_collectives():
    found = list(scan_package(lists_of_collectives, skip=("core/vocab.py",)))
    assert not found, ("collective names listed by hand (derive them from commbench/core/vocab.py's "
                       "CollectiveSpec entries):\n" + "\n".join(found))
