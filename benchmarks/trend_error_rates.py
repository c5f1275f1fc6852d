"""How often `commbench trend` names a change in runs that never changed (a false alarm), and how
often it finds a real one at the right run (issue #41; docs/TREND.md).

Each trial makes a nightly series: 24 runs of 24 points (one all_reduce curve); a run's level drifts
by a night's noise shared by all its points (N(0, night_sd), or Student t with 3 degrees of freedom
for a heavy-tailed fabric), each point by its own N(0, point_sd). Steady trials change nothing; drop
trials lower every point from run 16 by 10% or 25%. The analysis is analysis/trend/trend.py's find_changes
at the defaults (alpha 0.05, threshold 5%), in-process on the per-run medians.

    python benchmarks/trend_error_rates.py [--trials 1000]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from commbench.analysis.points.sides import KEY_COLUMNS
from commbench.analysis.trend import trend

RUNS, POINTS, CHANGE_AT = 24, 24, 15  # position 15: run 16
SCENARIOS = [  # name, night_sd, point_sd, heavy tails
    ("quiet fabric (1% + 1%)", 0.01, 0.01, False),
    ("noisy fabric (3% + 2%)", 0.03, 0.02, False),
    ("heavy-tailed fabric (t3, 3% + 2%)", 0.03, 0.02, True),
]


def series(rng: np.random.Generator, night_sd: float, point_sd: float, heavy: bool, drop: float) -> pd.DataFrame:
    nights = (rng.standard_t(3, RUNS) * night_sd / np.sqrt(3)) if heavy else rng.normal(0, night_sd, RUNS)
    level = np.where(np.arange(RUNS) >= CHANGE_AT, 1 - drop, 1.0)
    values = 10.0 * level[:, None] * np.exp(nights[:, None] + rng.normal(0, point_sd, (RUNS, POINTS)))
    rows = {k: [None] * (RUNS * POINTS) for k in KEY_COLUMNS}
    rows["collective"] = ["all_reduce"] * (RUNS * POINTS)
    rows["size_bytes"] = [1 << (3 + p) for _ in range(RUNS) for p in range(POINTS)]
    rows["run_id"] = [f"r{r:02d}" for r in range(RUNS) for _ in range(POINTS)]
    rows["v"] = values.ravel().tolist()
    return pd.DataFrame(rows)


def trial(rng, night_sd, point_sd, heavy, drop) -> tuple[bool, bool]:
    """(any change named, the change named at run 16 and nowhere else)."""
    runs = [trend.Run(i + 1, f"r{i:02d}", str(i), "") for i in range(RUNS)]
    _, changes = trend.find_changes(series(rng, night_sd, point_sd, heavy, drop), runs, 0.05, 0.05)
    at = {c.at for c in changes}
    return bool(changes), at == {CHANGE_AT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    print(f"{args.trials} trials a cell; {RUNS} runs x {POINTS} points; alpha 0.05, threshold 5%")
    print(f"{'scenario':36} {'false alarm (steady)':>21} {'found -10% at 16':>17} {'found -25% at 16':>17}")
    for name, night_sd, point_sd, heavy in SCENARIOS:
        false = np.mean([trial(rng, night_sd, point_sd, heavy, 0.0)[0] for _ in range(args.trials)])
        found10 = np.mean([trial(rng, night_sd, point_sd, heavy, 0.10)[1] for _ in range(args.trials)])
        found25 = np.mean([trial(rng, night_sd, point_sd, heavy, 0.25)[1] for _ in range(args.trials)])
        print(f"{name:36} {false:21.1%} {found10:17.1%} {found25:17.1%}")


if __name__ == "__main__":
    main()
