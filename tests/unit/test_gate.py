"""commbench.analysis.gate.gate and `commbench gate`: reference bands judged per entry, suggested from a good run.

Result frames are synthetic (tests/unit/synthetic.py: the real schema through the real writer and
reader); bands files are written as text, the way people write them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from commbench.analysis.gate import gate, gateview
from commbench.analysis.gate.bands import Bands, load_bands, parse_bands
from commbench.analysis.gate.bandsuggest import suggest
from commbench.core.errors import BadInput

from unit import synthetic

SIZES = (8, 1024, 65536, 1 << 20, 1 << 24)


def rows(scale: float = 1.0, quiet: bool = True, **kw) -> list[dict]:
    """Five repetitions. synthetic's repetitions vary by +-10%; quiet shrinks that to +-1%, a steady
    fabric's spread, so that suggested bands keep the 5% floor."""
    out = synthetic.make_rows(repetitions=5, **kw)
    if quiet:
        groups: dict[tuple, list[dict]] = {}
        for r in out:
            groups.setdefault((r["collective"], r["size_bytes"], r["in_place"]), []).append(r)
        for group in groups.values():
            mid = sorted(r["busbw_GBps"] for r in group)[len(group) // 2]
            for r in group:
                factor = 1 + (r["busbw_GBps"] / mid - 1) / 10
                r["algbw_GBps"] *= factor * mid / r["busbw_GBps"]
                r["busbw_GBps"] = mid * factor
    for r in out:
        r["busbw_GBps"] *= scale
        r["algbw_GBps"] *= scale
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gate")
    return {
        "good": synthetic.write(d / "good.parquet", rows()),
        "slow": synthetic.write(d / "slow.parquet", rows(scale=0.8)),
        "wrong": synthetic.write(d / "wrong.parquet", rows(wrong=3)),
        "noisy": synthetic.write(d / "noisy.parquet", rows(quiet=False)),
        "noisy_slow": synthetic.write(d / "noisy_slow.parquet", rows(scale=0.8, quiet=False)),
        "dir": d,
    }


@pytest.fixture(scope="module")
def good(files):
    from commbench.core.results import read_results

    return read_results([files["good"]])


def median(frame, collective="all_reduce", size=1 << 24, in_place=True) -> float:
    sel = frame[(frame.collective == collective) & (frame.size_bytes == size) & (frame.in_place == in_place)]
    return float(sel.busbw_GBps.median())


def bands(*entries: str, top: str = "version: 1\nsystem: test\n") -> Bands:
    return parse_bands(top + "entries:\n" + "".join(f"  - {e}\n" for e in entries), "bands.yaml")


def only(report: gate.GateReport) -> gate.EntryResult:
    assert len(report.results) == 1
    return report.results[0]


# ---- judging ----


def test_inside_the_band_passes_and_nccl_tests_spellings_match(good):
    expected = median(good)
    r = only(gate.judge(bands(f"{{collective: allreduce, size: 16M, ranks: 16, dtype: float, in_place: in, "
                              f"busbw_GBps: {expected * 1.03}, lower: 5%}}"), good))
    assert r.verdict == "PASS" and r.n_rows == 5 and r.wrong_rows == 0
    assert r.measured_GBps == pytest.approx(expected) and r.ratio == pytest.approx(1 / 1.03)
    assert r.entry.collective == "all_reduce" and r.entry.dtype == "float32" and r.entry.lower == 0.05


def test_without_placement_the_median_is_over_both_placements(good):
    sel = good[(good.collective == "all_gather") & (good.size_bytes == 1 << 20)]
    r = only(gate.judge(bands("{collective: all_gather, size: 1M, ranks: 16, busbw_GBps: 1.0, lower: 0.5}"), good))
    assert r.n_rows == 10 and r.measured_GBps == pytest.approx(float(sel.busbw_GBps.median()))


def test_below_the_band_is_a_miss_with_the_change_named(good):
    expected = median(good) / 0.9  # measured is 10% below expected, tolerance 5%
    report = gate.judge(bands(f"{{collective: all_reduce, size: 16M, ranks: 16, in_place: true, "
                              f"busbw_GBps: {expected}}}"), good)
    r = only(report)
    assert r.verdict == "FAIL" and r.reason == "below band (-10.0%, tolerance -5%)"
    assert r.band == (pytest.approx(expected * 0.95), None)
    assert report.exit_code() == 1
    assert report.summary().startswith("gate: FAIL: 1 of 1 entries missed (system test): "
                                       "#1 all_reduce any dtype 16 MiB 16 ranks in-place: below band")


def test_above_the_band_is_a_miss_only_when_upper_is_set(good):
    expected = median(good) / 1.3
    loose = only(gate.judge(bands(f"{{collective: all_reduce, size: 16M, ranks: 16, busbw_GBps: {expected}}}"), good))
    assert loose.verdict == "PASS" and loose.reason == "+30.0%"
    tight = only(gate.judge(bands(f"{{collective: all_reduce, size: 16M, ranks: 16, busbw_GBps: {expected}, "
                                  "upper: 0.2}"), good))
    assert tight.verdict == "FAIL" and tight.reason.startswith("above band (+30.0%, tolerance +20%): suspiciously fast")
    # the file's defaults apply to entries that do not set their own
    default = gate.judge(bands(f"{{collective: all_reduce, size: 16M, ranks: 16, busbw_GBps: {expected}}}",
                               top="version: 1\ndefaults: {lower: 0.01, upper: 10%}\n"), good)
    assert only(default).verdict == "FAIL" and only(default).entry.upper == pytest.approx(0.1)


def test_not_measured_is_a_miss_unless_optional(good):
    missing = "{collective: all_reduce, size: 1G, ranks: 16, busbw_GBps: 50"
    r = only(gate.judge(bands(missing + "}"), good))
    assert r.verdict == "FAIL" and r.reason == "not measured (no row matches)" and r.measured_GBps is None
    report = gate.judge(bands(missing + ", optional: true}"), good)
    # its only entry skipped, the gate judged nothing: it fails unless --allow-empty (issue #39)
    assert only(report).verdict == "SKIP" and report.exit_code() == 1 and "nothing judged" in report.summary()
    report.allow_empty = True
    assert report.exit_code() == 0 and "1 optional not measured" in report.summary()
    both = gate.judge(bands(missing + ", optional: true}", "{collective: all_reduce, size: 16M, ranks: 16, "
                            "busbw_GBps: 1, lower: 0.9}"), good)
    assert [r.verdict for r in both.results] == ["SKIP", "PASS"] and both.exit_code() == 0
    # another rank count or node count is another point
    for other in ("ranks: 8", "ranks: 16, nnodes: 4"):
        e = f"{{collective: all_reduce, size: 16M, {other}, busbw_GBps: 1}}"
        assert only(gate.judge(bands(e), good)).reason == "not measured (no row matches)"


def test_wrong_results_fail_an_entry_however_fast(files):
    from commbench.core.results import read_results

    frame = read_results([files["wrong"]])  # synthetic: #wrong 3 at the largest size only
    r = only(gate.judge(bands("{collective: all_reduce, size: 16M, ranks: 16, busbw_GBps: 1}"), frame))
    assert r.verdict == "FAIL" and r.reason == "wrong results in 10 of 10 rows"
    fine = only(gate.judge(bands("{collective: all_reduce, size: 1M, ranks: 16, busbw_GBps: 1, lower: 0.9}"), frame))
    assert fine.verdict == "PASS"


def test_expected_failure_passes_when_wrong_or_missing_and_fails_when_it_works(files, good):
    from commbench.core.results import read_results

    wrong = read_results([files["wrong"]])
    e = "{collective: all_reduce, size: 16M, ranks: 16, expect: fail, note: known OOM}"
    assert only(gate.judge(bands(e), wrong)).reason == "expected failure: 10 of 10 rows wrong"
    missing = only(gate.judge(bands("{collective: all_to_all, size: 1G, ranks: 16, expect: fail}"), good))
    assert missing.verdict == "PASS" and missing.reason == "expected failure: not measured"
    works = gate.judge(bands(e), good)
    assert only(works).verdict == "FAIL" and "the known failure is gone" in only(works).reason
    assert works.exit_code() == 1


def test_a_rate_lowered_by_20_percent_fails_its_own_suggested_bands(files, good):
    from commbench.core.results import read_results

    b = parse_bands(suggest(good, sources=["good.parquet"]).text, "bands.yaml")
    assert {e.lower for e in b.entries} == {0.03}  # a steady run keeps the floor
    assert all(e.basis.startswith("-3.0% from 5 repetitions of one run") for e in b.entries)
    slow = gate.judge(b, read_results([files["slow"]]))
    assert slow.exit_code() == 1 and len(slow.failed) == len(b.entries) == 8
    assert all(r.ratio == pytest.approx(0.8, rel=1e-3) and r.reason == "below band (-20.0%, tolerance -3%)"
               for r in slow.failed)
    assert all(f"#{r.entry.index} {r.entry.describe()}: below band" in slow.summary() for r in slow.failed)


def test_a_noisy_run_is_refused_unless_wide_bands_are_allowed(files):
    """A run that varies +-10% between repetitions cannot band tightly: with no point narrow enough,
    refused, naming the points, their widths and the repetitions their spread needs; allowed, its
    bands are so wide that a 20% drop hides in them."""
    from commbench.core.results import read_results

    with pytest.raises(BadInput, match=r"^no band written: 8 points left out, their bands wider than --max-band 15% "
                                       r"\(all_gather float32 1 MiB (in|out of) place on 16 ranks: 22.5% from 5 "
                                       r"repetitions; .*; and 3 more\); fix: measure -R 11: "):
        suggest(read_results([files["noisy"]]))
    made = suggest(read_results([files["noisy"]]), allow_wide=True)
    assert any("written as asked (--allow-wide" in n for n in made.notes)
    b = parse_bands(made.text, "bands.yaml")
    assert all(e.lower > 0.15 for e in b.entries)
    assert gate.judge(b, read_results([files["noisy"]])).exit_code() == 0
    assert gate.judge(b, read_results([files["noisy_slow"]])).exit_code() == 0


# ---- suggesting ----


def test_suggest_round_trip_passes_the_same_run(good):
    made = suggest(good, sources=["good.parquet"], system="lab-1gbit")
    doc = yaml.safe_load(made.text)
    assert doc["version"] == 1 and doc["system"] == "lab-1gbit" and doc["defaults"] == {"lower": 0.03, "upper": None}
    # bandwidth-bound sizes only: 1 MiB and 16 MiB, per collective and placement
    assert {(e["collective"], e["size"], e["in_place"]) for e in doc["entries"]} == {
        (c, s, p) for c in ("all_gather", "all_reduce") for s in ("1M", "16M") for p in (True, False)}
    assert all(e["ranks"] == 16 and e["nnodes"] == 2 and e["dtype"] == "float32" for e in doc["entries"])
    ar = next(e for e in doc["entries"] if (e["collective"], e["size"], e["in_place"]) == ("all_reduce", "16M", True))
    assert ar["busbw_GBps"] == pytest.approx(median(good), rel=1e-4)
    assert made.entries == 8 and any("below 1 MiB" in n for n in made.notes)
    report = gate.judge(parse_bands(made.text, "s.yaml"), good)
    assert report.exit_code() == 0 and {r.verdict for r in report.results} == {"PASS"}


def test_suggest_widens_the_band_to_the_runs_spread(tmp_path):
    from commbench.core.results import read_results

    mixed = rows()
    for r in mixed:  # 16 MiB: no variation at all; 1 MiB: +-30% between repetitions
        if r["size_bytes"] == 1 << 24:
            r["busbw_GBps"] = 100.0
        elif r["size_bytes"] == 1 << 20:
            r["busbw_GBps"] = 60.0 * (1 + 0.15 * (r["repetition"] - 2))
    frame = read_results([synthetic.write(tmp_path / "mixed.parquet", mixed)])
    kept = suggest(frame, lower=0.02)  # the 1 MiB points left out, the others banded, the fix named
    assert {e["size"] for e in yaml.safe_load(kept.text)["entries"]} == {"16M"} and kept.entries == 4
    wide = [f"{c} float32 1 MiB {p} place on 16 ranks: 66.0% from 5 repetitions"
            for c in ("all_gather", "all_reduce") for p in ("out of", "in")]
    assert kept.warnings == [f"4 points left out, their bands wider than --max-band 15% ({'; '.join(wide)}); fix: "
                             "--min-size 16M leaves them out on purpose (their spread would need more than 20 "
                             "repetitions)"]
    made = suggest(frame, lower=0.02, allow_wide=True)
    doc = yaml.safe_load(made.text)
    assert doc["defaults"]["lower"] == 0.02
    lowers = {e["size"]: e["lower"] for e in doc["entries"]}
    assert lowers["16M"] == 0.02  # no variation at all: the floor
    # sd 23.7% over 5 repetitions -> 3.5 x sqrt(2) x 1.2533 x 23.7% / sqrt(5) = 66%, above the 50% limit
    assert lowers["1M"] == 0.5
    assert any("1 MiB in place on 16 ranks: 66.0% from 5 repetitions: wider than --max-band 15%" in n
               for n in made.notes)


def test_only_single_size_workloads_are_gated(tmp_path):
    from commbench.core.results import read_results

    mixed = rows(collectives=("all_reduce",))
    for r in mixed:
        r["workload"] = "buckets" if r["in_place"] else "nccl-tests"
    frame = read_results([synthetic.write(tmp_path / "mixed.parquet", mixed)])
    made = suggest(frame)
    assert "left out 25 rows of workload buckets" in made.notes[0]
    assert {e.get("in_place") for e in yaml.safe_load(made.text)["entries"]} == {None}  # only out-of-place left
    e = "{collective: all_reduce, size: 16M, ranks: 16, busbw_GBps: 1, lower: 0.99"
    assert only(gate.judge(bands(e + "}"), frame)).n_rows == 5
    assert only(gate.judge(bands(e + ", workload: nccl-tests}"), frame)).n_rows == 5
    assert only(gate.judge(bands(e + ", workload: sweep}"), frame)).verdict == "FAIL"


def test_suggest_leaves_out_wrong_points_and_says_so(files):
    from commbench.core.results import read_results

    made = suggest(read_results([files["wrong"]]))  # 16 MiB has wrong results
    assert all(e["size"] != "16M" for e in yaml.safe_load(made.text)["entries"])
    assert any("wrong results" in n and "expect: fail" in n for n in made.notes)


def test_suggest_with_nothing_bandwidth_bound_is_bad_input(good):
    with pytest.raises(BadInput, match="--min-size smaller"):
        suggest(good, min_size=1 << 30)


# ---- the file format ----


ENTRY = "{collective: all_reduce, size: 64M, ranks: 2, busbw_GBps: 0.119}"
BAD_FILES = {
    "yaml": ("version: 1\nentries:\n  - {collective: all_reduce, size: 64M\n", "not valid YAML at line"),
    "not a mapping": ("- 1\n- 2\n", "expected a mapping with version"),
    "no version": (f"entries:\n  - {ENTRY}\n", "no version: add 'version: 1'"),
    "newer": (f"version: 2\nentries:\n  - {ENTRY}\n", "version 2 is newer than this commbench reads (1): upgrade"),
    "no entries": ("version: 1\nentries: []\n", "no entries"),
    "top key": (f"version: 1\nsytem: x\nentries:\n  - {ENTRY}\n", "unknown top-level key 'sytem'"),
    "duplicate key": (f"version: 1\nversion: 1\nentries:\n  - {ENTRY}\n", "key 'version' is given twice"),
    "collective": ("version: 1\nentries:\n  - {collective: allreduc, size: 64M, ranks: 2, busbw_GBps: 1}\n",
                   "entry 1: unknown collective 'allreduc' (did you mean all_reduce?): use one of all_reduce"),
    "size": ("version: 1\nentries:\n  - " + ENTRY + "\n  - {collective: all_gather, size: 64X, ranks: 2, "
             "busbw_GBps: 1}\n", "entry 2 (all_gather): size '64X' is not a size"),
    "no busbw": ("version: 1\nentries:\n  - {collective: all_reduce, size: 64M, ranks: 2}\n",
                 "entry 1 (all_reduce): no busbw_GBps"),
    "entry key": ("version: 1\nentries:\n  - {collective: all_reduce, size: 64M, ranks: 2, busbw_GBps: 1, lowr: 1}\n",
                  "entry 1: unknown key 'lowr'"),
    "lower": ("version: 1\nentries:\n  - {collective: all_reduce, size: 64M, ranks: 2, busbw_GBps: 1, lower: 5}\n",
              "lower 5 must be 0 or more and below 1"),
    "ranks": ("version: 1\nentries:\n  - {collective: all_reduce, size: 64M, ranks: two, busbw_GBps: 1}\n",
              "ranks 'two' must be a whole number"),
    "dtype": ("version: 1\nentries:\n  - {collective: all_reduce, size: 64M, ranks: 2, dtype: fp33, busbw_GBps: 1}\n",
              "unknown dtype 'fp33'"),
    "repeat": (f"version: 1\nentries:\n  - {ENTRY}\n  - {ENTRY}\n",
               "entry 2 (all_reduce any dtype 64 MiB 2 ranks) repeats entry 1"),
    "fail with busbw": ("version: 1\nentries:\n  - {collective: all_reduce, size: 1G, ranks: 8, expect: fail, "
                        "busbw_GBps: 1}\n", "an expected failure takes no busbw_GBps"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_bad_bands_file_is_one_line_of_bad_input_naming_file_and_entry(name, files, tmp_path, capsys):
    text, message = BAD_FILES[name]
    path = tmp_path / "bands.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "gate", str(files["good"]), "--expect", str(path))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"commbench: {path}: ") and message in lines[0], lines[0]


# ---- the command ----


def run(capsys, *args: str) -> tuple[int, str, str]:
    """cli.main as the console script runs it (exit codes, one-line errors), in this process."""
    from commbench.cli.app import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_cli_suggest_then_gate(files, tmp_path, capsys):
    out = tmp_path / "bands.yaml"
    code, stdout, err = run(capsys, "gate", "--suggest", str(files["good"]), "--out", str(out), "--system", "lab")
    assert code == 0 and stdout == "8 bands written to " + str(out) + "\n" and "below 1 MiB" in err
    code, stdout, err = run(capsys, "gate", str(files["good"]), "--expect", str(out))
    assert code == 0 and stdout.rstrip().endswith("gate: PASS: 8 of 8 entries within their bands (system lab)")
    assert err == ""
    code, stdout, err = run(capsys, "gate", str(files["slow"]), "--expect", str(out), "--format", "json")
    data = json.loads(stdout)
    assert code == 1 and data["exit_code"] == 1 and data["verdict"] == "FAIL"
    failed = [e for e in data["entries"] if e["verdict"] == "FAIL"]
    assert failed and err.strip() == data["summary"] and "#" + str(failed[0]["entry"]["index"]) in err
    code, stdout, _ = run(capsys, "gate", str(files["slow"]), "--expect", str(out), "--format", "markdown")
    assert code == 1 and "### commbench gate: **FAIL**" in stdout and "| # | entry |" in stdout



def test_a_closed_stdout_keeps_the_gates_exit_code_and_puts_its_verdict_on_stderr(files, tmp_path, capsys,
                                                                                   monkeypatch):
    """`commbench gate ... | true`: the table is lost with its reader, the verdict is not."""
    bands = tmp_path / "bands.yaml"
    assert run(capsys, "gate", "--suggest", str(files["good"]), "--out", str(bands))[0] == 0
    for results, code, verdict in ((files["good"], 0, "gate: PASS"), (files["slow"], 1, "gate: FAIL")):
        read_end, write_end = os.pipe()
        os.close(read_end)
        monkeypatch.setattr(sys, "stdout", os.fdopen(write_end, "w"))
        with pytest.raises(SystemExit) as info:
            from commbench.cli.app import main

            main(["gate", str(results), "--expect", str(bands)])
        sys.stdout.close()
        assert info.value.code == code
        assert capsys.readouterr().err.startswith(verdict)


def test_cli_suggest_prints_yaml_and_never_overwrites(files, tmp_path, capsys):
    code, stdout, _ = run(capsys, "gate", "--suggest", str(files["good"]), "--lower", "10%")
    assert code == 0 and yaml.safe_load(stdout)["defaults"]["lower"] == 0.1
    taken = tmp_path / "taken.yaml"
    taken.write_text("mine\n")
    code, stdout, err = run(capsys, "gate", "--suggest", str(files["good"]), "--out", str(taken))
    assert code == 2 and taken.read_text() == "mine\n"
    assert err.strip() == (f"commbench: {taken} already exists: gate --suggest never overwrites a file; "
                           "pass --force to replace it, or another --out")


@pytest.mark.parametrize("args, message", [
    ([], "exactly one of --expect FILE.yaml"),
    (["--suggest", "--expect", "x.yaml"], "exactly one of --expect FILE.yaml"),
    (["--expect", "missing.yaml"], "bands file missing.yaml does not exist"),
    (["--expect", "x.yaml", "--lower", "5%"], "--lower is for --suggest"),
    (["--suggest", "--lower", "50"], "--lower 50 is not a fraction below 1"),
])
def test_cli_usage_errors(args, message, files, capsys):
    code, out, err = run(capsys, "gate", str(files["good"]), *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_the_documented_example_file_is_valid():
    example = Path(__file__).resolve().parents[1] / "data" / "gate" / "example.yaml"
    b = load_bands(example)
    assert b.system == "lab-1gbit" and len(b.entries) == 4
    ag = b.entries[2]
    assert (ag.collective, ag.dtype, ag.size_bytes, ag.lower, ag.upper, ag.optional) == (
        "all_gather", "float32", 64 << 20, 0.1, 0.1, True)
    assert b.entries[3].expect == "fail" and b.entries[3].note == "OOM on 16 GiB hosts"


# ---- how wide a suggested band is (analysis/gate/tolerance.py) ----


def test_band_basis_prefers_runs_then_repetitions_then_one_run_s_ci():
    import math

    import numpy as np

    from commbench.analysis.gate import tolerance

    runs = tolerance.basis(["a", "a", "b", "b", "c", "c"], np.array([100, 101, 104, 103, 98, 99.0]), None, [1] * 6)
    assert runs.kind == "runs" and runs.n == 3
    medians = np.array([100.5, 103.5, 98.5])
    assert runs.spread == pytest.approx(np.std(medians, ddof=1) / np.median(medians))
    reps = tolerance.basis(["a"] * 5, np.array([100, 101, 99, 100.5, 99.5]), None, [1] * 5)
    assert reps.kind == "repetitions" and reps.n == 5
    # the sd of the difference of two medians of 5: sqrt(2) x 1.2533 x sd / sqrt(5)
    assert reps.diff_sd == pytest.approx(math.sqrt(2) * 1.2533 * reps.spread / math.sqrt(5), rel=1e-3)
    assert tolerance.tolerance(reps, 0.03) == 0.03  # 3.5 x 0.6% is under the floor
    samples = [1000.0 * (1 + 0.02 * ((i * 7) % 11 - 5) / 5) for i in range(200)]
    one = tolerance.basis(["a"], np.array([10.0]), [samples], [1000.0])
    assert one.kind == "single-run CI" and one.n == 200 and 0 < one.spread < 0.02
    assert "run-to-run drift not seen" in one.text(0.03)
    few = tolerance.basis(["a"], np.array([10.0]), [[1000.0] * 5], [1000.0])
    assert tolerance.tolerance(few, 0.03) == math.inf  # five iterations tell no CI


def test_suggest_from_several_runs_bands_from_their_medians(tmp_path):
    from commbench.core.results import read_results

    paths = []
    for i, level in enumerate((1.00, 1.02, 0.99)):
        rs = rows(scale=level, run_id=f"2025010{i + 1}-000000-abcdef")
        paths.append(synthetic.write(tmp_path / f"run{i}.parquet", rs))
    made = suggest(read_results(paths), sources=[str(p) for p in paths])
    b = parse_bands(made.text, "bands.yaml")
    assert all(e.basis.split(" from ")[1].startswith("3 runs: sd of their medians") for e in b.entries)
    # sd of (1.00, 1.02, 0.99) is 1.53% -> t(97.5%, 2 dof) 4.30 x 1.53% x sqrt(1 + pi/6) = 8.1%, up to 8.5%
    assert {e.lower for e in b.entries} == {0.085}, [e.lower for e in b.entries]
    assert not any("see no run-to-run drift" in n for n in made.notes)
    report = gateview.render_table(gate.judge(b, read_results([paths[0]])))
    assert report.count("(-8.5%, 3 runs)") == len(b.entries), report


# ---- settings (--env NAME=v1|v2): bands per setting ----

ETH0, ETH1 = "GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth1"


def settings_rows(eth1_scale: float = 0.25, eth1_slower: float = 1.0) -> list[dict]:
    """One run measured once per setting (as sweep --env runs its grid): eth1 at eth1_scale of eth0's
    busbw, times eth1_slower."""
    out = []
    for setting, scale in ((ETH0, 1.0), (ETH1, eth1_scale * eth1_slower)):
        for r in rows(scale=scale):
            r["settings"] = setting
            out.append(r)
    return out


def test_suggest_then_gate_round_trip_with_two_settings(tmp_path, capsys):
    good = synthetic.write(tmp_path / "env.parquet", settings_rows())
    slow = synthetic.write(tmp_path / "env-slow.parquet", settings_rows(eth1_slower=0.8))
    bands = tmp_path / "bands.yaml"
    code, stdout, err = run(capsys, "gate", "--suggest", str(good), "--out", str(bands), "--system", "lab")
    assert code == 0 and stdout == "16 bands written to " + str(bands) + "\n", err
    doc = yaml.safe_load(bands.read_text())
    # every entry names its setting; eth1's points are bandwidth-bound against eth1's own peak
    assert sorted({e["settings"] for e in doc["entries"]}) == [ETH0, ETH1]
    assert {(e["settings"], e["collective"], e["size"], e["in_place"]) for e in doc["entries"]} == {
        (s, c, z, p) for s in (ETH0, ETH1) for c in ("all_gather", "all_reduce") for z in ("1M", "16M")
        for p in (True, False)}
    eth0, eth1 = (next(e["busbw_GBps"] for e in doc["entries"] if e["settings"] == s and e["collective"] == "all_reduce"
                       and e["size"] == "16M" and e["in_place"]) for s in (ETH0, ETH1))
    assert eth1 == pytest.approx(0.25 * eth0, rel=1e-3)
    parsed = load_bands(bands)
    assert {e.settings for e in parsed.entries} == {ETH0, ETH1}
    assert parsed.entries[0].describe().endswith(" " + parsed.entries[0].settings)
    code, stdout, err = run(capsys, "gate", str(good), "--expect", str(bands))
    assert code == 0 and stdout.rstrip().endswith("gate: PASS: 16 of 16 entries within their bands (system lab)")
    code, stdout, err = run(capsys, "gate", str(slow), "--expect", str(bands), "--format", "json")
    data = json.loads(stdout)
    assert code == 1
    failed = {e["entry"]["settings"] for e in data["entries"] if e["verdict"] == "FAIL"}
    passed = {e["entry"]["settings"] for e in data["entries"] if e["verdict"] == "PASS"}
    assert failed == {ETH1} and passed == {ETH0}
    assert ETH1 in err and ETH0 not in err


def test_an_entry_without_settings_fails_on_rows_of_several_and_matches_one(tmp_path):
    from commbench.core.results import read_results

    two = read_results([synthetic.write(tmp_path / "two.parquet", settings_rows())])
    text = "version: 1\nentries:\n- {collective: all_reduce, size: 16M, ranks: 16, busbw_GBps: %s}\n"
    report = gate.judge(parse_bands(text % 1.0, "b.yaml"), two)
    r = report.results[0]
    assert r.verdict == "FAIL" and r.measured_GBps is None
    assert r.reason == (f"rows of 2 settings match ({ETH0}; {ETH1}): name one with 'settings:' in the entry "
                        "(gate --suggest writes it)")
    eth0_only = [r for r in settings_rows() if r["settings"] == ETH0]
    one = read_results([synthetic.write(tmp_path / "one.parquet", eth0_only)])
    expected = median(one)
    assert gate.judge(parse_bands(text % expected, "b.yaml"), one).results[0].verdict == "PASS"
    named = text.replace("busbw_GBps", f"settings: '{ETH0}', busbw_GBps") % expected
    assert gate.judge(parse_bands(named, "b.yaml"), two).results[0].verdict == "PASS"
    # the same point under two settings is two entries, not a repeat
    both = named + f"- {{collective: all_reduce, size: 16M, ranks: 16, settings: '{ETH1}', busbw_GBps: 1}}\n"
    assert len(parse_bands(both, "b.yaml").entries) == 2
    with pytest.raises(BadInput, match=r"b.yaml: entry 1 \(all_reduce\): settings 3 must be the setting"):
        parse_bands(text.replace("busbw_GBps", "settings: 3, busbw_GBps") % 1.0, "b.yaml")
