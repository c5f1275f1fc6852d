"""The scans the once-tests share (test_vocab_once, test_workloads_once, test_statuses_once,
test_key_columns_once, test_group_label_once): each finds, in one module's parsed tree, a second
copy of a fact whose home is a registry: a literal list of its names, an if-chain over them, a
status written out, a group's label put together."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from unit.sources import PACKAGE, package_files, tree


def _text(nodes) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _all_text(nodes) -> bool:
    return all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in nodes)


def parsed(source: str | ast.Module) -> ast.Module:
    return ast.parse(source) if isinstance(source, str) else source


def literal_lists(source: str | ast.Module, names: set[str], most: int) -> list[tuple[int, list[str]]]:
    """(line, names) of every literal in `source` that lists more than `most` of `names`: a tuple,
    list or set, or a dict from names to names (keys or values; a dict from a name to code, such as
    the harness' torch bindings, is a table of code, not a list of names)."""
    found = []
    for node in ast.walk(parsed(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            groups = [node.elts]
        elif isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
            groups = [keys, node.values] if _all_text(keys) and _all_text(node.values) else []
        else:
            continue
        for group in groups:
            hits = [n for n in _text(group) if n in names]
            if len(set(hits)) > most:
                found.append((node.lineno, hits))
    return found


def _tested(test: ast.expr, names: set[str]) -> tuple[str, set[str]] | None:
    """(the subject, the names) of a test `x == "name"`, `"name" == x` or `x in ("a", "b")`."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    left, right, op = test.left, test.comparators[0], test.ops[0]
    if isinstance(op, (ast.Eq, ast.NotEq)):
        for subject, other in ((left, right), (right, left)):
            if isinstance(other, ast.Constant) and other.value in names:
                return ast.dump(subject), {other.value}
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        hits = {n for n in _text(right.elts) if n in names}
        if hits:
            return ast.dump(left), hits
    return None


def _chain(node: ast.If | ast.IfExp, names: set[str]) -> tuple[str, set[str]] | None:
    """An if/elif (or a conditional expression's else-if) chain from `node` on: its subject and every
    name it tests that subject against."""
    first = _tested(node.test, names)
    if first is None:
        return None
    subject, seen = first
    rest = node.orelse
    while True:
        nxt = rest[0] if isinstance(rest, list) and len(rest) == 1 else rest
        tested = _tested(nxt.test, names) if isinstance(nxt, (ast.If, ast.IfExp)) else None
        if tested is None or tested[0] != subject:
            return (subject, seen) if first[1] != seen else None  # one test is a pick, not a chain
        seen = seen | tested[1]
        rest = nxt.orelse


def if_chains(source: str | ast.Module, names: set[str]) -> list[tuple[int, list[str]]]:
    """(line, names) of every branching on one subject against two or more of `names`: an if/elif
    chain, a chain of conditional expressions, or `if` statements one after another in one block
    (`if op == "all_reduce": return ...` then `if op == "all_gather": ...`)."""
    found: list[tuple[int, list[str]]] = []
    inner: set[int] = set()  # the elif and else-if nodes already read as part of a chain
    for node in ast.walk(parsed(source)):
        if isinstance(node, (ast.If, ast.IfExp)) and id(node) not in inner:
            chain = _chain(node, names)
            rest = node.orelse
            while isinstance(rest, (list, ast.If, ast.IfExp)):
                nxt = rest[0] if isinstance(rest, list) and len(rest) == 1 else rest
                if not isinstance(nxt, (ast.If, ast.IfExp)):
                    break
                inner.add(id(nxt))
                rest = nxt.orelse
            if chain is not None and len(chain[1]) > 1:
                found.append((node.lineno, sorted(chain[1])))
        body = getattr(node, "body", None)
        if isinstance(body, list):  # ifs one after another in one block
            by_subject: dict[str, tuple[int, set[str], list[int]]] = {}
            for stmt in body:
                tested = _tested(stmt.test, names) if isinstance(stmt, ast.If) else None
                if tested is not None:
                    line, seen, tests = by_subject.setdefault(tested[0], (stmt.lineno, set(), []))
                    seen |= tested[1]
                    tests.append(stmt.lineno)
            found += [(line, sorted(seen)) for line, seen, tests in by_subject.values()
                      if len(seen) > 1 and len(tests) > 1]
    return sorted({(line, tuple(n)): (line, n) for line, n in found}.values())


def scan_package(scan, skip: tuple[str, ...] = ()) -> Iterator[str]:
    """`path:line: names` of every finding of `scan(tree)` over the package's modules, but `skip`
    (paths relative to the package's folder, e.g. "core/vocab.py")."""
    for path in package_files():
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if any(rel == f"commbench/{s}" for s in skip):
            continue
        for line, names in scan(tree(path)):
            yield f"{rel}:{line}: {', '.join(names)}"


def _about_status(node: ast.AST) -> bool:
    """An expression that holds a link's status: a name or attribute with `status` in it, a call of
    one (call.status(peer)), or a subscript row["status"] (not a literal that names the column)."""
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Tuple)):
        return False
    if isinstance(node, ast.Tuple) and not all(isinstance(e, (ast.Name, ast.Attribute)) for e in node.elts):
        return False
    return "status" in ast.unparse(node)


def _values(expr: ast.expr) -> list[ast.expr]:
    """What an expression can evaluate to, through conditional expressions and `or`/`and`."""
    if isinstance(expr, ast.IfExp):
        return _values(expr.body) + _values(expr.orelse)
    if isinstance(expr, ast.BoolOp):
        return [v for value in expr.values for v in _values(value)]
    return [expr]


def _status_places(node: ast.AST, statuses: set[str]) -> list[ast.AST]:
    """The expressions under `node` that would hold a status, if `node` compares, sets, defaults,
    passes or lists one (see status_literals)."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if not any(_about_status(s) for s in sides if not isinstance(s, ast.Constant)):
            return []
        return [e for s in sides for e in ([s, *s.elts] if isinstance(s, (ast.Tuple, ast.List, ast.Set)) else [s])]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        fits = any(_about_status(t) for t in targets) and node.value is not None
        return _values(node.value) if fits and node.value is not None else []
    if isinstance(node, ast.keyword):
        return [node.value] if node.arg is not None and "status" in node.arg else []
    if isinstance(node, ast.BoolOp):
        return list(node.values) if any(_about_status(v) for v in node.values) else []
    if isinstance(node, ast.Call):
        return node.args[:1] if "failure" in ast.unparse(node.func) else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "status" in node.name:
        return [v for sub in ast.walk(node) if isinstance(sub, ast.Return) and sub.value is not None
                for v in ast.walk(sub.value)]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):  # a list or a table of three or more
        elts = [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else node.elts
        listed = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in statuses}
        return list(elts) if len(listed) > 2 else []
    return []


def status_literals(source: str | ast.Module, statuses: set[str], distinct: set[str]) -> list[tuple[int, list[str]]]:
    """(line, [status]) of every status written out as a string: compared with, assigned to, given
    as or defaulted for a status (`status == "timeout"`, `status = "error"`, `status="wrong"`,
    `call.status(p) or "error"`), returned by a function named after statuses, passed to a
    `_failure(...)` or listed (three or more); and a status distinct enough to count anywhere
    (`distinct`: "unobserved")."""
    found = []
    for node in ast.walk(parsed(source)):
        for place in _status_places(node, statuses):
            if isinstance(place, ast.Constant) and place.value in statuses:
                found.append((place.lineno, [place.value]))
        if isinstance(node, ast.Constant) and node.value in distinct:
            found.append((node.lineno, [node.value]))
    return sorted({(line, tuple(n)): (line, n) for line, n in found}.values())


_SQL_GROUP = re.compile(r"\bgroup_(dim|index|ranks)\b")
_DIM_END = re.compile(r"(?:^|[^A-Za-z])(dp|tp|pp|cp|ep|split)$")  # a dimension written out before an index


def _string(node: ast.AST) -> str | None:
    """A string literal's text, or an f-string's literal parts joined (SQL built around values)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def _joined(parts: list[ast.expr]) -> bool:
    """A dimension, then at once an index: `{dim}{index}`, `dp{index}`, `dim + str(index)`."""
    for a, b in zip(parts, parts[1:]):
        if "index" not in ast.unparse(b) or isinstance(b, ast.Constant):
            continue
        head = a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
        if (head is None and "dim" in ast.unparse(a)) or (head is not None and _DIM_END.search(head)):
            return True
    return False


def _summands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _summands(node.left) + _summands(node.right)
    return [node]


def label_copies(source: str | ast.Module) -> list[tuple[int, list[str]]]:
    """(line, [what]) of every place that puts a layout group's label together: in SQL, a string
    that concatenates (`||`) a group column or writes `' solo'`; in Python, an f-string or a sum
    that writes a dimension and then its index, or the literal " solo"."""
    found = []
    for node in ast.walk(parsed(source)):
        text = _string(node)
        if text is not None and (("||" in text and _SQL_GROUP.search(text)) or "' solo'" in text):
            found.append((node.lineno, ["SQL"]))
        if isinstance(node, ast.Constant) and node.value == " solo":
            found.append((node.lineno, ["solo"]))
        if isinstance(node, ast.JoinedStr) and _joined(node.values):
            found.append((node.lineno, ["f-string"]))
        if isinstance(node, ast.BinOp) and _joined(_summands(node)):
            found.append((node.lineno, ["sum"]))
    return sorted({(line, tuple(n)): (line, n) for line, n in found}.values())
