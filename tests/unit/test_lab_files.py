"""Every lab test file has a lab of its own: its own name prefix (none the start of another's: the
tests' leftover check and `lab down` match names by prefix) and its own subnets. CI's `pairwise`
step runs two of those files side by side (tests/integration/conftest.py's PAIRWISE_FILES), so a
shared prefix or subnet would be one test tearing down or routing into the other's lab. Reads files only."""

from __future__ import annotations

import re
from pathlib import Path

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
PREFIX = re.compile(r'^(?:SIDES_)?PREFIX = "([a-z0-9]+)"', re.M)
# a lab's subnet as the tests write it: "10.244.5" (the file adds ".0/24") or "10.233.0.0/24"
SUBNET = re.compile(r'"(10\.\d+\.\d+)(?:\.0/24)?"')


def lab_files() -> dict[str, tuple[str, set[str]]]:
    """Each integration file that names a lab prefix: (its prefix, the subnets it names)."""
    out = {}
    for path in sorted(INTEGRATION.glob("*.py")):
        text = path.read_text()
        m = PREFIX.search(text)
        if m:
            out[path.name] = (m.group(1), set(SUBNET.findall(text)))
    return out


def clashes(files: dict[str, tuple[str, set[str]]]) -> list[str]:
    """What two files share: a prefix that starts another's, or a subnet."""
    found = []
    items = sorted(files.items())
    for i, (a, (pa, sa)) in enumerate(items):
        for b, (pb, sb) in items[i + 1:]:
            if (pa.startswith(pb) or pb.startswith(pa)) and not {a, b} == {"conftest.py", "test_lab_compare.py"}:
                found.append(f"{a} and {b}: prefixes {pa!r} and {pb!r}")
            found += [f"{a} and {b}: subnet {s}" for s in sorted(sa & sb)]
    return found


def test_every_lab_file_has_its_own_prefix_and_subnets() -> None:
    files = lab_files()
    assert len(files) >= 25 and all(subnets for name, (_, subnets) in files.items()
                                    if name not in ("test_lab_compare.py", "test_lab_gate.py")), files
    assert clashes(files) == []


def test_a_shared_subnet_or_a_prefix_of_another_is_caught() -> None:
    planted = {"test_lab_a.py": ("cr", {"10.238.0"}), "test_lab_b.py": ("crl", {"10.242.0"}),
               "test_lab_c.py": ("cw", {"10.238.0"})}
    assert clashes(planted) == ["test_lab_a.py and test_lab_b.py: prefixes 'cr' and 'crl'",
                                "test_lab_a.py and test_lab_c.py: subnet 10.238.0"]


def test_the_pairwise_files_exist_and_are_serial() -> None:
    import sys

    sys.path.insert(0, str(INTEGRATION))  # its conftest imports labkit as the integration tier does
    try:
        from tests.integration import conftest
    finally:
        sys.path.remove(str(INTEGRATION))
    for name in conftest.PAIRWISE_FILES:
        assert (INTEGRATION / name).exists(), name
        assert conftest.is_serial(INTEGRATION / name), name
