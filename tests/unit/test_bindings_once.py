"""harness/collectives.py is the one torch binding of the collectives: no workload calls torch's
collective functions itself (each starts or binds its calls through that module's entries)."""

from __future__ import annotations

import ast

from unit.sources import PACKAGE, tree

# torch's calls of the measured collectives, old and new names (harness/collectives.py binds them)
TORCH_CALLS = {"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
               "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single", "broadcast",
               "reduce", "all_gather_flat", "reduce_scatter_flat"}


def torch_collective_calls(source) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in TORCH_CALLS:
                found.append((node.lineno, name))
    return found


def test_the_scan_finds_a_second_binding():
    planted = 'def launch(t, group):\n    return lambda: dist.all_reduce(t, group=group, async_op=True)\n'
    assert torch_collective_calls(planted) == [(2, "all_reduce")]
    assert torch_collective_calls('all_gather_flat(out, part, group=g)\n') == [(1, "all_gather_flat")]
    assert not torch_collective_calls('dist.all_gather_object(everyone, mine)\ndist.barrier()\n')


def test_no_workload_binds_a_collective_to_torch_itself():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
             for path in sorted((PACKAGE / "workloads").rglob("*.py"))
             for line, name in torch_collective_calls(tree(path))]
    assert not found, ("a workload calls torch's collectives itself (start them through "
                       "commbench/harness/collectives.py):\n" + "\n".join(found))
