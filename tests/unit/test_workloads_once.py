"""core/workloadspec.py is the one home of the workloads: no module writes out a list of their
names, and the lists other modules keep (columns' writers, options' commands, the stop rule's
workloads) are the registry's facts."""

from __future__ import annotations

import ast

from commbench.core import columns, options, runsummary, workloadspec

from unit.oncescan import literal_lists, parsed, scan_package
from unit.sources import PACKAGE, package_files, tree

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


def _text(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def written_workloads(source, keywords: bool = True) -> list[tuple[int, str]]:
    """(line, value) of every `workload` value a module writes out: a field `workload: str = "x"`, an
    assignment `row["workload"] = "x"` or `WORKLOAD = "x"`, a dict's `"workload": "x"`, and (with
    `keywords`) a keyword `workload="x"`."""
    found = []
    for node in ast.walk(parsed(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                named = (isinstance(t, ast.Name) and t.id in ("workload", "WORKLOAD")
                         or isinstance(t, ast.Subscript) and _text(t.slice) == "workload")
                if named and _text(node.value) is not None:
                    found.append((node.lineno, node.value.value))
        elif isinstance(node, ast.Dict):
            found += [(k.lineno, v.value) for k, v in zip(node.keys, node.values)
                      if k is not None and _text(k) == "workload" and _text(v) is not None]
        elif keywords and isinstance(node, ast.keyword) and node.arg == "workload" and _text(node.value) is not None:
            found.append((node.value.lineno, node.value.value))
    return sorted(found)


# Where rows are made, a keyword workload="x" is a row's value; cli's run_fields(workload=...) names
# the command whose "auto" it resolves (tune's own, whose runs write zero's rows), not a row's.
ROW_MAKERS = ("commbench/workloads/", "commbench/integrations/", "commbench/harness/")


def unknown_workloads(path) -> list[str]:
    rel = path.relative_to(PACKAGE.parent).as_posix()
    return [f"{rel}:{line}: {value}" for line, value in written_workloads(tree(path), rel.startswith(ROW_MAKERS))
            if value not in NAMES]


def test_the_scan_finds_a_written_workload():
    assert written_workloads('@dataclass\nclass P:\n    workload: str = "deepspeed"\n') == [(3, "deepspeed")]
    assert written_workloads('fields["workload"] = "deepspeed"\n') == [(1, "deepspeed")]
    assert written_workloads('WORKLOAD = "nccl-tests"\nrow = {"workload": "sweep", "op": "sum"}\n') == [
        (1, "nccl-tests"), (2, "sweep")]
    assert written_workloads('Plan(workload="zero")\n') == [(1, "zero")]
    assert written_workloads('run_fields(workload="tune")\n', keywords=False) == []
    assert written_workloads('workload = plan.workload\nif w == "sweep": pass\n') == []


def test_a_planted_workload_missing_from_the_registry_is_found(tmp_path, monkeypatch):
    planted = tmp_path / "commbench" / "workloads" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text('class PlantedPlan:\n    workload: str = "planted"\n\n\nROWS = [dict(workload="zero")]\n')
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path / "commbench")
    assert unknown_workloads(planted) == ["commbench/workloads/planted.py:2: planted"]


def test_every_workload_a_module_writes_is_in_the_registry():
    found = [hit for path in package_files() for hit in unknown_workloads(path)]
    assert not found, ("a workload written that core/workloadspec.py does not list (add its WorkloadSpec):\n"
                       + "\n".join(found))


def test_the_lists_derived_from_the_registry_are_those_it_replaced():
    assert columns.ALL_WORKLOADS == ("sweep", "buckets", "zero", "deepspeed", "pairs", "replay", "nccl-tests")
    assert columns.MEASURED == ("sweep", "buckets", "zero", "deepspeed", "pairs", "replay")
    assert set(options._LAID_OUT) == {"sweep", "zero", "buckets", "replay"}
    assert set(options._GROUPED) == {"sweep", "zero", "buckets"}
    assert options.AUTO_WIDE == ("sweep",)
    assert runsummary.JUDGED_BY_STOP_RULE == {"sweep", "buckets", "zero"}
    by_column = {c.name: set(c.writers) for c in columns.REGISTRY}
    assert by_column["contention"] == {"sweep", "zero", "buckets"}
    assert by_column["rank_time_us"] == by_column["rank_skew_us"] == {"sweep", "buckets", "zero"}
    assert by_column["n_collectives"] == {"buckets", "zero", "deepspeed", "replay"}
    assert by_column["zero_stage"] == by_column["grad_accum"] == {"zero", "deepspeed"}
    assert by_column["group_index"] == {"sweep", "zero", "buckets", "replay", "nccl-tests"}


def test_the_shared_options_follow_each_workloads_families():
    takes = {f.name: f.metadata[options.FLAG].commands for f in options.dataclasses.fields(options.RunOptions)
             if options.FLAG in f.metadata}
    assert takes["split"] == takes["metrics"] == ("sweep",)
    assert set(takes["solo"]) == set(takes["group"]) == {"sweep", "zero", "buckets"}
    assert set(takes["layout"]) == set(takes["order"]) == {"sweep", "zero", "buckets", "replay"}
