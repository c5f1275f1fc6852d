"""Record the real traces in this folder: one 2-rank gloo job (CPU) running the real DeepSpeed
engine (ZeRO-2, tests/data/ds_config/zero2_bucket5e8_fp16.json adapted to 2 CPU ranks, a 1-layer
synthetic transformer), for STEPS optimizer steps, under torch.profiler.ExecutionTraceObserver and
DeepSpeed's comms logger, marking steps for `commbench capture`. Run it as (README.md):

    commbench capture --out ds_zero2.trace -- torchrun --nproc_per_node 2 record.py OUT_DIR

Writes OUT_DIR/et_rank{R}.json (the Execution Trace of the steps) and OUT_DIR/dscomms_rank{R}.json
(deepspeed.comm.log_summary(return_dict=True) after the steps).
"""

import json
import sys
from pathlib import Path

import deepspeed
import deepspeed.comm as dscomm
import torch
import torch.distributed as dist
from torch.profiler import ExecutionTraceObserver

from commbench.integrations import capture
from commbench.integrations.deepspeed import adapt as dsadapt
from commbench.integrations.deepspeed.training import build_model

CONFIG = Path(__file__).resolve().parents[1] / "ds_config" / "zero2_bucket5e8_fp16.json"
STEPS, GAS, MICRO, SHAPE = 2, 2, 2, dict(layers=1, hidden=32, vocab=64, seq=16)

out = Path(sys.argv[1])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
doc = json.loads(CONFIG.read_text())
doc.update(train_batch_size=MICRO * GAS * world, train_micro_batch_size_per_gpu=MICRO, gradient_accumulation_steps=GAS)
cfg, _ = dsadapt.adapt_for(doc, world, "cpu")
cfg["comms_logger"] = {"enabled": True, "verbose": False, "prof_all": True, "debug": False}
cfg["steps_per_print"] = 1 << 30
torch.manual_seed(0)
model = build_model(**SHAPE)
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
dscomm.comms_logger.comms_dict.clear()  # the steps only, as the capture's marked steps
et = ExecutionTraceObserver().register_callback(str(out / f"et_rank{rank}.json"))
gen = torch.Generator().manual_seed(rank)
et.start()
for step in range(STEPS):
    capture.step(step)
    for _ in range(GAS):
        tokens = torch.randint(SHAPE["vocab"], (MICRO, SHAPE["seq"]), generator=gen)
        loss = engine(tokens, tokens)
        engine.backward(loss)
        engine.step()
capture.step(None)
et.stop()
et.unregister_callback()
summary = dscomm.log_summary(return_dict=True)
(out / f"dscomms_rank{rank}.json").write_text(json.dumps(summary, indent=1))
dist.destroy_process_group()
