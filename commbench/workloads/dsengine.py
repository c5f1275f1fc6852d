"""The real DeepSpeed engine, per ZeRO stage: step times and DeepSpeed's own comms-logger
breakdown as rows (workload "deepspeed"), and with --validate a check of commbench's ZeRO
schedule (workloads/zeroschedule.py) against what the engine really issued, op type by op type."""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.harness.session import Measurement, Session
from commbench.core.vocab import BY_NAME, volume_factor
from commbench.workloads.zero import ZeroPlan
from commbench.workloads.zeroschedule import PAPER_VOLUME, REDUCTIONS, curve_comms, module_sizes, step_schedule

# A model DeepSpeed trains in seconds on two CPU ranks (the 1.3B shape cannot run here).
SMALL_SHAPE = {"layers": 2, "hidden": 64, "vocab": 256, "seq": 32}
# With --validate, stage 3 partitions every parameter (as it does for a large model): a tiny
# model's parameters all sit below stage3_param_persistence_threshold otherwise.
STAGE3_AS_LARGE = {"stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
                   "stage3_prefetch_bucket_size": 0}
DEFAULT_CONFIG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}
TOLERANCE = 0.10
# Ops the schedule leaves out because they carry next to nothing (scalars for loss scaling and
# gradient norms, stage-3 bookkeeping broadcasts): under this share of the step's bytes.
CONTROL_SHARE = 0.01


@dataclass
class EnginePlan(ZeroPlan):
    steps: int = 2
    seq: int = 32
    validate_schedule: bool = False
    workload: str = "deepspeed"


@dataclass
class EngineWorkload:
    plan: EnginePlan
    failure_message: str = ("commbench: the ZeRO schedule differs from what DeepSpeed issued by more than "
                            f"{TOLERANCE:.0%} (see the validation table)")
    fresh_ranks = True  # local ranks start fresh, not forked: DeepSpeed sets up its accelerator per process

    def shape(self) -> dict:
        p = self.plan
        return {"layers": p.layers, "hidden": p.hidden, "vocab": p.vocab, "seq": p.seq}

    def validate(self, world: int) -> None:
        if world < 2:
            raise BadInput("the DeepSpeed engine workload needs at least 2 ranks: raise --nproc")
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            raise BadInput("--engine deepspeed needs DeepSpeed: pip install deepspeed") from None

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        pass

    def total_points(self, world: int) -> int:
        return len(self.plan.stages) * max(1, len(self.plan.grad_accums))

    def settings(self) -> list[tuple[int | None, int]]:
        """(gradient_accumulation_steps or None for the config's, stage) of every point, in order."""
        gases: list[int | None] = [*self.plan.grad_accums] or [None]
        return [(g, s) for g in gases for s in self.plan.stages]

    def run(self, session: Session, repetitions: range) -> bool:
        import warnings

        from commbench.integrations.deepspeed.training import run_engine

        # DeepSpeed 0.19 calls torch's deprecated *_tensor collectives: not the user's concern
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")

        plan, reporter = self.plan, session.reporter
        config = plan.ds_config or dict(DEFAULT_CONFIG)
        shape = self.shape()
        reporter.line(f"# DeepSpeed engine: model {shape['layers']} layers x hidden {shape['hidden']}, vocab "
                      f"{shape['vocab']}, seq {shape['seq']}; {plan.steps} timed step(s) per stage"
                      + ("; --validate: stage 3 partitions every parameter" if plan.validate_schedule else ""))
        differs, noted = False, set[str]()
        for repetition in repetitions:
            for gas, stage in self.settings():
                overrides = STAGE3_AS_LARGE if (stage == 3 and plan.validate_schedule) else None
                result = run_engine(config, stage, shape, plan.steps, session.device, zero_overrides=overrides,
                                    gradient_accumulation_steps=gas)
                for note in result.notes:  # the first point's all; later a new one (another GAS) only
                    if not noted or (note not in noted and "the stage asked for" not in note):
                        reporter.line(f"# config: {note}")
                noted.update(result.notes)
                by_op = result.by_collective()
                if session.rank == 0:
                    session.write(self._rows(session, result, by_op, stage, repetition))
                step_ms = 1e3 * sum(result.step_times_s) / len(result.step_times_s)
                ops = ", ".join(f"{op} x{v['count']:g} ({v['bytes'] / 1e3:.1f} kB)" for op, v in sorted(by_op.items()))
                reporter.line(f"  stage {stage}: step {step_ms:.1f} ms, {result.volume_ratio:.3f} P per step "
                              f"({result.micro_batches_per_step} micro-batch(es)); {ops}")
                if plan.validate_schedule:
                    differs |= self._validate(reporter, result, by_op, stage)
                reporter.advance(f"stage {stage}")
        return differs

    def _rows(self, session: Session, result, by_op: dict, stage: int, repetition: int) -> list[dict]:
        g, world = result.micro_batches_per_step, result.world_size
        total = int(sum(v["bytes"] for v in by_op.values())) or 1
        volume = result.volume_bytes_per_step
        paper = PAPER_VOLUME[stage] * g * result.param_bytes * (world - 1) / world
        common = dict(dtype=result.dtype, op="sum", root=-1, in_place=True, repetition=repetition, zero_stage=stage,
                      grad_accum=g)
        rows = [session.record(collective="deepspeed_step", size_bytes=total, count=result.param_count,
                               busbw_factor=volume / total,
                               m=Measurement(list(result.step_times_s), result.steps, None),
                               n_collectives=int(round(sum(v["count"] for v in by_op.values()))),
                               bytes_per_rank=int(volume), paper_bytes_per_rank=int(paper),
                               ops=json.dumps(by_op, sort_keys=True), **common)]
        for op, v in sorted(by_op.items()):
            latencies = [lat / 1e3 for rec in result.comm if rec.collective == op for lat in rec.latencies_ms]
            rows.append(session.record(collective=op, size_bytes=int(v["bytes"]), count=int(round(v["count"])),
                                       busbw_factor=(volume_factor(op, world)
                                                     if op in BY_NAME and BY_NAME[op].zero_step else 1.0),
                                       m=Measurement(latencies or list(result.step_times_s), len(latencies), None),
                                       n_collectives=int(round(v["count"])), bytes_per_rank=int(v["volume_bytes"]),
                                       **common))
        return rows

    def _validate(self, reporter, result, by_op: dict, stage: int) -> bool:
        """Schedule bytes per op type against the engine's, per optimizer step."""
        from commbench.integrations.deepspeed import config as dsconfig

        cfg = dsconfig.parse(result.config)
        itemsize = result.param_bytes // result.param_count
        modules = module_sizes(self.plan.layers, self.plan.hidden, self.plan.vocab)
        prefetch = 0 if stage == 3 else cfg.stage3_prefetch_bucket_size
        sched = step_schedule(stage, modules, cfg.reduce_bucket_size, prefetch, result.micro_batches_per_step,
                              cfg.use_multi_rank_bucket_allreduce)
        expected: dict[str, float] = {}
        for c in sched:
            expected[c.op] = expected.get(c.op, 0.0) + c.numel * itemsize
        total = sum(v["bytes"] for v in by_op.values()) or 1.0
        differs = False
        for op in sorted(set(expected) | set(by_op)):
            want, got = expected.get(op, 0.0), by_op.get(op, {}).get("bytes", 0.0)
            ratio = got / want if want else float("inf")
            if want == 0 and got < CONTROL_SHARE * total:
                verdict = "control traffic (not in the schedule)"  # loss scale, grad norm, ...
            else:
                ok = want > 0 and abs(ratio - 1) <= TOLERANCE
                differs |= not ok
                verdict = "ok" if ok else "DIFFERS"
            reporter.line(f"    validate stage {stage} {op:15s} schedule {want / 1e3:10.1f} kB  DeepSpeed "
                          f"{got / 1e3:10.1f} kB  ratio {ratio:6.3f}  {verdict}")
        return self._validate_reductions(reporter, result, sched, itemsize, stage) or differs

    def _validate_reductions(self, reporter, result, sched: list, itemsize: int, stage: int) -> bool:
        """The gradient reductions one by one: as many per optimizer step as the engine issued
        (micro-batch by micro-batch where it reduces per micro-batch), each of the same size."""
        world = result.world_size
        want = reduction_sizes(curve_comms(sched, itemsize, world))
        floor = CONTROL_SHARE * result.param_bytes  # loss-scale flags and gradient norms are scalars
        got: dict[str, list[int]] = {}
        for rec in result.comm:
            if rec.collective in REDUCTIONS and rec.size_bytes >= floor:
                got.setdefault(rec.collective, []).extend([rec.size_bytes] * round(rec.count / result.steps))
        differs = False
        for op in sorted(set(want) | set(got)):
            mine, theirs = sorted(want.get(op, [])), sorted(got.get(op, []))
            ok = len(mine) == len(theirs) and all(abs(b / a - 1) <= TOLERANCE for a, b in zip(mine, theirs))
            differs |= not ok
            reporter.line(f"    validate stage {stage} {op:15s} per step: schedule {_calls(mine)}, DeepSpeed "
                          f"{_calls(theirs)} ({result.micro_batches_per_step} micro-batch(es))  "
                          + ("ok" if ok else "DIFFERS"))
        return differs


def reduction_sizes(comms: list[tuple[str, int, int]]) -> dict[str, list[int]]:
    """collective -> the size in bytes of each of its calls per step, for the gradient reductions."""
    out: dict[str, list[int]] = {}
    for op, size, calls in comms:
        if op in REDUCTIONS:
            out.setdefault(op, []).extend([size] * calls)
    return out


def _calls(sizes: list[int]) -> str:
    if not sizes:
        return "none"
    lo, hi = min(sizes), max(sizes)
    each = f"{lo / 1e3:.1f} kB" if lo == hi else f"{lo / 1e3:.1f}-{hi / 1e3:.1f} kB"
    return f"{len(sizes)} x {each}"
