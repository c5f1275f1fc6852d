"""core/workloadspec.py is the one home of the workloads: no module writes out a list of their
names, and the lists other modules keep (columns' writers, options' commands, the stop rule's
workloads) are the registry's facts."""

from __future__ import annotations

from commbench.core import columns, options, runsummary, workloadspec

from unit.oncescan import literal_lists, scan_package

NAMES = set(workloadspec.NAMES)
MOST = 2  # two names are a pair a module picks (sweep against nccl-tests); three are a list


def lists_of_workloads(tree):
    return literal_lists(tree, NAMES, MOST)


def test_the_scan_finds_a_list_of_workloads():
    assert lists_of_workloads('X = ("sweep", "zero", "buckets")\n')
    assert lists_of_workloads('if w in {"sweep", "pairs", "replay"}: pass\n')
    assert lists_of_workloads('T = {"sweep": "a", "zero": "b", "pairs": "c"}\n')
    assert not lists_of_workloads('X = ("sweep", "nccl-tests")\n')
    assert not lists_of_workloads('X = {"sweep": f, "zero": g, "pairs": h}\n')  # a table of code


def test_a_planted_list_of_workloads_is_found():
    planted = 'MEASURED = ("sweep", "buckets", "zero", "pairs", "replay")\n'
    assert lists_of_workloads(planted) == [(1, ["sweep", "buckets", "zero", "pairs", "replay"])]


def test_no_module_but_the_registry_lists_workloads():
    found = list(scan_package(lists_of_workloads, skip=("core/workloadspec.py",)))
    assert not found, ("workload names listed by hand (derive them from commbench/core/workloadspec.py):\n"
                       + "\n".join(found))


def test_the_lists_derived_from_the_registry_are_those_it_replaced():
    assert columns.ALL_WORKLOADS == ("sweep", "buckets", "zero", "pairs", "replay", "nccl-tests")
    assert columns.MEASURED == ("sweep", "buckets", "zero", "pairs", "replay")
    assert set(options._LAID_OUT) == {"sweep", "zero", "buckets", "replay"}
    assert set(options._GROUPED) == {"sweep", "zero", "buckets"}
    assert options.AUTO_WIDE == ("sweep",)
    assert runsummary.JUDGED_BY_STOP_RULE == {"sweep", "buckets", "zero"}
    by_column = {c.name: set(c.writers) for c in columns.REGISTRY}
    assert by_column["contention"] == {"sweep", "zero", "buckets"}
    assert by_column["rank_time_us"] == by_column["rank_skew_us"] == {"sweep", "buckets", "zero"}
    assert by_column["n_collectives"] == {"buckets", "zero", "replay"}
    assert by_column["group_index"] == {"sweep", "zero", "buckets", "replay", "nccl-tests"}


def test_the_shared_options_follow_each_workloads_families():
    takes = {f.name: f.metadata[options.FLAG].commands for f in options.dataclasses.fields(options.RunOptions)
             if options.FLAG in f.metadata}
    assert takes["split"] == takes["metrics"] == ("sweep",)
    assert set(takes["solo"]) == set(takes["group"]) == {"sweep", "zero", "buckets"}
    assert set(takes["layout"]) == set(takes["order"]) == {"sweep", "zero", "buckets", "replay"}
