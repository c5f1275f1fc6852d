"""Corrupt nccl-tests logs (issue #39, class 6): a row whose numbers nccl-tests cannot have printed
(busbw and algbw that disagree for the collective and rank count, the two swapped, a count that is
not the size's, a size of 2^63-1 with a small count) is refused with one line naming the row, the
right number and how many rows fail; a line shaped like a row that cannot be read is counted and
said. Through the real CLI, in process (tests/conftest.py `cli`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commbench.integrations.nccl_tests.arith import half_unit

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
LOG = (DATA / "all_reduce_v2.19.4_1node_8xA100.txt").read_text()  # 8 ranks: all_reduce's factor 1.75
ROW = ("    33554432       8388608     float     sum      -1   431.40   77.78  136.11       0"
       "   432.67   77.55  135.72       0")
LINE = LOG.split("\n").index(ROW) + 1


def _planted(tmp_path: Path, row: str, log: str = LOG, name: str = "all_reduce.txt") -> str:
    assert ROW in log
    path = tmp_path / name
    path.write_text(log.replace(ROW, row))
    return str(path)


def _fields(**changes: str) -> str:
    names = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "wrong"]
    tokens = ROW.split()
    for k, v in changes.items():
        tokens[names.index(k)] = v
    return "  ".join(tokens)


CASES = {
    "busbw-impossible": (_fields(busbw="999.99"), "busbw 999.99 is not algbw 77.78 x 1.75 (the bus factor of "
                                                  "all_reduce on 8 ranks) = 136.12"),
    "swapped": (_fields(algbw="136.11", busbw="77.78"), "algbw and busbw are swapped"),
    "count": (_fields(count="8388000"), "this size has count 8388608"),
    "size-2^63-1": (_fields(size=str(2**63 - 1), count="2"), "size 9223372036854775807 B with count 2 of float"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.failure(
    row="nccl-arith",
    section="Corrupt nccl-tests logs",
    failure="an nccl-tests log with a row nccl-tests cannot have printed: busbw and algbw that cannot both be true "
            "for the collective and rank count, algbw and busbw swapped, a count that is not size / element size "
            "(x ranks for the gather family), a size of 2^63-1 with count 2",
    does="every row's arithmetic is checked (integrations/nccl_tests/arith.py: count x element size vs size as "
         "nccl-tests prints it; busbw = algbw x the bus factor within half a unit of each printed digit): `LOG line "
         "40: busbw 77.78 is not algbw 136.11 x 1.75 (the bus factor of all_reduce on 8 ranks) = 238.19: algbw and "
         "busbw are swapped; 1 of 50 half-rows fail this check (line 40): ... so nothing was imported`, exit 2, "
         "nothing written (was: imported, exit 0, no word)",
    cases="*",
)
def test_a_row_nccl_tests_cannot_have_printed_is_refused(cli, tmp_path, case):
    row, words = CASES[case]
    proc = cli("nccl-tests", "import", _planted(tmp_path, row), "--out", str(tmp_path / "out.parquet"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and f"line {LINE}:" in lines[0], lines
    assert re.search(r"\d+ of 50 half-rows fail", lines[0]) and "nothing was imported" in lines[0]
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.failure(row="nccl-arith")
def test_without_rank_lines_a_ratio_no_rank_count_gives_is_refused_and_the_count_says_how_many(cli, tmp_path):
    log = "\n".join(x for x in LOG.split("\n") if "Rank " not in x)  # the world size is unknown
    bad = [r for r in log.split("\n") if re.match(r"^\s+\d+\s+\d+\s+float", r)][-3:]
    for r in bad:  # busbw above 2 x algbw: no all_reduce on any number of ranks
        t = r.split()
        log = log.replace(r, "  ".join(t[:7] + [f"{float(t[6]) * 2.5:.2f}"] + t[8:]))
    (tmp_path / "all_reduce.txt").write_text(log)
    proc = cli("nccl-tests", "import", str(tmp_path / "all_reduce.txt"), "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "is the bus factor of all_reduce on no number of ranks" in line and "3 of 50 half-rows" in line, line


@pytest.mark.failure(
    row="nccl-unreadable-row",
    section="Corrupt nccl-tests logs",
    failure="a row whose size is written in non-ASCII digits (`３３５５４４３２`)",
    does="counted and said: `warning: LOG: 1 line shaped like a result row but not in ASCII digits (lines 40) not "
         "imported: nccl-tests prints ASCII digits only; check those lines of the log`; the other rows imported, "
         "exit 0; a log of nothing else: `no nccl-tests result rows ... (line N and M more are shaped like rows but "
         "not in ASCII digits ...)`, exit 2 (was: dropped without a word)",
)
def test_a_row_in_other_digits_is_counted_and_said(cli, tmp_path):
    path = _planted(tmp_path, ROW.replace("33554432", "３３５５４４３２", 1))
    proc = cli("nccl-tests", "import", path, "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr
    warning = [x for x in proc.stderr.splitlines() if "ASCII digits" in x]
    assert len(warning) == 1 and "1 line shaped like a result row" in warning[0] and f"{LINE}" in warning[0]
    assert "imported" in proc.stdout and "48 rows" in proc.stdout
    only = tmp_path / "only.txt"
    only.write_text("# nccl-tests version 2.19.4\n  ３２  ８  float  sum  -1  1.0  0.00  0.00  0  1.0  0.00  0.00  0\n")
    proc = cli("nccl-tests", "import", str(only), "--collective", "all_reduce", "--out", str(tmp_path / "p.parquet"))
    assert proc.returncode == 2 and "not in ASCII digits" in proc.stderr


def test_every_sample_log_passes_the_arithmetic_and_the_print_precision_is_read():
    assert half_unit("136.11") == pytest.approx(0.005) and half_unit("1234.5") == pytest.approx(0.05)
    assert half_unit("123456") == pytest.approx(0.5) and half_unit("1.2e+05") == pytest.approx(5000)
    assert half_unit("1e+400") > 1e299 and half_unit("1e-400") == 0.0  # out of a float's range: no OverflowError
