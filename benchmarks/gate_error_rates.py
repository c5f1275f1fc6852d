"""How often suggested bands let a regression through, and how often they fail an unchanged run
(issue #20: at the defaults, a 25% regression passes in at most 1% of trials and an unchanged run
fails in at most 5%).

Each trial makes a reference from known noise, runs `gate --suggest` on it (analysis/gate/gate.py
suggest, in-process), and judges fresh runs of the same model against the bands: one unchanged,
one 10% slower and one 25% slower (busbw / 1.1, / 1.25). A gate fails when any of its entries
fails; a refused suggestion (a band wider than --max-band) counts as "refused", never as a pass.

The model, per point (4 sizes, 1M..8M, one all_reduce on 2 ranks): a run's level drifts by
N(0, run_sd), each repetition by N(0, rep_sd) around it, and each iteration's time scatters by
a lognormal of iter_sd (what a single-repetition run's median CI sees). Scenarios: repetitions
of one run (-R 5), several runs (3 runs of -R 3, 5 of -R 2), a single repetition (-n 200).

    python benchmarks/gate_error_rates.py [--trials 400]
"""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np
import pandas as pd

import common

SIZES = (1 << 20, 2 << 20, 4 << 20, 8 << 20)
TRUE_GBPS = {1 << 20: 0.090, 2 << 20: 0.105, 4 << 20: 0.113, 8 << 20: 0.117}
SCENARIOS = [  # name, runs in the reference, repetitions a run, iterations a repetition, run_sd, rep_sd, iter_sd
    ("-R 5, quiet (rep sd 1%)", 1, 5, 20, 0.0, 0.01, 0.05),
    ("-R 5, noisy (rep sd 3%)", 1, 5, 20, 0.0, 0.03, 0.10),
    ("-R 5, drift between runs (run sd 1.5%, rep sd 1%)", 1, 5, 20, 0.015, 0.01, 0.05),
    ("3 runs x -R 3 (run sd 1.5%, rep sd 1%)", 3, 3, 20, 0.015, 0.01, 0.05),
    ("5 runs x -R 2 (run sd 1.5%, rep sd 1%)", 5, 2, 20, 0.015, 0.01, 0.05),
    ("one repetition, -n 200 (iter sd 10%)", 1, 1, 200, 0.0, 0.0, 0.10),
]


def run_frame(rng, run_id: str, reps: int, iters: int, run_sd: float, rep_sd: float, iter_sd: float,
              slowdown: float = 1.0) -> pd.DataFrame:
    rows = []
    level = 1 + rng.normal(0, run_sd)
    for rep in range(reps):
        for size in SIZES:
            bw = TRUE_GBPS[size] * level * (1 + rng.normal(0, rep_sd)) / slowdown
            t_us = size / (bw * 1e3)  # busbw = algbw on 2 ranks' all_reduce (bus factor 1)
            samples = (t_us * rng.lognormal(0, iter_sd, iters)).tolist()
            median = float(np.median(samples))
            rows.append({"run_id": run_id, "collective": "all_reduce", "dtype": "float32", "op": "sum",
                         "in_place": True, "size_bytes": size, "world_size": 2, "nnodes": 2, "workload": "sweep",
                         "busbw_GBps": size / (median * 1e3), "algbw_GBps": size / (median * 1e3), "wrong": 0,
                         "time_us": median, "samples_us": samples, "hosts": ["a", "b"], "repetition": rep,
                         "schema_version": 1})
    return pd.DataFrame(rows)


def trial(rng, scenario) -> dict[str, str]:
    from commbench.analysis.gate import gate
    from commbench.analysis.gate.bands import parse_bands
    from commbench.analysis.gate.bandsuggest import suggest
    from commbench.core.errors import BadInput

    _, runs, reps, iters, run_sd, rep_sd, iter_sd = scenario
    ref = pd.concat([run_frame(rng, f"ref{i}", reps, iters, run_sd, rep_sd, iter_sd) for i in range(runs)],
                    ignore_index=True)
    try:
        bands = parse_bands(suggest(ref).text, "bands.yaml")
    except BadInput:
        return {k: "refused" for k in ("unchanged", "10%", "25%")}
    out = {}
    for name, slowdown in (("unchanged", 1.0), ("10%", 1.1), ("25%", 1.25)):
        new = run_frame(rng, "new", reps, iters, run_sd, rep_sd, iter_sd, slowdown)
        out[name] = "fail" if gate.judge(bands, new).failed else "pass"
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--seed", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    figures, lines = [], []
    for sc in SCENARIOS:
        outcomes = [trial(rng, sc) for _ in range(args.trials)]

        def share(case: str, what: str, outcomes: list = outcomes) -> float:
            return sum(o[case] == what for o in outcomes) / len(outcomes)

        f = {"scenario": sc[0], "trials": args.trials, "unchanged_fails": share("unchanged", "fail"),
             "regression10_passes": share("10%", "pass"), "regression25_passes": share("25%", "pass"),
             "refused": share("unchanged", "refused")}
        figures.append(f)
        lines.append(f"| {sc[0]} | {f['unchanged_fails']:.1%} | {f['regression10_passes']:.1%} | "
                     f"{f['regression25_passes']:.1%} | {f['refused']:.1%} |")
        print(lines[-1], flush=True)
    from commbench.analysis.gate import tolerance

    md = (f"# Suggested gate bands: error rates\n\n{common.machine_line(common.machine())}; "
          f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}. {args.trials} trials a scenario (seed {args.seed}); "
          f"defaults: floor {tolerance.DEFAULT_FLOOR:.0%}, Z {tolerance.Z:g}, "
          f"--max-band {tolerance.DEFAULT_MAX_BAND:.0%}. "
          "A gate has 4 entries (1M..8M) and fails when one does.\n\n"
          "| scenario | unchanged run fails | 10% regression passes | 25% regression passes | refused (too wide) |\n"
          "|---|---|---|---|---|\n" + "\n".join(lines) + "\n")
    common.write("gate_error_rates", {"scenarios": figures, "trials": args.trials, "seed": args.seed,
                                      "z": tolerance.Z, "floor": tolerance.DEFAULT_FLOOR,
                                      "max_band": tolerance.DEFAULT_MAX_BAND}, md)
    print(md)


if __name__ == "__main__":
    main()
