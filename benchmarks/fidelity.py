"""Harness fidelity: commbench's measurement against the loop one writes by hand, side by side.

    flock /tmp/commbench-heavy.lock python benchmarks/fidelity.py          # ~2 min on 2 cores

Two local gloo ranks, started by commbench's own launcher and runner, so the process group and
the Session are the ones a sweep uses. Per round and size, the commbench side is the real
harness (workloads/sweep.measure_point -> Session.time_call: warm-up, adaptive count, per
iteration perf_counter, max over ranks, median) with the default iteration policy, and the bare
side is bare_loop.bare_time (barrier, perf_counter around N back-to-back calls, slowest rank's
average) with the same N and warm-up. The two alternate which goes first, round by round, on the
same ranks and the same process group, so both see the same machine state.

Figures (rank 0 writes benchmarks/results/fidelity.json and .md):
  - sizes >= 1 MiB: commbench busbw / bare busbw (= bare time / commbench time); bound >= 0.98
  - sizes 8 B .. 64 KiB: latency overhead, commbench time / bare time - 1; bound <= 5%
Each is the median over rounds of the per-round ratio (paired: both sides of a round ran
back to back). Beside it, the same ratio with commbench's mean per iteration (the bare loop's own
statistic), which isolates what the harness adds from what the median leaves out.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (puts this checkout's commbench first on sys.path)

import bare_loop  # noqa: E402

from commbench.core import launch, results  # noqa: E402
from commbench.harness import plan as planning  # noqa: E402
from commbench.harness.collectives import BY_NAME, CallArgs  # noqa: E402
from commbench.harness.data import allocate, fill  # noqa: E402
from commbench.harness.dtypes import get_dtype  # noqa: E402
from commbench.harness.plan import Point, SweepPlan  # noqa: E402
from commbench.harness.runner import rank_main  # noqa: E402
from commbench.core.stats import median_ci_ranks  # noqa: E402
from commbench.core.units import parse_size_list  # noqa: E402
from commbench.workloads.sweep import measure_point  # noqa: E402

LATENCY_SIZES = "8,32,128,512,2K,8K,32K,64K"
BANDWIDTH_SIZES = "1M,4M,16M,64M"
BUSBW_BOUND = 0.98
LATENCY_BOUND = 0.05


@dataclass
class FidelityWorkload:
    """A workload for commbench's runner: the harness's measure_point and the bare loop, interleaved."""

    plan: SweepPlan
    rounds: int
    report: str  # where rank 0 writes the raw pairs (JSON)
    rows: list = field(default_factory=list)

    def validate(self, world: int) -> None:
        planning.validate(self.plan, world)

    def prepare(self, backend, device, env) -> None:
        pass

    def total_points(self, world: int) -> int:
        return self.rounds * len(self.plan.sizes) * 2

    def run(self, session, repetitions: range) -> bool:
        # the rounds are this benchmark's repetitions (its plan keeps -R 1, so `repetitions` is range(1))
        plan, rank, world = self.plan, session.rank, session.world
        collective, dtype = BY_NAME[plan.collectives[0]], get_dtype(plan.dtype)
        args = CallArgs(rank, world, plan.root, plan.op if collective.reduces else None, session.group)
        in_place = collective.supports("in")
        last_iters: dict[int, int] = {}
        for rnd in range(self.rounds):
            for i, size in enumerate(plan.sizes):
                layout = collective.for_size(size, dtype.itemsize, world, rank)
                point = Point(collective.name, size, layout.size_bytes(dtype.itemsize), layout.count, in_place)
                commbench_first = (rnd + i) % 2 == 0 or size not in last_iters
                if commbench_first:
                    m = measure_point(session, collective, layout, point, dtype, args)
                    bare = bare_loop.bare_time(collective.name, point.size_bytes, m.iters, plan.warmup)
                else:
                    bare = bare_loop.bare_time(collective.name, point.size_bytes, last_iters[size], plan.warmup)
                    m = measure_point(session, collective, layout, point, dtype, args)
                last_iters[size] = m.iters
                # Diagnostic, after the pair: the harness's own loop (Session.time_each: the same
                # warm-up and timed batches, every rank's own times, no max over ranks).
                per_rank, _ = session.time_each(bind(collective, layout, point, dtype, args, session))
                session.reporter.advance(f"round {rnd + 1} {size} B")
                session.reporter.advance(f"round {rnd + 1} {size} B")
                self.rows.append({"round": rnd, "size_bytes": point.size_bytes, "iters": m.iters,
                                  "commbench_first": commbench_first, "bare_s": bare,
                                  "commbench_median_s": statistics.median(m.samples_s),
                                  "commbench_mean_s": statistics.fmean(m.samples_s),
                                  "own_loop_mean_s": max(statistics.fmean(r) for r in per_rank)})
        if rank == 0:
            Path(self.report).write_text(json.dumps(self.rows))
        return False


def bind(collective, layout, point, dtype, args, session):
    """The bound call exactly as measure_point builds it."""
    bufs = allocate(collective, layout, dtype, point.in_place, session.device)
    fill(bufs, args, dtype, point.in_place)
    return collective.bind(bufs, args)


def summarise(rows: list[dict], collective: str, world: int) -> list[dict]:
    out = []
    for size in sorted({r["size_bytes"] for r in rows}):
        pairs = [r for r in rows if r["size_bytes"] == size]
        med_ratio = [r["commbench_median_s"] / r["bare_s"] for r in pairs]  # commbench time / bare time
        mean_ratio = [r["commbench_mean_s"] / r["bare_s"] for r in pairs]
        loop_ratio = [r["own_loop_mean_s"] / r["bare_s"] for r in pairs]
        bare_t = statistics.median(r["bare_s"] for r in pairs)
        cb_t = statistics.median(r["commbench_median_s"] for r in pairs)
        ranks = median_ci_ranks(len(med_ratio))  # 95% CI of the median ratio over rounds (order statistics)
        lo, hi = (sorted(med_ratio)[ranks[0]], sorted(med_ratio)[ranks[1]]) if ranks else (None, None)
        row = {"size_bytes": size, "rounds": len(pairs), "iters": statistics.median(r["iters"] for r in pairs),
               "bare_us": bare_t * 1e6, "commbench_us": cb_t * 1e6,
               "time_ratio": statistics.median(med_ratio), "time_ratio_min": min(med_ratio),
               "time_ratio_max": max(med_ratio), "time_ratio_ci": [lo, hi],
               "mean_time_ratio": statistics.median(mean_ratio), "loop_cost": statistics.median(loop_ratio) - 1}
        if size >= 2**20:
            factor = bare_loop.busbw_factor(collective, world)
            fig = 1 / row["time_ratio"]
            ci = [1 / hi, 1 / lo] if ranks else [None, None]
            row.update(kind="busbw", bare_busbw=size / bare_t / 1e9 * factor,
                       commbench_busbw=size / cb_t / 1e9 * factor,
                       figure=fig, figure_ci=ci, mean_figure=1 / row["mean_time_ratio"], meets=fig >= BUSBW_BOUND,
                       resolved=ranks is not None and (ci[0] >= BUSBW_BOUND or ci[1] < BUSBW_BOUND))
        else:
            fig = row["time_ratio"] - 1
            ci = [lo - 1, hi - 1] if ranks else [None, None]
            row.update(kind="latency", figure=fig, figure_ci=ci, mean_figure=row["mean_time_ratio"] - 1,
                       meets=fig <= LATENCY_BOUND,
                       resolved=ranks is not None and (ci[1] <= LATENCY_BOUND or ci[0] > LATENCY_BOUND))
        out.append(row)
    return out


def markdown(table: list[dict], meta: dict) -> str:
    lines = [f"# Harness fidelity ({meta['collective']}, {meta['world']} gloo ranks, {meta['rounds']} rounds)", "",
             f"Machine: {common.machine_line(meta['machine'])}; load average {meta['loadavg_end']:.2f} at the end.",
             f"Command: `{meta['command']}` ({meta['wall_s']:.0f} s).", "",
             "| size | kind | iters | bare | commbench (median) | figure | 95% CI | bound | per-round range "
             "| with commbench's mean | harness loop cost |",
             "|---:|---|---:|---:|---:|---:|---|---|---|---:|---:|"]
    for r in table:
        lo, hi = r["figure_ci"]
        if r["kind"] == "busbw":
            fig, bound = f"busbw ratio {r['figure']:.3f}", f">= {BUSBW_BOUND}"
            ci = f"{lo:.3f}..{hi:.3f}" if lo is not None else "n/a"
            rng = f"{1 / r['time_ratio_max']:.3f}..{1 / r['time_ratio_min']:.3f}"
            mean = f"{r['mean_figure']:.3f}"
            bare, cb = f"{r['bare_busbw']:.3f} GB/s", f"{r['commbench_busbw']:.3f} GB/s"
        else:
            fig, bound = f"overhead {r['figure']:+.1%}", f"<= {LATENCY_BOUND:.0%}"
            ci = f"{lo:+.1%}..{hi:+.1%}" if lo is not None else "n/a"
            rng = f"{r['time_ratio_min'] - 1:+.1%}..{r['time_ratio_max'] - 1:+.1%}"
            mean = f"{r['mean_figure']:+.1%}"
            bare, cb = f"{r['bare_us']:.1f} us", f"{r['commbench_us']:.1f} us"
        verdict = ("met" if r["meets"] else "MISSED") + ("" if r["resolved"] else " (CI spans the bound)")
        lines.append(f"| {common.human(r['size_bytes'])} | {r['kind']} | {r['iters']:.0f} | {bare} | {cb} | {fig} | "
                     f"{ci} | {bound} {verdict} | {rng} | {mean} | {r['loop_cost']:+.1%} |")
    lines += ["", "figure: median over rounds of the paired per-round ratio (both sides ran back to back in "
              "one round, alternating which went first), with the 95% CI of that median from order statistics "
              "over the rounds (more rounds narrow it: --rounds). busbw ratio = commbench busbw / bare busbw; "
              "overhead = commbench time / bare time - 1. The last column puts commbench's mean per iteration "
              "(the bare loop's own statistic) in place of its median. Harness loop cost: the slowest rank's "
              "mean time per iteration in commbench's own timed loop (Session.time_each: the same warm-up, "
              "batches and per-iteration perf_counter, without the max over ranks) over the bare loop's, minus 1: "
              "what timing every iteration costs.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collective", choices=bare_loop.COLLECTIVES, default="all_reduce")
    ap.add_argument("--latency-sizes", default=LATENCY_SIZES)
    ap.add_argument("--bandwidth-sizes", default=BANDWIDTH_SIZES)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--nproc", type=int, default=2)
    a = ap.parse_args(argv)
    m0 = common.machine()
    sizes = [s for text in (a.latency_sizes, a.bandwidth_sizes) if text.strip() for s in parse_size_list(text)]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cb-fidelity-") as tmp:
        # The default iteration policy of `commbench sweep` (RunOptions' defaults); the #wrong check
        # runs after the timed loop and is off here only to save time.
        plan = SweepPlan(collectives=[a.collective], sizes=sizes, check=False, backend="gloo",
                         out=str(Path(tmp) / "fidelity.parquet"), run_id=results.make_run_id(),
                         placement="in" if BY_NAME[a.collective].supports("in") else "out", workload="fidelity")
        report = str(Path(tmp) / "pairs.json")
        code = launch.spawn_local(a.nproc, functools.partial(rank_main, FidelityWorkload(plan, a.rounds, report)))
        if code != 0:
            print(f"fidelity: the ranks ended with exit code {code}", file=sys.stderr)
            return code
        rows = json.loads(Path(report).read_text())
    wall = time.monotonic() - start
    table = summarise(rows, a.collective, a.nproc)
    meta = {"collective": a.collective, "world": a.nproc, "rounds": a.rounds, "machine": m0,
            "loadavg_end": common.machine()["loadavg_1m"], "wall_s": wall,
            "command": "python benchmarks/fidelity.py"
                       + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
            "bounds": {"busbw_ratio_min": BUSBW_BOUND, "latency_overhead_max": LATENCY_BOUND},
            "policy": {"warmup": plan.warmup, "time_budget": plan.time_budget, "precision": plan.precision,
                       "min_iters": plan.min_iters, "max_iters": plan.max_iters}}
    md = markdown(table, meta)
    js, mdp = common.write("fidelity", {"meta": meta, "sizes": table, "pairs": rows}, md)
    print(md)
    print(f"wrote {js} and {mdp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
