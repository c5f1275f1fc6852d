"""What a zero run changes in the user's ds_config, in one set of words for the schedule and the
engine paths (integrations/deepspeed/adapt.py asked_changes; issue #40 part 4)."""

from __future__ import annotations

from pathlib import Path

from commbench.integrations.deepspeed import config as dsconfig
from commbench.integrations.deepspeed import adapt as dsadapt

CONFIG = Path(__file__).parents[1] / "data" / "ds_config" / "zero2_bucket5e8_fp16.json"


def test_nothing_asked_nothing_said():
    cfg = dsconfig.load(CONFIG)
    assert (
        dsadapt.asked_changes(
            cfg, stages=[2], grad_accums=[8], reduce_buckets=[500_000_000], dtype="float16", overlap=True
        )
        == []
    )
    assert dsadapt.asked_changes(cfg, grad_accums=[None]) == []  # the engine with the config's accumulation


def test_every_setting_asked_for_is_one_line():
    cfg = dsconfig.load(CONFIG)
    lines = dsadapt.asked_changes(
        cfg, stages=[0, 2], grad_accums=[4], reduce_buckets=[1_000_000], dtype="bfloat16", overlap=False
    )
    assert lines == [
        "zero_optimization.stage 2 -> 0, 2 (the stage asked for)",
        "gradient_accumulation_steps 8 -> 4 (the value asked for)",
        "zero_optimization.reduce_bucket_size 5e+08 -> 1e+06 (--bucket-size)",
        "precision float16 -> bfloat16 (-d; the same bytes on the wire when both are 2-byte)",
        "zero_optimization.overlap_comm true -> false (--overlap)",
    ]
