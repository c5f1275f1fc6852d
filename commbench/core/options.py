"""RunOptions: what every workload shares (iteration policy, failure bounds, where results go).

Stored as JSON with every result row (column `plan`, with the workload's own fields), and the one
home of these defaults: the command line's shared options read them from here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

# Calls in one captured CUDA graph (--cuda-graph): nccl-tests -G captures its -n iterations (20 by
# default) and launches that graph; one replay of 20 calls hides the host's launch cost as its does.
GRAPH_OPS = 20
# The most timed iterations one point may take (-n, --min-iters, --max-iters): also the most
# per-iteration samples a results row can hold (core/filecheck.py refuses files with more).
MAX_ITERATIONS = 10_000_000


@dataclass
class RunOptions:
    """What every workload shares: iteration policy, failure bounds, where results go."""

    warmup: int = 5
    iters: int | None = None  # None: adaptive
    time_budget: float = 0.05  # adaptive: the most seconds of timed iterations per point (benchmarks/README.md)
    precision: float = 0.03  # adaptive: stop once the median's 95% CI half-width is this fraction (0: fill the budget)
    min_iters: int = 10
    max_iters: int = 2000
    repetitions: int = 1
    check: bool = True
    wire: bool = True  # NIC and port counters around every point (harness/wire.py)
    timeout: float = 300.0
    backend: str = "auto"
    label: str = ""
    out: str = "results"
    run_id: str = ""
    workload: str = "sweep"
    # --bind (core/binding.py): local ranks' CPUs; under an external launcher only when given
    bind: str = "auto"
    progress: str = "auto"  # --progress (core/progress.py): rank 0's live bar; how a run looks, not what it measures
    # --cuda-graph (sweep; as nccl-tests -G): calls per captured CUDA graph, each replay one sample; 0: plain loop
    cuda_graph: int = 0
    iface: str | None = None  # --iface: the traffic interface (GLOO/NCCL_SOCKET_IFNAME), and --mtu's
    # settings axes (--env, --mtu; core/settings.py as_plan): the whole grid once per combination and
    # repetition, the combinations in turn within each repetition (harness/settings.py)
    axes: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunOptions:
        return cls(**json.loads(text))
