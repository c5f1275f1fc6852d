"""Record the lab trace in this folder: one 2-rank gloo job (CPU, one rank per lab host) running the
real DeepSpeed engine (ZeRO-2, tests/data/ds_config/zero2_bucket5e8_fp16.json adapted to 2 CPU
ranks as record.py adapts it, one micro-batch a step), on a synthetic transformer large enough
that at 1gbit each step's collectives are bandwidth-bound (about 4 MB of bf16 gradients
all-reduced and the updated partitions all-gathered). Steps are marked for `commbench capture`;
a first, unmarked step takes the engine's first-call costs out of the recorded ones. Run it as
(README.md), as root:

    commbench lab up --nodes 2 --rate 1gbit --subnet 10.228.0.0/24
    commbench capture --out lab_zero2_1gbit.trace -- commbench lab run -- python record_lab.py
    commbench lab down
"""

import json
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist

from commbench.integrations import capture
from commbench.integrations.deepspeed import adapt as dsadapt
from commbench.integrations.deepspeed.training import build_model

CONFIG = Path(__file__).resolve().parents[1] / "ds_config" / "zero2_bucket5e8_fp16.json"
STEPS, GAS, MICRO, SHAPE = 6, 1, 2, dict(layers=2, hidden=256, vocab=1000, seq=16)

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
doc = json.loads(CONFIG.read_text())
doc.update(train_batch_size=MICRO * GAS * world, train_micro_batch_size_per_gpu=MICRO, gradient_accumulation_steps=GAS)
cfg, _ = dsadapt.adapt_for(doc, world, "cpu")
cfg["steps_per_print"] = 1 << 30
torch.manual_seed(0)
model = build_model(**SHAPE)
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
gen = torch.Generator().manual_seed(rank)


def train_step() -> None:
    tokens = torch.randint(SHAPE["vocab"], (MICRO, SHAPE["seq"]), generator=gen)
    loss = engine(tokens, tokens)
    engine.backward(loss)
    engine.step()


capture.step(None)  # the warm-up step: first calls allocate buckets and build the optimizer state
train_step()
for step in range(STEPS):
    capture.step(step)
    train_step()
capture.step(None)
dist.destroy_process_group()
