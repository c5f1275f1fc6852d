"""core/vocab.py is the one home of the collectives: no module writes out a list of their names
(a new collective is one CollectiveSpec entry, and every tuple, set or name table follows from it)."""

from __future__ import annotations

import ast
from pathlib import Path

from commbench.core.vocab import COLLECTIVES, NCCL_TESTS_ONLY

from .sources import tree

ROOT = Path(__file__).resolve().parents[2]
NAMES = {c.name for c in COLLECTIVES + NCCL_TESTS_ONLY}
MOST = 2  # two names are a pair a module picks (all_reduce against reduce_scatter); three are a list


def _names(nodes) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and n.value in NAMES]


def _all_text(nodes) -> bool:
    return all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in nodes)


def lists_of_collectives(source: str | ast.Module) -> list[tuple[int, list[str]]]:
    """(line, names) of every literal in `source` (a module's text or its parsed tree) that lists three
    or more collective names: a tuple, list or set, or a dict from names to names (keys or values; a
    dict from a name to code, such as the harness' torch bindings, is no list of names)."""
    found = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            groups = [node.elts]
        elif isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
            groups = [keys, node.values] if _all_text(keys) and _all_text(node.values) else []
        else:
            continue
        for group in groups:
            names = _names(group)
            if len(set(names)) > MOST:
                found.append((node.lineno, names))
    return found


def test_the_scan_finds_a_list_of_collectives():
    assert lists_of_collectives('X = ("all_gather", "reduce_scatter", "all_to_all")\n')
    assert lists_of_collectives('f({"AllReduce": "all_reduce", "Reduce": "reduce", "SendRecv": "sendrecv"})\n')
    assert lists_of_collectives('if op in ["all_reduce", "reduce", "all_gather"]: pass\n')
    assert not lists_of_collectives('X = ("all_reduce", "reduce_scatter")\n')
    assert not lists_of_collectives('X = {"all_reduce": f, "reduce": g, "sendrecv": h}\n')


def test_no_module_but_the_vocabulary_lists_collectives():
    found = []
    for path in sorted((ROOT / "commbench").rglob("*.py")):
        if path == ROOT / "commbench" / "core" / "vocab.py":
            continue
        for line, names in lists_of_collectives(tree(path)):  # parsed once a session (sources.py)
            found.append(f"{path.relative_to(ROOT)}:{line}: {', '.join(names)}")
    assert not found, ("collective names listed by hand (derive them from commbench/core/vocab.py's "
                       "CollectiveSpec entries):\n" + "\n".join(found))
