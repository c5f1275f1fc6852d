"""The shipped Slurm templates say only what is true (#19): network-change.sbatch repeats the
grid often enough for compare to decide, every template asks for whole nodes and has a place for
the environment setup, and none promises a command that exists as missing."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from commbench.cli.measure import CPU_MAX_BYTES, GPU_MAX_BYTES
from commbench.core import stats, units, vocab
from commbench.harness.plan import size_grid

SLURM = Path(__file__).resolve().parents[2] / "slurm"
TEMPLATES = sorted(SLURM.glob("*.sbatch"))


def default_args(text: str) -> list[str]:
    m = re.search(r'^DEFAULT_ARGS="(.*)"', text, re.MULTILINE)
    assert m, "DEFAULT_ARGS not found"
    assert re.search(r"^COMMBENCH_ARGS=\$\{COMMBENCH_ARGS:-\$DEFAULT_ARGS\}", text, re.MULTILINE)
    return shlex.split(m.group(1))


def test_network_change_repeats_enough_for_compare_to_decide_its_default_grid():
    args = default_args((SLURM / "network-change.sbatch").read_text())
    reps = int(args[args.index("-R") + 1])
    entries = vocab.resolve(args[args.index("--collective") + 1])
    points = 0
    for max_bytes in (CPU_MAX_BYTES, GPU_MAX_BYTES):  # the default grid on a CPU and on a GPU cluster
        sizes = size_grid(8, units.parse_size(max_bytes), 2.0)
        points = max(points, len(sizes) * sum(len(c.placements) for c in entries))
    # before: -R 3, which compare can never decide with (1 / C(6, 3) = 0.05 is not below 0.05)
    assert reps >= stats.repetitions_needed(0.05, points), (reps, points)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_template_asks_for_whole_nodes_and_has_an_environment_line(template):
    text = template.read_text()
    assert re.search(r"^#SBATCH --exclusive\b", text, re.MULTILINE), "whole nodes: nobody else's traffic"
    assert re.search(r"^# ?module load ", text, re.MULTILINE) and "activate" in text


@pytest.mark.parametrize("doc", TEMPLATES + [SLURM / "README.md"], ids=lambda p: p.name)
def test_no_template_says_compare_does_not_exist(doc):
    assert "does not exist yet" not in doc.read_text()


def test_network_change_ends_with_compare_s_exit_code():
    text = (SLURM / "network-change.sbatch").read_text()
    assert re.search(r"\bcompare\b", text) and re.search(r"^exit \"?\$", text, re.MULTILINE)


@pytest.mark.parametrize("doc", [*(SLURM / n for n in ("commbench.sbatch", "network-change.sbatch")),
                                 SLURM / "README.md"], ids=lambda p: p.name)
def test_the_templates_and_the_readme_say_commbench_args_replaces(doc):
    text = doc.read_text()
    assert re.search(r"COMMBENCH_ARGS.{0,120}(\bREPLACES\b|\*\*replaces\*\*)", text, re.DOTALL), doc.name
    assert "not added to them" in text
