"""The capture's pieces that need no rank: each wrapped function's extractor takes torch's own
argument names (DeepSpeed calls them by keyword), what it reports for real tensors, the shim
`commbench capture` puts on PYTHONPATH, and the command's bad input."""

from __future__ import annotations

import ast
import inspect

import pytest
import torch
import torch.distributed as dist

from commbench.cli.capture import SHIM
from commbench.integrations.capture import FUNCTIONS, PARTS_ENV


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_extractor_takes_torch_argument_names(name):
    fn = getattr(dist, name)
    want = list(inspect.signature(fn).parameters)
    got = [p for p in inspect.signature(FUNCTIONS[name][1]).parameters if p not in ("a", "k")]
    assert want[: len(got)] == got


def test_extractors_report_bytes_peer_async_and_splits():
    t = torch.ones(10, dtype=torch.bfloat16)
    out = torch.empty(20, dtype=torch.bfloat16)
    assert FUNCTIONS["all_gather_into_tensor"][1](output_tensor=out, input_tensor=t, async_op=True)[:2] == (20, 40)
    assert FUNCTIONS["all_gather_into_tensor"][1](out, t, None, True)[4] is True
    assert FUNCTIONS["reduce_scatter_tensor"][1](t, out)[:2] == (40, 20)
    assert FUNCTIONS["isend"][1](t, 3)[:2] + FUNCTIONS["isend"][1](t, 3)[4:6] == (20, 0, True, 3)
    a2a = FUNCTIONS["all_to_all_single"][1](out, t, [12, 8], [6, 4])
    assert a2a[:2] == (20, 40) and a2a[6:] == ((6, 4), (12, 8))
    assert FUNCTIONS["monitored_barrier"][1](None, 30)[4] is False  # a timeout is not async_op


def test_shim_is_python_and_reads_the_parts_variable():
    text = SHIM.format(env=PARTS_ENV)
    ast.parse(text)
    assert f'os.environ["{PARTS_ENV}"]' in text and "sitecustomize" in text


def test_capture_without_a_command_is_one_line(cli, tmp_path):
    r = cli("capture", "--out", str(tmp_path / "j.trace"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "capture needs a command after --" in r.stderr
    assert list(tmp_path.iterdir()) == []


class _Engine:
    """DeepSpeedEngine's step counting as the capture sees it: global_steps grows at a boundary."""

    def __init__(self, gas):
        self.global_steps, self.gas, self.micro = 0, gas, 0

    def forward(self, x):
        return x

    def step(self):
        self.micro += 1
        if self.micro % self.gas == 0:
            self.global_steps += 1


def test_deepspeed_steps_label_ops_unless_the_job_marks_its_own(tmp_path, monkeypatch):
    import types

    from commbench.integrations import capture as cap

    module = types.SimpleNamespace(DeepSpeedEngine=type("DeepSpeedEngine", (_Engine,), {}))
    cap.mark_deepspeed_steps(module)
    rec = cap.Recorder(tmp_path)
    monkeypatch.setattr(cap, "_recorder", rec)
    engine, seen = module.DeepSpeedEngine(gas=2), []
    for _ in range(4):  # 2 optimizer steps of 2 micro-batches
        engine.forward(1)
        seen.append(rec.step)
        engine.step()
    assert seen == [0, 0, 1, 1] and rec.step == 2
    cap.step(7)
    engine.forward(1)
    engine.step()
    assert rec.step == 7

