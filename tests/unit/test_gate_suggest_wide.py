"""`gate --suggest` on a run with one noisy point (issue #40, part 6): it writes the bands it can,
names the point it left out with its width and the one fix the numbers say, and exits 0 with a
warning; exit 2 (one line) only when no band could be written."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from commbench.analysis.gate import tolerance

from unit.synthetic import make_rows, write

SIZES = (1 << 20, 2 << 20, 4 << 20, 8 << 20)
STEPS = (0, -2, 1, -1, 2)  # each repetition's offset, in units of the point's spread


def run(tmp_path, noisy: dict[int, float], quiet: float = 0.005, name: str = "run.parquet"):
    """One all_reduce run of 5 repetitions; a size in `noisy` varies by that fraction a step, the others by `quiet`."""
    rows = make_rows(collectives=("all_reduce",), sizes=SIZES, placements=(True,), repetitions=5, backend="gloo",
                     device_name="cpu", hosts=("cbnode1", "cbnode2"))
    for r in rows:
        factor = 1 + STEPS[r["repetition"]] * noisy.get(r["size_bytes"], quiet)
        r["busbw_GBps"], r["algbw_GBps"] = 40.0 * factor, 40.0 * factor / 1.5
        r["time_us"] = r["size_bytes"] / (r["algbw_GBps"] * 1e3)
    return write(tmp_path / name, rows)


def test_one_noisy_point_is_left_out_and_named_the_others_are_banded(tmp_path, cli):
    bands = tmp_path / "bands.yaml"
    made = cli("gate", "--suggest", str(run(tmp_path, {8 << 20: 0.06})), "--out", str(bands))
    assert made.returncode == 0, made.stderr
    doc = yaml.safe_load(bands.read_text())
    assert [e["size"] for e in doc["entries"]] == ["1M", "2M", "4M"]
    assert made.stdout == f"3 bands written to {bands}\n"
    warning = [line for line in made.stderr.splitlines() if line.startswith("commbench: warning: ")]
    assert warning == ["commbench: warning: 1 point left out, its band wider than --max-band 15% (all_reduce "
                       "float32 8 MiB in place on 16 ranks: 26.5% from 5 repetitions); fix: measure -R 16: their "
                       "spread needs that many repetitions for a band within 15%"]
    # the fix is right: 16 repetitions at that spread band the point within 15%, 15 do not
    sd = tolerance.basis(["r"] * 5, np.array([1 + 0.06 * s for s in STEPS]), None, [1.0] * 5).spread
    assert tolerance.tolerance(tolerance.spread_basis("repetitions", 16, sd), 0.03) <= 0.15
    assert tolerance.tolerance(tolerance.spread_basis("repetitions", 15, sd), 0.03) > 0.15


def test_a_point_too_noisy_for_20_repetitions_is_left_out_by_min_size(tmp_path, cli):
    made = cli("gate", "--suggest", str(run(tmp_path, {1 << 20: 0.3})))
    assert made.returncode == 0 and [e["size"] for e in yaml.safe_load(made.stdout)["entries"]] == ["2M", "4M", "8M"]
    assert ("(all_reduce float32 1 MiB in place on 16 ranks: 132.0% from 5 repetitions); fix: --min-size 2M leaves "
            "them out") in made.stderr
    again = cli("gate", "--suggest", str(run(tmp_path, {1 << 20: 0.3}, name="again.parquet")), "--min-size", "2M")
    assert again.returncode == 0 and "warning" not in again.stderr  # the fix named works


def test_no_band_possible_is_bad_input_in_one_line(tmp_path, cli):
    bands = tmp_path / "bands.yaml"
    made = cli("gate", "--suggest", str(run(tmp_path, {s: 0.06 for s in SIZES})), "--out", str(bands))
    assert made.returncode == 2 and not bands.exists() and made.stdout == ""
    lines = made.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in made.stderr
    assert lines[0].startswith("commbench: ") and "no band written: 4 points left out" in lines[0]
    assert lines[0].endswith("fix: measure -R 16: their spread needs that many repetitions for a band within 15%")


@pytest.mark.parametrize("kinds, sizes, widths, written, want", [
    (("single-run CI",), (1,), (0.2,), {2}, "measure repetitions (-R 5)"),
    (("runs", "runs"), (1, 2), (0.2, 0.18), set(), "measure 4 runs (gate --suggest RUN1 .. RUN4)"),
    (("repetitions",), (1,), (0.4,), set(), "--allow-wide writes them"),
    (("repetitions",), (1,), (math.inf,), set(), "none: more than 20 repetitions"),
])
def test_the_fix_follows_the_numbers(kinds, sizes, widths, written, want):
    wide = []
    for kind, size, width in zip(kinds, sizes, widths):
        n = 1 if kind == "single-run CI" else 3
        sd = math.inf if not math.isfinite(width) else width / 3.5 / (1.2533 * 2 ** 0.5 / 5 ** 0.5)
        basis = tolerance.Basis(kind, n, sd, sd) if kind != "repetitions" else tolerance.spread_basis(kind, 5, sd)
        if kind == "runs":  # the runs' medians spread 3%: 4 runs band them within 15%
            basis = tolerance.spread_basis("runs", 3, 0.03)
        wide.append(tolerance.WidePoint(f"p{size}", size, width, basis))
    assert tolerance.fix(wide, written, 0.03, 0.15).startswith(want)
