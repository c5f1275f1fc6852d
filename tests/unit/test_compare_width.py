"""compare's table fits 120 columns by default (issue #40, part 7); --wide shows the statistics."""

from __future__ import annotations

import json

from unit.synthetic import make_rows, write

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
SIZES = (8, 1024, 65536, 1 << 20, 1 << 24, 1 << 26)
HOSTS = ("cbnode1", "cbnode2", "cbnode3", "cbnode4")


def side(tmp_path, name: str, run_id: str, speed: float, slow_host_mbps: int | None = None, seed: int = 1):
    rows = make_rows(collectives=COLLECTIVES, sizes=SIZES, repetitions=5, run_id=run_id, label=name, hosts=HOSTS,
                     speed_gbps=speed, seed=seed)
    if slow_host_mbps:  # one host's link slower: a long "what differs" line
        net = json.loads(rows[0]["net"])
        net["cbnode3"]["speed_mbps"] = slow_host_mbps
        for r in rows:
            r["net"] = json.dumps(net)
    return write(tmp_path / f"{name}.parquet", rows)


def test_every_line_of_the_default_output_fits_120_columns(tmp_path, cli):
    before = side(tmp_path, "before", "20250101-000000-aaaaaa", 400.0)
    after = side(tmp_path, "after", "20250102-000000-bbbbbb", 300.0, slow_host_mbps=100_000, seed=3)
    narrow = cli("compare", str(before), str(after))
    assert narrow.returncode in (1, 3), narrow.stderr
    lines = narrow.stdout.splitlines()
    assert len(lines) > len(COLLECTIVES) * len(SIZES) * 2  # a row (at least) a point
    assert max(len(line) for line in lines) <= 120, [line for line in lines if len(line) > 120]
    assert lines[0].split() == ["collective", "size", "place", "before", "GB/s", "after", "GB/s", "change", "verdict",
                                "note"]
    assert "every point: float32, op sum, ranks 16 (4x8)" in lines
    text = " ".join(line.strip() for line in lines)  # the wrapped lines read as one
    assert ("differs: link rate: before 400 Gbit/s on all 4 hosts; after cbnode3 100 Gbit/s, the others 300 Gbit/s"
            in text)
    wide = cli("compare", str(before), str(after), "--wide")
    header = wide.stdout.splitlines()[0]
    assert all(name in header for name in ("dtype", "op", "ranks (nodes x per node)", "bound", "before GB/s (min..max)",
                                           "n", "test", "p Holm", "q BH"))
    assert max(len(line) for line in wide.stdout.splitlines()) > 120
    assert "p Holm" not in narrow.stdout and "(min..max)" not in narrow.stdout
