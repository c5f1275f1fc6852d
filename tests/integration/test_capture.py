"""`commbench capture` and the capture context manager with real gloo ranks (issue #42's Done-when):
a real DeepSpeed ZeRO-2 engine run (2 CPU ranks, tests/data/traces/record.py) captured with
`commbench capture -- torchrun ...`: its steps' collectives and bytes equal what DeepSpeed's comms
logger recorded in the same run, and the Execution Trace of the same steps reads into the same."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from commbench.core.tracereaders import read_any
from helpers import cb, clean_env, run_group

pytestmark = pytest.mark.integration

RECORD = Path(__file__).resolve().parents[1] / "data" / "traces" / "record.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _env() -> dict[str, str]:
    return {**clean_env(), "OMP_NUM_THREADS": "1"}


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not importable")
def test_deepspeed_run_captured_equals_comms_logger_and_execution_trace(tmp_path):
    out = tmp_path / "job.trace"
    # a hang guard, not a speed bound: on a machine whose DeepSpeed has never run, the job first JIT-builds
    # cpu_adam (~80 s on 2 busy cores; a fresh CI clone at 989c5fe timed out at 120 s mid-training)
    proc = cb("capture", "--out", str(out), "--", *TORCHRUN, str(RECORD), str(tmp_path), env=_env(), timeout=360,
              cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"\ncapture: {out}: 2 of 2 ranks, " in proc.stdout  # after the job's own output
    assert not (tmp_path / "job.trace.parts").exists()
    captured = read_any([out])
    logged = read_any(sorted(tmp_path.glob("dscomms_rank*.json")))
    executed = read_any(sorted(tmp_path.glob("et_rank*.json")))
    for rank in (0, 1):
        want = captured.totals(rank, step_only=True)
        assert set(want) == {"all_reduce", "all_gather"} and want["all_reduce"][0] == 8
        ds = logged.totals(rank)
        assert ds.pop("barrier") == (1, 0)  # log_summary's own, after the steps
        assert ds == want
        assert executed.totals(rank) == want
        steps = [o for o in captured.rank_ops(rank) if o.step is not None]
        assert [(o.op, o.bytes) for o in steps] == [(o.op, o.bytes) for o in executed.rank_ops(rank)]


WORKER = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    from commbench.integrations.capture import capture, step
    dist.init_process_group("gloo")
    r = dist.get_rank()
    t = torch.ones(256)
    with capture(sys.argv[1]):
        step(0)
        dist.all_reduce(t)
        dist.all_to_all_single(torch.empty(300 if r == 0 else 212), t, [150, 150] if r == 0 else [106, 106],
                               [150, 106])
        (dist.isend if r == 0 else dist.irecv)(t[:8], 1 - r).wait()
        dp = dist.new_group([0, 1], group_desc="dp")
        dist.broadcast(t.half(), 1, group=dp, async_op=True).wait()
    dist.all_reduce(t)  # after the block: not recorded
    dist.destroy_process_group()
""")


def test_context_manager_records_every_rank_in_one_file(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(WORKER)
    out = tmp_path / "cm.trace"
    proc = run_group([*TORCHRUN, str(script), str(out)], 120, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = read_any([out])
    assert t.world_size == 2 and t.meta["missing_ranks"] == []
    dp = next(g for g in t.groups.values() if g.desc == "dp")
    got = [(o.op, o.call, o.bytes_in, o.bytes_out, o.dtype, o.async_op, o.peer, o.group, o.in_splits)
           for o in t.rank_ops(1)]
    assert got == [
        ("all_reduce", "all_reduce", 1024, 1024, "float32", False, None, "0", None),
        ("all_to_all", "all_to_all_single", 1024, 848, "float32", False, None, "0", (150, 106)),
        ("recv", "irecv", 0, 32, "float32", True, 0, "0", None),
        ("broadcast", "broadcast", 512, 512, "float16", True, 1, dp.id, None),
    ]
    assert {o.step for o in t.ops} == {0} and len(t.rank_ops(0)) == 4


def test_capture_passes_the_job_exit_code_and_refuses_an_existing_out(tmp_path):
    job = tmp_path / "fails.py"
    job.write_text("import sys, torch.distributed\nsys.exit(5)\n")
    proc = cb("capture", "--out", str(tmp_path / "f.trace"), "--", sys.executable, str(job), env=_env())
    assert proc.returncode == 5 and not (tmp_path / "f.trace").exists()
    (tmp_path / "x.trace").write_text("keep")
    proc = cb("capture", "--out", str(tmp_path / "x.trace"), "--", sys.executable, "-c", "pass", env=_env())
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "already exists" in proc.stderr
    assert (tmp_path / "x.trace").read_text() == "keep"
    proc = cb("capture", "--out", str(tmp_path / "n.trace"), "--", "no-such-program-xyz", env=_env())
    assert proc.returncode == 2 and "is not a program on PATH" in proc.stderr and proc.stderr.count("\n") == 1
