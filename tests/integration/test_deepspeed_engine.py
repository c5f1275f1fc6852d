"""The real DeepSpeed engine with two real gloo ranks on this machine: ZeRO stages 0-3 with both
fixture configs (adapted to two CPU ranks), read back through DeepSpeed's comms logger.

Each rank is a `python -c` process that first creates the process group the way commbench's
harness does (init_process_group("gloo", "tcp://127.0.0.1:PORT")), then calls run_engine for
every job. The ranks run once per test session (module fixture); the tests assert on what they
recorded. The expected volumes come from DeepSpeed 0.19.8's code (docs/DEEPSPEED.md), in the
ZeRO paper's units (an all-reduce of S bytes counts 2S), per optimizer step of g micro-batches:

    stage 0   all-reduce of the gradients at the accumulation boundary         2P
    stage 1   all-reduce of gradient buckets at the boundary + all-gather      2P + P = 3P
    stage 2   all-reduce of gradient buckets every micro-batch + all-gather    g * 2P + P
    stage 3   per micro-batch: all-gather fwd + bwd, reduce-scatter of grads   g * 3P
              (with stage3_param_persistence_threshold, _max_reuse_distance and
              _prefetch_bucket_size at 0, so that the tiny model behaves like a large one)

First run on a machine: DeepSpeed JIT-builds its shm comm op (~55 s on 2 cores) and, because
the fixtures offload the optimizer, DeepSpeedCPUAdam (~70 s); both are cached under
~/.cache/torch_extensions. With the cache the whole module takes well under a minute.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "ds_config"
FIXTURES = ("zero2_bucket5e8_fp16.json", "zero2_offload_fp16.json")
SHAPE = dict(layers=2, hidden=64, vocab=256, seq=32)
STEPS = 2
# Makes the 132k-parameter model behave like a large one in stage 3 (see the module docstring).
PAPER_Z3 = {"stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
            "stage3_prefetch_bucket_size": 0}

if importlib.util.find_spec("deepspeed") is None:
    pytest.skip("deepspeed is not importable: pip install deepspeed to run the engine tests",
                allow_module_level=True)

JOBS = [
    *[dict(name=f"{cfg}:z{stage}", config=cfg, stage=stage, overrides=PAPER_Z3 if stage == 3 else None)
      for cfg in FIXTURES for stage in (0, 1, 2, 3)],
    # DeepSpeed's defaults on a tiny model: every parameter is below the persistence threshold.
    dict(name="z3-defaults", config=FIXTURES[0], stage=3, overrides=None),
    # reduce to the owner instead of the multi-rank bucket all-reduce
    dict(name="z1-reduce", config=FIXTURES[0], stage=1, overrides={"use_multi_rank_bucket_allreduce": False}),
    # 20000 elements = 40000 bytes in bf16: buckets count elements
    dict(name="z2-bucket20000", config=FIXTURES[0], stage=2, overrides={"reduce_bucket_size": 20000}),
]

WORKER = textwrap.dedent("""
    import dataclasses, datetime, json, os, sys, time
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    spec = json.loads(sys.argv[1])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["MASTER_PORT"],
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
    from commbench.integrations.deepspeed.training import run_engine
    results = {}
    for job in spec["jobs"]:
        cfg = json.load(open(os.path.join(spec["configs"], job["config"])))
        t = time.perf_counter()
        r = run_engine(cfg, job["stage"], spec["shape"], spec["steps"], "cpu", zero_overrides=job["overrides"])
        d = dataclasses.asdict(r)
        d.update(wall_s=time.perf_counter() - t, volume_ratio=r.volume_ratio, by_collective=r.by_collective())
        results[job["name"]] = d
    json.dump(results, open(os.path.join(spec["out"], "rank%d.json" % rank), "w"), default=str)
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both ranks' EngineResults (as dicts) for every job: {rank: {job name: result}}."""
    out = tmp_path_factory.mktemp("ds_engine")
    spec = json.dumps(dict(jobs=JOBS, configs=str(CONFIGS), shape=SHAPE, steps=STEPS, out=str(out)))
    port = _free_port()
    base = {k: v for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE",
                         "MASTER_ADDR", "MASTER_PORT")}
    base.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), base.get("PYTHONPATH")])),
                OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, spec], env={**base, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out)
             for r in range(2)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=900)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    elapsed = time.monotonic() - start
    for r, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{log[-4000:]}"
    data = {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(2)}
    summary = [f"2 gloo ranks, {len(JOBS)} engine runs in {elapsed:.0f} s "
               f"(first backend init {data[0][JOBS[0]['name']]['backend_init_s']:.1f} s)"]
    for job in JOBS:
        d = data[0][job["name"]]
        kinds = ", ".join(f"{k} {v['count']:g}x {v['volume_bytes'] / d['param_bytes']:.2f}P"
                          for k, v in sorted(d["by_collective"].items()))
        summary.append(f"  {job['name']:<34} {d['volume_ratio']:6.3f} P/step  "
                       f"({d['volume_ratio'] / d['micro_batches_per_step']:.3f} P/micro)  step "
                       f"{min(d['step_times_s']) * 1e3:.0f} ms  [{kinds}]")
    print("\n".join(summary))
    return data


def _ops(result, collective):
    return [c for c in result["comm"] if c["collective"] == collective]


def _volume(result, collective=None):
    """Bytes per optimizer step in the ZeRO paper's units, recomputed from the raw records."""
    total = 0.0
    for c in result["comm"]:
        if collective is None or c["collective"] == collective:
            factor = 2.0 if c["collective"] == "all_reduce" else 0.0 if c["collective"] == "barrier" else 1.0
            total += c["count"] * c["size_bytes"] * factor
    return total / result["steps"]


def _gas(result):
    return result["micro_batches_per_step"]


# --------------------------------------------------------------------------- every stage

@pytest.mark.parametrize("job", [j["name"] for j in JOBS])
def test_every_run_logs_collectives_and_times_steps(runs, job):
    r = runs[0][job]
    assert r["comm"], f"{job}: no comms-logger rows"
    assert len(r["step_times_s"]) == STEPS and all(t > 0 for t in r["step_times_s"])
    assert r["param_count"] == 132480 and r["param_bytes"] == 2 * 132480 and r["dtype"] == "bfloat16"
    for c in r["comm"]:
        assert c["count"] >= 1 and c["msg_bytes"] >= 0 and len(c["latencies_ms"]) == c["count"]
        assert all(x >= 0 for x in c["latencies_ms"])
    # the ratio EngineResult reports is the one the raw records give
    assert r["volume_ratio"] == pytest.approx(_volume(r) / r["param_bytes"])


@pytest.mark.parametrize("job", [j["name"] for j in JOBS])
def test_both_ranks_log_the_same_collectives(runs, job):
    def shape(result):
        return sorted((c["op"], c["msg_bytes"], c["count"]) for c in result["comm"])
    assert shape(runs[0][job]) == shape(runs[1][job])


@pytest.mark.parametrize("job", [j["name"] for j in JOBS])
def test_latencies_are_per_call_not_cumulative(runs, job):
    """DeepSpeed 0.19.8 logs the running total of a timer (comm.py timed_op: elapsed(reset=False));
    run_engine records each call's own time, so a rank's logged time fits inside its steps."""
    r = runs[0][job]
    logged_ms = sum(c["total_latency_ms"] for c in r["comm"])
    assert logged_ms <= sum(r["step_times_s"]) * 1e3 * 1.05 + 5


@pytest.mark.parametrize("config", FIXTURES)
def test_fixture_configs_are_adapted_with_one_line_each(runs, config):
    r = runs[0][f"{config}:z2"]
    notes = r["notes"]
    assert any(n.startswith("train_batch_size 32 != 4 (micro) x 8 (accumulation) x 2 (ranks): set to 64")
               for n in notes), notes
    assert any(n.startswith("fp16 on a CPU-only machine: switched to bf16") for n in notes), notes
    assert any(n.startswith("offload_param with ZeRO stage 2: dropped") for n in notes), notes
    assert all("\n" not in n for n in notes)
    cfg = r["config"]
    assert cfg["train_batch_size"] == 64 and cfg["bf16"] == {"enabled": True} and not cfg["fp16"]["enabled"]
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"  # CPU offload runs: kept
    assert cfg["comms_logger"]["enabled"] is True
    assert _gas(r) == 8


def test_backend_is_created_once_and_the_shm_op_cached(runs):
    """deepspeed.init_distributed wraps the harness's group on the first run_engine call of a
    process (JIT-building the shm comm op the first time on a machine); the build is cached."""
    from commbench.integrations.deepspeed.training import shm_op_build_dir

    first, *rest = [runs[0][j["name"]] for j in JOBS]
    assert first["backend_init_s"] > 0 and first["shm_op_cached_before"] in (True, False)
    assert all(r["backend_init_s"] == 0 and r["shm_op_cached_before"] is None for r in rest)
    assert list(shm_op_build_dir().glob("deepspeed_shm_comm*.so"))


# --------------------------------------------------------------------------- per stage

@pytest.mark.parametrize("config", FIXTURES)
def test_stage0_allreduces_the_gradients_once_per_step(runs, config):
    r = runs[0][f"{config}:z0"]
    P = r["param_bytes"]
    assert {c["collective"] for c in r["comm"]} == {"all_reduce"}
    # one all-reduce of all gradients (engine.py MEMORY_OPT_ALLREDUCE_SIZE bucket of 5e8 elements)
    assert [(c["msg_bytes"], c["count"]) for c in r["comm"]] == [(P, STEPS)]
    assert r["volume_ratio"] == pytest.approx(2.0, rel=0.01)


@pytest.mark.parametrize("config", FIXTURES)
@pytest.mark.parametrize("stage", (1, 2))
def test_stages_1_2_allreduce_gradient_buckets_then_allgather_parameters(runs, config, stage):
    """Not a reduce-scatter, whatever "reduce_scatter": true says: with the default
    use_multi_rank_bucket_allreduce every bucket is all-reduced (stage_1_and_2.py average_tensor ->
    allreduce_and_scatter -> allreduce_bucket -> dist.all_reduce), then the updated partitions are
    all-gathered in one all_gather_into_tensor (runtime/utils.py all_gather_into_tensor_dp_groups)."""
    r = runs[0][f"{config}:z{stage}"]
    P, g = r["param_bytes"], _gas(r)
    assert not _ops(r, "reduce_scatter") and not _ops(r, "reduce")
    grads = [c for c in _ops(r, "all_reduce") if c["msg_bytes"] == P]
    # stage 1 reduces at the accumulation boundary only, stage 2 after every micro-batch
    per_step = 1 if stage == 1 else g
    assert grads and grads[0]["count"] == per_step * STEPS
    gathers = _ops(r, "all_gather")
    assert [(c["op"], c["size_bytes"], c["count"]) for c in gathers] == [("all_gather_into_tensor", P, STEPS)]
    # the other all-reduces are flags and norms of a few bytes
    assert all(c["msg_bytes"] <= 16 for c in _ops(r, "all_reduce") if c["msg_bytes"] != P)
    expected = 2 * per_step + 1  # paper units: all-reduce 2P per reduction + all-gather P
    assert r["volume_ratio"] == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("config", FIXTURES)
def test_stage3_allgathers_parameters_and_reduce_scatters_gradients(runs, config):
    r = runs[0][f"{config}:z3"]
    P, g = r["param_bytes"], _gas(r)
    rs = _ops(r, "reduce_scatter")
    assert rs and {c["op"] for c in rs} == {"reduce_scatter_tensor"}
    assert _volume(r, "reduce_scatter") == pytest.approx(g * P, rel=0.01)      # P per micro-batch
    ag = _ops(r, "all_gather")
    assert ag and {c["op"] for c in ag} == {"all_gather_into_tensor"}
    assert _volume(r, "all_gather") == pytest.approx(2 * g * P, rel=0.02)      # forward + backward
    assert _volume(r, "all_reduce") < 0.001 * P
    assert r["volume_ratio"] == pytest.approx(3 * g, rel=0.02)
    assert r["volume_ratio"] / g == pytest.approx(3.0, rel=0.02)               # the paper's 3P


def test_stage3_defaults_keep_small_parameters_whole(runs):
    """Below stage3_param_persistence_threshold (1e5 elements) parameters are persistent: never
    fetched, all-gathered once after the optimizer step (stage3.py _post_step)."""
    r = runs[0]["z3-defaults"]
    P, g = r["param_bytes"], _gas(r)
    assert _volume(r, "reduce_scatter") == pytest.approx(g * P, rel=0.01)
    assert _volume(r, "all_gather") == pytest.approx(P, rel=0.01)
    assert r["volume_ratio"] == pytest.approx(g + 1, rel=0.02)


def test_stage1_reduces_to_the_owner_without_multi_rank_allreduce(runs):
    r = runs[0]["z1-reduce"]
    P = r["param_bytes"]
    reduces = _ops(r, "reduce")
    assert reduces and sum(c["msg_bytes"] * c["count"] for c in reduces) / STEPS == P
    assert r["volume_ratio"] == pytest.approx(2.0, rel=0.01)  # the paper's ZeRO-1 volume


def test_reduce_bucket_size_counts_elements_not_bytes(runs):
    r = runs[0]["z2-bucket20000"]
    big = [c for c in _ops(r, "all_reduce") if c["msg_bytes"] > 16]
    assert len(big) > 1
    largest = max(c["msg_bytes"] for c in big)
    # bf16: at most 20000 elements = 40000 bytes per bucket, well above a 20000-byte cap
    assert 20000 < largest <= 2 * 20000
    assert r["volume_ratio"] == pytest.approx(2 * _gas(r) + 1, rel=0.01)


# --------------------------------------------------------------------------- no ranks

def test_run_engine_needs_a_process_group():
    import torch.distributed as dist

    from commbench.core.errors import BadInput
    from commbench.integrations.deepspeed.training import run_engine

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    with pytest.raises(BadInput, match="init_process_group"):
        run_engine({}, 2, SHAPE, 1)
