"""No module branches on a collective's or a workload's name: what differs between them is a fact
of their registry entry (core/vocab.py, core/workloadspec.py) or a binding in a table
(harness/collectives.py), never an `if x == "all_reduce" ... elif x == "all_gather"` chain."""

from __future__ import annotations

from commbench.core import workloadspec
from commbench.core.vocab import COLLECTIVES, NCCL_TESTS_ONLY

from unit.oncescan import if_chains, scan_package

NAMES = {c.name for c in COLLECTIVES + NCCL_TESTS_ONLY} | set(workloadspec.NAMES)


def chains(tree):
    return if_chains(tree, NAMES)


def test_the_scan_finds_an_if_elif_chain():
    assert chains('if op == "all_reduce":\n    f()\nelif op == "all_gather":\n    g()\n') == [
        (1, ["all_gather", "all_reduce"])]


def test_the_scan_finds_ifs_one_after_another():
    planted = ('def launch(o):\n    if o.op == "all_reduce":\n        return f\n'
               '    if o.op in ("broadcast", "reduce"):\n        return g\n    return h\n')
    assert chains(planted) == [(2, ["all_reduce", "broadcast", "reduce"])]


def test_the_scan_finds_a_chain_of_conditional_expressions():
    planted = 'x = a if op == "all_gather" else b if op == "reduce_scatter" else c\n'
    assert chains(planted) == [(1, ["all_gather", "reduce_scatter"])]


def test_the_scan_finds_a_chain_over_workloads():
    assert chains('if w == "sweep":\n    f()\nelif w == "replay":\n    g()\n')


def test_one_name_picked_or_two_subjects_are_no_chain():
    assert not chains('if op == "reduce_scatter":\n    f()\n')
    assert not chains('if op == "all_reduce":\n    f()\nelif kind == "all_gather":\n    g()\n')
    assert not chains('if op == "all_reduce":\n    f()\nelse:\n    g()\n')


def test_no_module_branches_on_collective_or_workload_names():
    found = list(scan_package(chains, skip=("core/vocab.py", "core/workloadspec.py")))
    assert not found, ("a branch per collective or workload name (make it a fact of the registry entry, "
                       "or a table of bindings):\n" + "\n".join(found))
