"""`commbench tune` on the lab (root): predicted against measured step communication, and the
recommendation, for one model and config at two link rates.

    sudo flock /tmp/commbench-heavy.lock python benchmarks/tune_lab.py     # ~4-5 min

Two hosts (network namespaces, links shaped with tbf), the same ds_config and model at each
--rates value: `commbench tune --launcher lab --top 6` sweeps its quick curve and measures the six
best-predicted candidates and the config itself, one rank per host. The figure per measured
candidate is measured / predicted (one optimizer step's communication at the measuring scale);
bound: every ratio within 25% (issue #21). The winner per rate and why (tune's own lines) go
beside it. The lab uses its own instance (prefix cb21, state in /run/commbench-lab-cb21, subnet
10.248.0.0/24) and is taken down in every case. Writes benchmarks/results/tune_lab.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

BOUND = 0.25
CONFIG = common.REPO / "tests" / "data" / "ds_config" / "zero2_bucket5e8_fp16.json"


def tune(lab: common.Lab, rate: str, a, out: Path) -> tuple[dict, list[str], float]:
    """One tune run at `rate`: its JSON record, the lines that explain the winner, the wall time."""
    lab.must("lab", "set", "--rate", rate)
    start = time.monotonic()
    proc = lab.must("tune", "--ds-config", a.config, "--model", a.model, "--scale", a.scale, "--launcher", "lab",
                    "--top", str(a.top), "--backend", "gloo", *a.tune_args.split(), "--progress", "off",
                    "--out", str(out), timeout=3600)
    wall = time.monotonic() - start
    (record,) = out.glob("*.tune.json")
    why = [x for x in proc.stdout.splitlines() if x.startswith(("# measured:", "# the fastest", "# no measured",
                                                                 "# winner:"))]
    return json.loads(record.read_text()), why, wall


def markdown(meta: dict, runs: dict) -> str:
    lines = [f"# tune on the lab: predicted vs measured ({meta['model']}, 2 hosts, gloo, one rank per host)", "",
             f"Machine: {common.machine_line(meta['machine'])}; load average {meta['loadavg_end']:.2f} at the end.",
             f"Command: `{meta['command']}` ({meta['wall_s']:.0f} s); per rate: `{meta['tune']}`.", "",
             "| rate | rank | stage | reduce_bucket | grad_accum | dtype | predicted us/step | measured us/step | "
             "measured / predicted | bound |", "|---|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for rate, run in runs.items():
        for c in (c for c in run["record"]["candidates"] if c["measured_us"] is not None):
            ok = "met" if abs(c["ratio"] - 1) <= BOUND else "MISSED"
            lines.append(f"| {rate} | {c['rank']}{' (yours)' if c['yours'] else ''} | {c['stage']} | "
                         f"{c['reduce_bucket']:.3g} | {c['grad_accum']} | {c['dtype']} | {c['predicted_us']:,.0f} | "
                         f"{c['measured_us']:,.0f} | {c['ratio']:.3f} | within {BOUND:.0%} {ok} |")
    lines += ["", "Times: one optimizer step's communication at the measuring scale (every message x scale), "
              "the median over the zero run's steps.", ""]
    for rate, run in runs.items():
        lines += [f"At {rate} ({run['wall_s']:.0f} s):", "", *[f"    {x}" for x in run["why"]], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1gbit,100mbit")
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--model", default="gpt2-125m")
    ap.add_argument("--scale", default="0.01")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--tune-args", default="-w 1 -n 5 --no-wire", help="Further tune flags.")
    ap.add_argument("--prefix", default="cb21")
    ap.add_argument("--subnet", default="10.248.0.0/24")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("tune_lab: the lab needs root (network namespaces, veth, tc): run it as root", file=sys.stderr)
        return 2
    m0 = common.machine()
    lab = common.Lab(a.prefix)
    start = time.monotonic()
    runs: dict[str, dict] = {}
    lab.cb("lab", "down")
    lab.must("lab", "up", "--nodes", "2", "--rate", a.rates.split(",")[0], "--subnet", a.subnet)
    try:
        with tempfile.TemporaryDirectory(prefix="cb-tune-lab-") as tmp:
            for rate in a.rates.split(","):
                record, why, wall = tune(lab, rate, a, Path(tmp) / rate)
                runs[rate] = {"record": record, "why": why, "wall_s": wall}
                for line in why:
                    print(f"{rate}: {line}", flush=True)
    finally:
        lab.must("lab", "down")
    ratios = [c["ratio"] for r in runs.values() for c in r["record"]["candidates"] if c["ratio"] is not None]
    meta = {"machine": m0, "loadavg_end": common.machine()["loadavg_1m"], "wall_s": time.monotonic() - start,
            "model": a.model, "bound": BOUND, "measured": len(ratios),
            "worst_miss": max((abs(x - 1) for x in ratios), default=None),
            "meets": bool(ratios) and all(abs(x - 1) <= BOUND for x in ratios),
            "winners": {rate: r["record"]["winner"] for rate, r in runs.items()},
            "command": "python benchmarks/tune_lab.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
            "tune": f"commbench tune --ds-config {os.path.relpath(a.config, common.REPO)} "
                    f"--model {a.model} --scale {a.scale} --launcher lab --top {a.top} --backend gloo {a.tune_args}"}
    md = markdown(meta, runs)
    js, mdp = common.write("tune_lab", {"meta": meta, "runs": runs}, md)
    print(md)
    print(f"wrote {js} and {mdp}")
    return 0 if meta["meets"] else 1


if __name__ == "__main__":
    sys.exit(main())
