"""Hostile nccl-tests logs (issue #58, Build 5): every value nccl-tests cannot print is refused in one
line naming the file, the line, the field and what was expected (exit 2, nothing written); a row it
does print that commbench does not keep (size 0, a time of nan) is left out and named in one
warning; and the tail of a long log, its Rank lines cut as users paste it, gets its world size from
the rows' busbw/algbw ratio and the rank numbers it shows, saying so. Through the real CLI, in
process (tests/conftest.py `cli`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commbench.integrations.nccl_tests.arith import half_unit

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
LOG = (DATA / "all_reduce_v2.19.4_1node_8xA100.txt").read_text()  # 8 ranks, recorded
ROW = ("    33554432       8388608     float     sum      -1   431.40   77.78  136.11       0"
       "   432.67   77.55  135.72       0")
LINE = LOG.split("\n").index(ROW) + 1
HEADER = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 "
          "validation: 1 graph: 0 unalign: 0")
NAMES = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "wrong"]


def _fields(**changes: str) -> str:
    tokens = ROW.split()
    for k, v in changes.items():
        tokens[NAMES.index(k)] = v
    return "  ".join(tokens)


def _import(cli, tmp_path: Path, text: str, name: str = "all_reduce.txt"):
    path = tmp_path / name
    path.write_text(text)
    return cli("nccl-tests", "import", str(path), "--out", str(tmp_path / "out.parquet")), path


REFUSED = {  # case -> (the log, its line, the words of the one line)
    "nan-time": (LOG.replace(ROW, _fields(time="nan")), LINE, "time nan beside algbw 77.78"),
    "inf-busbw": (LOG.replace(ROW, _fields(busbw="inf")), LINE, "busbw inf beside time 431.4 us"),
    "1e9-busbw": (LOG.replace(ROW, _fields(busbw="1e9")), LINE, "busbw 1e+09 GB/s: at most 100,000 GB/s"),
    "5e4-algbw": (LOG.replace(ROW, _fields(algbw="5e+04", busbw="9e+04")), LINE,
                  "algbw 50000 GB/s is not size 33554432 B / time 431.4 us = 77.78 GB/s"),
    "negative-count": (LOG.replace(ROW, _fields(count="-8388608")), LINE, "count '-8388608': a whole number"),
    "plus-size": (LOG.replace(ROW, _fields(size="+33554432")), LINE, "size '+33554432': a whole number"),
    "hex-size": (LOG.replace(ROW, _fields(size="0x2000000")), LINE, "size '0x2000000': a whole number"),
    "size-0-count": (LOG.replace(ROW, _fields(size="0")), LINE, "count 8388608 with size 0 B"),
    "unknown-type": (LOG.replace(ROW, _fields(type="quux")), LINE, "type 'quux' is not a data type nccl-tests"),
    "unknown-redop": (LOG.replace(ROW, _fields(redop="bogus")), LINE, "redop 'bogus' is not a reduction"),
    "escaped-redop": (LOG.replace(ROW, _fields(redop="su\x1bm")), LINE, "redop 'su\\x1bm' is not a reduction"),
    "bom-mid-file": (LOG.replace(ROW, "\ufeff" + ROW), LINE, "an invisible character U+FEFF"),
    "zero-width-space": (LOG.replace(ROW, "\u200b" + ROW), LINE, "an invisible character U+200B"),
    "header-disagrees": (LOG.replace("#\n# Using devices", HEADER.replace("nGpus 8", "nGpus 4")
                                     + "\n#\n# Using devices", 1), 4,
                         "nThread 1 nGpus 4, where the header at line 3 said nThread 1 nGpus 8"),
    "absurd-version": (LOG.replace("version 2.19.4", "version 99999.0.0"), 1,
                       "nccl-tests version '99999.0.0': a version like 2.19.6 was expected"),
    "absurd-nccl-code": (LOG.replace("nccl-library=21903", "nccl-library=999999999"), 1,
                         "nccl-library=999999999 is no NCCL version code"),
    "count-contradicts-size": (LOG.replace(ROW, _fields(type="half")), LINE,
                               "size 33554432 B with count 8388608 of half (2 B each)"),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.failure(
    row="nccl-impossible-value",
    section="Corrupt nccl-tests logs",
    failure="an nccl-tests log with a value nccl-tests cannot print: a time of nan beside a bandwidth, an inf or "
            "1e9 busbw, an algbw that is not size / time, a negative, `+` or hex size or count, a count beside a "
            "size of 0, an unknown type or redop (one with an escape), a BOM or zero-width space in a row, a second "
            "header of the same run with other nGpus, a version no nccl-tests or NCCL has, a count that is not "
            "the size's",
    does="refused before anything is written (integrations/nccl_tests/values.py, arith.py, text.py): one line "
         "naming the file, the line, the field and what was expected, e.g. `LOG line 40: busbw 1e+09 GB/s: at most "
         "100,000 GB/s was expected, more than any interconnect carries`, control characters as escapes, exit 2 "
         "(was: imported, exit 0, no word)",
    cases="*",
)
def test_a_value_nccl_tests_cannot_print_is_refused_in_one_line(cli, tmp_path, case):
    text, line, words = REFUSED[case]
    proc, path = _import(cli, tmp_path, text)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"commbench: {path} line {line}: "), lines
    assert words in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and not re.search(r"[\x00-\x08\x0b-\x1f\x7f\ufeff\u200b]", proc.stderr)
    assert not (tmp_path / "out.parquet").exists()


LEFT_OUT = {  # case -> (the log, the words of the warning): rows nccl-tests prints, commbench does not keep
    "size-0": (LOG.replace(ROW, _fields(size="0", count="0")), f"2 half-rows of size 0 left out (line {LINE}): "
                                                              "nccl-tests prints them"),
    "no-iterations": (LOG.replace(ROW, _fields(time="-nan", algbw="-nan", busbw="-nan")),
                      f"1 half-row without a time left out (line {LINE}): a time of nan (a run of no iterations)"),
}


@pytest.mark.parametrize("case", list(LEFT_OUT))
@pytest.mark.failure(
    row="nccl-left-out-row",
    section="Corrupt nccl-tests logs",
    failure="an nccl-tests log with rows nccl-tests prints but commbench does not keep: size 0 (`-b 0`, the gather "
            "family's smallest sizes), a time of nan with bandwidths of nan (a run of no iterations, glibc's `-nan`)",
    does="left out and named in one warning per kind: `warning: LOG: 2 half-rows of size 0 left out (line 40): "
         "nccl-tests prints them ...`; the other rows imported, exit 0 (was: counted on stdout only)",
    cases="*",
)
def test_a_row_nccl_tests_prints_but_commbench_does_not_keep_is_named(cli, tmp_path, case):
    text, words = LEFT_OUT[case]
    proc, _ = _import(cli, tmp_path, text)
    assert proc.returncode == 0, proc.stderr
    warnings = [x for x in proc.stderr.splitlines() if "left out" in x]
    assert len(warnings) == 1 and words in warnings[0], proc.stderr
    assert "48 rows" in proc.stdout or "49 rows" in proc.stdout


# ---- the tail of a long log ---------------------------------------------------------------------

# No log of more than 24 ranks is recorded here (tests/data/nccl-tests, tests/data/nccl_debug,
# ../shared/fixtures), so the 72-rank tail is made from the recorded 16-rank log
# all_reduce_2node_16xH100.txt (microsoft/superbenchmark's, see tests/data/nccl-tests/README.md) by
# editing it: cut above its last two Rank lines (as a user pastes a log's tail), those renumbered 70
# and 71, and each busbw rewritten as nccl-tests prints it for 72 ranks (AllReduceGetBw: algbw x
# 2(n-1)/n, util.cu getFloatStr width 6; algbw taken as the value both its printed digits and size /
# the printed time allow). Sizes, counts, times and algbw stay as recorded.
SIXTEEN = (DATA / "all_reduce_2node_16xH100.txt").read_text()


def _float_str(value: float, width: int = 6) -> str:
    """util.cu getFloatStr: %.2f, else %.1f, else %.0f, else an exponent, in `width` characters."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


def _tail(world: int = 72, shown: tuple[int, ...] = (70, 71)) -> str:
    lines = SIXTEEN.split("\n")
    first_row = next(i for i, x in enumerate(lines) if re.match(r"^\s+8\s+2\s+float", x))
    keep = [x for x in lines[:first_row] if not x.startswith("#  Rank")][-4:]  # the column header
    ranks = [x for x in lines if x.startswith("#  Rank")][-len(shown):] if shown else []
    ranks = [re.sub(r"Rank +\d+", f"Rank {r:2d}", x, count=1) for x, r in zip(ranks, shown)]
    rows = []
    for x in lines[first_row:]:
        t = x.split()
        if len(t) == 13 and t[0].isdigit():
            size = int(t[0])
            for at in (5, 9):  # each half's time; its algbw and busbw after it
                time, alg, half = float(t[at]), float(t[at + 1]), half_unit(t[at])
                lo, hi = max(alg - 0.005, size / (time + half) / 1e3), min(alg + 0.005, size / (time - half) / 1e3)
                t[at + 2] = _float_str((lo + hi) / 2 * 2 * (world - 1) / world)
            x = "  ".join(t)
        rows.append(x)
    return "\n".join(ranks + keep + rows)


@pytest.mark.failure(
    row="nccl-log-tail",
    section="Corrupt nccl-tests logs",
    failure="the tail of a 72-rank nccl-tests log as users paste it: its header's first Rank lines cut, ranks 70 "
            "and 71 shown",
    does="the world size from the rows' busbw/algbw ratio (each collective's bus factor) and the highest rank "
         "shown, which must agree (integrations/nccl_tests/worldsize.py): imported with world_size 72 and `warning: "
         "LOG: world size 72 from the busbw/algbw ratio: the log's rank lines are cut (it shows ranks 70..71, which "
         "agree)`, exit 0; a ratio that says fewer ranks than a rank shown is refused in one line, exit 2 (was: "
         "refused, the world size taken as the 2 Rank lines seen)",
)
def test_a_long_logs_tail_gets_its_world_size_from_the_ratio_and_the_rank_numbers(cli, tmp_path):
    import pandas as pd

    proc, path = _import(cli, tmp_path, _tail())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (f"commbench: warning: {path}: world size 72 from the busbw/algbw ratio: the log's "
                                   "rank lines are cut (it shows ranks 70..71, which agree)")
    df = pd.read_parquet(tmp_path / "out.parquet")
    assert len(df) == 62 and set(df.world_size) == {72} and "72 ranks" in proc.stdout
    assert df.nnodes.isna().all() and set(df.hosts.map(tuple)) == {("ztan-mig-gq73",)}


@pytest.mark.failure(row="nccl-log-tail")
def test_a_tail_without_rank_lines_or_with_a_rank_past_the_ratio(cli, tmp_path):
    import pandas as pd

    proc, _ = _import(cli, tmp_path, _tail(shown=()))  # no Rank line at all: the ratio alone, as before
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert set(pd.read_parquet(tmp_path / "out.parquet").world_size) == {72}
    (tmp_path / "out.parquet").unlink()
    proc, path = _import(cli, tmp_path, _tail(world=16, shown=(70, 71)))  # the ratio says 16, rank 71 is shown
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"commbench: {path}: its rows' busbw/algbw ratio says 16 ranks of all_reduce, but it shows rank 71: not the "
        "numbers nccl-tests printed (lines spliced from two runs?), so nothing was imported"]
    proc, path = _import(cli, tmp_path, _tail(world=16, shown=(14, 15)))  # a 16-rank tail: the ratio and rank 15
    assert proc.returncode == 0 and "world size 16 from the busbw/algbw ratio" in proc.stderr, proc.stderr
