"""Link efficiency on the lab (root): collective busbw against what the link can carry.

    sudo flock /tmp/commbench-heavy.lock python benchmarks/lab_efficiency.py     # ~2-3 min

For 2 and 4 hosts (network namespaces on one bridge, every link shaped with tbf to --rate), one
`commbench lab run -- commbench sweep --mtu 1500,9000 --iface eth0 ...` per host count measures
all_reduce, all_gather and reduce_scatter at --sizes, with fresh connections per MTU (TCP keeps
the MSS it agreed when it connected). The limit is the TCP payload rate of the link:

    rate x (MTU - 52) / (MTU + 14)      (52: IP + TCP with timestamps; 14: the Ethernet header tbf counts)

and the figure is busbw / limit per collective, MTU and host count; bound: all_reduce >= 0.97.
The lab uses its own instance (prefix cb10, state in /run/commbench-lab-cb10, subnet
10.250.10.0/24; --prefix/--subnet change them) and is taken down in every case.
Writes benchmarks/results/lab_efficiency.json and .md.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

import pandas as pd  # noqa: E402

BOUND = 0.97
COLLECTIVES = "all_reduce,all_gather,reduce_scatter"
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$", re.IGNORECASE)


def rate_bits(text: str) -> float:
    m = _RATE.match(text)
    if not m:
        raise SystemExit(f"lab_efficiency: --rate {text!r} is not a tc rate: e.g. 1gbit or 800mbit")
    return float(m.group(1)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2).lower()]


def payload_limit_GBps(bits: float, mtu: int) -> float:
    return bits / 8 * (mtu - 52) / (mtu + 14) / 1e9


def measure(lab: common.Lab, hosts: int, a, out: Path) -> tuple[pd.DataFrame, float]:
    lab.cb("lab", "down")
    lab.must("lab", "up", "--nodes", str(hosts), "--rate", a.rate, "--mtu", "1500", "--subnet", a.subnet)
    try:
        start = time.monotonic()
        lab.must("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", "--collective", a.collectives,
                 "--sizes", a.sizes, "--placement", "in", "--mtu", a.mtus, "--iface", "eth0", *a.sweep_args.split(),
                 "--out", str(out), timeout=900)
        wall = time.monotonic() - start
    finally:
        lab.must("lab", "down")
    return pd.read_parquet(out), wall


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"# Link efficiency on the lab ({meta['rate']} links, gloo, one rank per host)", "",
             f"Machine: {common.machine_line(meta['machine'])}; load average {meta['loadavg_end']:.2f} at the end.",
             f"Command: `{meta['command']}` ({meta['wall_s']:.0f} s); per host count: `{meta['sweep']}`.", "",
             "| hosts | MTU | collective | size | iters | busbw GB/s | payload limit GB/s | busbw / limit | bound |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        bound = (f">= {BOUND} {'met' if r['ratio'] >= BOUND else 'MISSED'}" if r["collective"] == "all_reduce"
                 else "recorded")
        lines.append(f"| {r['hosts']} | {r['mtu']} | {r['collective']} | {common.human(r['size_bytes'])} "
                     f"| {r['iters']} | {r['busbw_GBps']:.4f} | {r['limit_GBps']:.4f} | {r['ratio']:.3f} | {bound} |")
    lines += ["", "busbw from the median time per operation (nccl-tests definitions); "
              "limit = rate x (MTU-52)/(MTU+14).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="2,4")
    ap.add_argument("--mtus", default="1500,9000")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--sizes", default="32M")
    ap.add_argument("--collectives", default=COLLECTIVES)
    ap.add_argument("--sweep-args", default="", help="Extra sweep flags (e.g. '-n 10').")
    ap.add_argument("--prefix", default="cb10")
    ap.add_argument("--subnet", default="10.250.10.0/24")
    a = ap.parse_args(argv)
    if common.not_root("lab_efficiency"):
        return 2
    bits = rate_bits(a.rate)
    m0 = common.machine()
    lab = common.Lab(a.prefix)
    start = time.monotonic()
    rows: list[dict] = []
    walls: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="cb-lab-efficiency-") as tmp:
        for hosts in (int(h) for h in a.hosts.split(",")):
            df, walls[hosts] = measure(lab, hosts, a, Path(tmp) / f"hosts{hosts}.parquet")
            for _, r in df.sort_values(["mtu", "collective", "size_bytes"]).iterrows():
                limit = payload_limit_GBps(bits, int(r["mtu"]))
                rows.append({"hosts": hosts, "mtu": int(r["mtu"]), "collective": r["collective"],
                             "size_bytes": int(r["size_bytes"]), "iters": int(r["iters"]),
                             "busbw_GBps": float(r["busbw_GBps"]), "limit_GBps": limit,
                             "ratio": float(r["busbw_GBps"]) / limit, "wrong": int(r["wrong"] or 0)})
                print(f"{hosts} hosts MTU {rows[-1]['mtu']:5d} {rows[-1]['collective']:>14s}: busbw "
                      f"{rows[-1]['busbw_GBps']:.4f} GB/s = {rows[-1]['ratio']:.3f} of {limit:.4f}", flush=True)
    ar = [r for r in rows if r["collective"] == "all_reduce"]
    meta = {"machine": m0, "loadavg_end": common.machine()["loadavg_1m"], "wall_s": time.monotonic() - start,
            "rate": a.rate, "walls_s": walls, "bound": BOUND,
            "all_reduce_min_ratio": min((r["ratio"] for r in ar), default=None),
            "meets": bool(ar) and all(r["ratio"] >= BOUND for r in ar),
            "command": "python benchmarks/lab_efficiency.py"
                       + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
            "sweep": f"commbench lab run -- commbench sweep --collective {a.collectives} --sizes {a.sizes} "
                     f"--placement in --mtu {a.mtus} --iface eth0 {a.sweep_args}".rstrip()}
    md = markdown(meta, rows)
    js, mdp = common.write("lab_efficiency", {"meta": meta, "rows": rows}, md)
    print(md)
    print(f"wrote {js} and {mdp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
