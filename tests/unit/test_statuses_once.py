"""core/linkstatus.py is the one home of a pairs link's statuses: no module writes one out as a
string where it compares, sets, defaults or returns a status, or lists them."""

from __future__ import annotations

from commbench.core import linkstatus

from unit.oncescan import scan_package, status_literals

STATUSES = set(linkstatus.STATUSES)
DISTINCT = {linkstatus.UNOBSERVED, linkstatus.NEVER_JOINED}  # no other meaning: written out anywhere is a copy


def written(tree):
    return status_literals(tree, STATUSES, DISTINCT)


def test_the_scan_finds_a_status_written_out():
    assert written('if status == "timeout":\n    pass\n') == [(1, ["timeout"])]
    assert written('status = "error"\n') == [(1, ["error"])]
    assert written('f(status="wrong")\n') == [(1, ["wrong"])]
    assert written('s = call.status(peer) or "error"\n') == [(1, ["error"])]
    assert written('_failure("unreachable", why)\n') == [(1, ["unreachable"])]
    assert written('def status(self, r):\n    return "timeout" if r else None\n') == [(2, ["timeout"])]
    assert written('FAILED = ("unreachable", "timeout", "error")\n')
    assert written('x = "never joined"\n') == [(1, ["never joined"])]


def test_other_meanings_of_the_same_words_are_no_status():
    assert not written('record["error"] = why\n')
    assert not written('if died == "timeout":\n    pass\n')
    assert not written('NAMES = {"#wrong": "wrong", "error": "error"}\n')


def test_a_planted_status_is_found():
    planted = 'def judge(row):\n    return row["status"] in ("unreachable", "timeout")\n'
    assert written(planted) == [(2, ["timeout"]), (2, ["unreachable"])]


def test_no_module_but_the_registry_writes_a_status():
    found = list(scan_package(written, skip=("core/linkstatus.py",)))
    assert not found, ("a pairs link status written out (name it from commbench/core/linkstatus.py):\n"
                       + "\n".join(found))
