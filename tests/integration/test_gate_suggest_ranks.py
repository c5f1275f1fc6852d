"""`gate --suggest` on a real single-repetition sweep over loopback (2 gloo ranks): it either refuses
(the run cannot tell a band narrow enough) or writes bands that a 25% slower copy of the run fails."""

from __future__ import annotations


import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from helpers import cb  # tests/helpers.py: python -m commbench in a subprocess

pytestmark = pytest.mark.integration


def slower_copy(src, dst, factor: float) -> None:
    """The same run with every time x factor and every bandwidth / factor."""
    t = pq.read_table(src)
    for name in ("busbw_GBps", "algbw_GBps"):
        t = t.set_column(t.schema.get_field_index(name), name, pc.divide(t[name], factor))
    for name in ("time_us", "time_us_min", "time_us_max", "time_us_p99"):
        t = t.set_column(t.schema.get_field_index(name), name, pc.multiply(t[name], factor))
    samples = pa.array([[v * factor for v in row] for row in t["samples_us"].to_pylist()], type=pa.list_(pa.float64()))
    t = t.set_column(t.schema.get_field_index("samples_us"), "samples_us", samples)
    pq.write_table(t, dst)


def test_single_repetition_loopback_sweep_bands_refuse_or_catch_a_25_percent_regression(tmp_path):
    run = tmp_path / "run.parquet"
    res = cb("sweep", "--collective", "allreduce", "-b", "1M", "-e", "8M", "--out", str(run))
    assert res.returncode == 0, res.stdout + res.stderr
    bands = tmp_path / "bands.yaml"
    made = cb("gate", "--suggest", str(run), "--out", str(bands))
    print("\n" + made.stdout + made.stderr)
    if made.returncode == 2:  # the run's medians are not known well enough for a band within 15%
        lines = made.stderr.strip().splitlines()
        assert len(lines) == 1 and "no band written" in lines[0] and "wider than --max-band 15%" in lines[0]
        assert "-R 5" in lines[0]
        assert not bands.exists()
        return
    assert made.returncode == 0 and "from one repetition" in bands.read_text()
    assert "see no run-to-run drift" in made.stderr
    slow = tmp_path / "slow.parquet"
    slower_copy(run, slow, 1.25)
    judged = cb("gate", str(slow), "--expect", str(bands))
    assert judged.returncode == 1, judged.stdout
    assert "below band (-20.0%" in judged.stdout
    same = cb("gate", str(run), "--expect", str(bands))
    assert same.returncode == 0, same.stdout
