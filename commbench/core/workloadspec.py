"""The workloads: each kind of rows a results file holds, by its `workload` column's name, with
the facts other modules ask of it (whose ranks measured it, which shared options it takes, a row
per parallel group or not, how its rows are drawn). Every list of workloads derives from these
entries (tests/unit/test_workloads_once.py fails on one written out elsewhere), as the
collectives' do from core/vocab.py; a new workload is one entry here. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# The families of shared options (core/options.py's Flag.commands come from them):
LAYOUT = "layout"  # --layout, --order: the ranks cut into parallel groups, a row per group
GROUPS = "groups"  # --group, --solo: which dimensions' groups run, and each alone (the contention factor)
SPLIT = "split"  # --split: nccl-tests' NCCL_TESTS_SPLIT groups
METRICS = "metrics"  # --metrics: Prometheus metrics written when the run ends

# How a workload's rows are drawn (plot, report):
CURVE = "curve"  # a row is one collective at one size: busbw against size, a line per setting
STEPS = "steps"  # a row is one step of many collectives (n_collectives), per step setting
LINKS = "links"  # a row is one link between two ranks: the pairs map


@dataclass(frozen=True)
class WorkloadSpec:
    name: str  # the `workload` column's value, and the command that writes it
    measured: bool = True  # commbench's own ranks measured it (not an imported log)
    options: frozenset[str] = frozenset()  # the families of shared options it takes, besides every command's
    # Its points are the harness's timing loop under the stop rule: --precision judges them, the
    # closing lines give a median table, and each rank's own time and arrival skew are kept.
    stop_rule: bool = False
    # The backend's own precision target (core/options.py AUTO_TARGETS) with --precision auto; the
    # others take NCCL's, so that a step of many calls is not held to a CPU's looser target.
    backend_target: bool = False
    drawn_as: str = CURVE

    @property
    def grouped(self) -> bool:
        """A row per parallel group under --layout (group_dim, group_index, ...; docs/LAYOUTS.md)."""
        return LAYOUT in self.options

    def takes(self, family: str) -> bool:
        return family in self.options


WORKLOADS: tuple[WorkloadSpec, ...] = (
    WorkloadSpec("sweep", options=frozenset({LAYOUT, GROUPS, SPLIT, METRICS}), stop_rule=True, backend_target=True),
    WorkloadSpec("buckets", options=frozenset({LAYOUT, GROUPS}), stop_rule=True, drawn_as=STEPS),
    WorkloadSpec("zero", options=frozenset({LAYOUT, GROUPS}), stop_rule=True, drawn_as=STEPS),
    # deepspeed: `zero --engine deepspeed`, the real engine's optimizer steps (a step row, and a row per
    # op type its comms logger saw): --steps of them, not the stop rule; every rank in one group (no
    # --layout); step rows, drawn where buckets' are (not a curve: not gated, predicted from or exported)
    WorkloadSpec("deepspeed", drawn_as=STEPS),
    WorkloadSpec("pairs", drawn_as=LINKS),
    # replay: its trace in every data-parallel group at once (--layout and --order only: no --solo)
    WorkloadSpec("replay", options=frozenset({LAYOUT}), drawn_as=STEPS),
    WorkloadSpec("nccl-tests", measured=False),
)

BY_NAME = {w.name: w for w in WORKLOADS}
NAMES = tuple(w.name for w in WORKLOADS)


def names(measured: bool | None = None, option: str | None = None, stop_rule: bool | None = None,
          backend_target: bool | None = None, drawn_as: str | None = None) -> tuple[str, ...]:
    """The workloads with every fact asked for, in table order."""
    return tuple(w.name for w in WORKLOADS
                 if (measured is None or w.measured == measured) and (option is None or w.takes(option))
                 and (stop_rule is None or w.stop_rule == stop_rule)
                 and (backend_target is None or w.backend_target == backend_target)
                 and (drawn_as is None or w.drawn_as == drawn_as))

