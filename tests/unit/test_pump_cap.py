"""core/pump.py's Capped, the writer that bounds what a child's output puts on: up to its cap, then
one line saying so (the pump's processes are in tests/integration/test_pump.py)."""

from __future__ import annotations

import pytest

from commbench.core import pump


@pytest.mark.failure(row="pump-itself-deadline-under-flood")
def test_capped_writes_up_to_its_cap_then_one_line_saying_so():
    written: list[str] = []
    cap = pump.Capped(written.append, cap=2 * 1024 * 1024)
    for _ in range(5):
        cap("a" * (1024 * 1024 - 1) + "\n")
    assert written[:2] == ["a" * (1024 * 1024 - 1) + "\n"] * 2
    assert written[2:] == ["[commbench: output cut here, after 2 MiB; the rest is not kept]\n"]
    assert cap.cut and cap.dropped == 3 * 1024 * 1024
    half: list[str] = []
    cap = pump.Capped(half.append, cap=1024 * 1024)
    cap("no newline")
    cap("b" * (1024 * 1024))
    assert half[-1].startswith("\n[commbench: output cut here")  # on a line of its own
