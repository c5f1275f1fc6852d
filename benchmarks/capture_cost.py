"""What `commbench capture` costs a job (issue #42: at most 5% of a step).

1. Per call: a 1-rank gloo all_reduce of 4 bytes, N calls with the recorder and N without,
   alternating A B B A; the difference of the per-call medians is the wrapper's cost in us.
2. A real DeepSpeed step: 2 gloo ranks (torchrun), the ZeRO-2 fixture adapted to CPU, a
   2-layer synthetic transformer; blocks of steps without and with capture (the context manager
   entered after deepspeed.initialize), alternating A B B A in one run; per-step time, max over
   ranks, median per side.

Writes benchmarks/results/capture_cost.{md,json}.

    python benchmarks/capture_cost.py [--calls 20000] [--steps 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "data" / "ds_config" / "zero2_bucket5e8_fp16.json"
SHAPE = dict(layers=2, hidden=64, vocab=256, seq=32)


def per_call(calls: int, rounds: int, tmp: Path) -> dict:
    import torch
    import torch.distributed as dist

    from commbench.integrations.capture import capture

    dist.init_process_group("gloo", init_method=f"file://{tmp / 'store'}", rank=0, world_size=1)
    t = torch.ones(1)
    sides: dict[str, list[float]] = {"off": [], "on": []}
    for i, side in enumerate(["off", "on", "on", "off"] * rounds):
        times = []
        with capture(tmp / f"c{i}.trace") if side == "on" else _nothing():
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                dist.all_reduce(t)
                times.append(time.perf_counter_ns() - t0)
        sides[side].append(statistics.median(times) / 1e3)
    dist.destroy_process_group()
    off, on = statistics.median(sides["off"]), statistics.median(sides["on"])
    return {"calls": calls, "off_us": off, "on_us": on, "overhead_us": on - off, "blocks": sides}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def rank_main(out: Path, steps: int, rounds: int) -> None:
    """Under torchrun: the engine, then blocks of steps without and with capture."""
    import deepspeed
    import torch
    import torch.distributed as dist

    from commbench.integrations.capture import capture
    from commbench.integrations.deepspeed import adapt as dsadapt
    from commbench.integrations.deepspeed.training import build_model

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    doc = json.loads(CONFIG.read_text())
    doc.update(train_batch_size=4 * world, train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=1)
    cfg, _ = dsadapt.adapt_for(doc, world, "cpu")
    cfg["steps_per_print"] = 1 << 30
    torch.manual_seed(0)
    model = build_model(**SHAPE)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    gen = torch.Generator().manual_seed(rank)

    def block() -> list[float]:
        times = []
        for _ in range(steps):
            dist.barrier()
            t0 = time.perf_counter()
            tokens = torch.randint(SHAPE["vocab"], (4, SHAPE["seq"]), generator=gen)
            engine.backward(engine(tokens, tokens))
            engine.step()
            took = torch.tensor([time.perf_counter() - t0])
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            times.append(float(took))
        return times

    block()  # warm-up
    sides: dict[str, list[float]] = {"off": [], "on": []}
    ops = 0
    for i, side in enumerate(["off", "on", "on", "off"] * rounds):
        if side == "on":
            with capture(out.with_name(f"step{i}.trace")) as rec:
                sides[side] += block()
                ops = len(rec.rows)
        else:
            sides[side] += block()
    if rank == 0:
        out.write_text(json.dumps({"steps": sides, "ops_per_block": ops, "steps_per_block": steps}))
    dist.destroy_process_group()


def deepspeed_step(steps: int, rounds: int, tmp: Path) -> dict:
    out = tmp / "steps.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
           "--rank-main", str(out), "--steps", str(steps), "--rounds", str(rounds)]
    subprocess.run(cmd, env={**common.child_env(), "OMP_NUM_THREADS": "1"}, check=True, cwd=tmp,
                   stdout=subprocess.DEVNULL)
    got = json.loads(out.read_text())
    off, on = statistics.median(got["steps"]["off"]), statistics.median(got["steps"]["on"])
    return {"off_ms": off * 1e3, "on_ms": on * 1e3, "ratio": on / off, "ops_per_step": got["ops_per_block"] / steps,
            "n_per_side": len(got["steps"]["off"]), "steps": got["steps"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rank-main", type=Path, default=None)
    a = p.parse_args()
    if a.rank_main is not None:
        rank_main(a.rank_main, a.steps, a.rounds)
        return
    with tempfile.TemporaryDirectory() as d:
        call = per_call(a.calls, a.rounds, Path(d))
        step = deepspeed_step(a.steps, a.rounds, Path(d))
    m = common.machine()
    md = (f"# capture cost\n\n{common.machine_line(m)}\n\n"
          f"- per call (1-rank gloo all_reduce of 4 B, median of {a.calls} calls, A B B A x {a.rounds}): "
          f"{call['off_us']:.1f} us without, {call['on_us']:.1f} us with: **{call['overhead_us']:.2f} us** per call\n"
          f"- DeepSpeed ZeRO-2 step (2 gloo ranks, {SHAPE}, {step['ops_per_step']:.0f} ops per step, "
          f"{step['n_per_side']} steps per side): {step['off_ms']:.1f} ms without, {step['on_ms']:.1f} ms with: "
          f"**{(step['ratio'] - 1) * 100:+.1f}%** (bound: <= 5%)\n")
    common.write("capture_cost", {"machine": m, "per_call": call, "deepspeed_step": step}, md)
    print(md)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
