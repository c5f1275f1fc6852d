"""RunOptions: what every workload shares (iteration policy, failure bounds, where results go).

Stored as JSON with every result row (column `plan`, with the workload's own fields), and the one
declaration of the shared command-line options: a field made with `flag` carries its default and
how the command line spells and checks it (Flag), from which cli/options.py builds the click
options and fills RunOptions, and workloads/tune.py writes a child run's flags.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Mapping

from commbench.core import workloadspec

# Calls in one captured CUDA graph (--cuda-graph): nccl-tests -G captures its -n iterations (20 by
# default) and launches that graph; one replay of 20 calls hides the host's launch cost as its does.
GRAPH_OPS = 20
# The most timed iterations one point may take (-n, --min-iters, --max-iters): also the most
# per-iteration samples a results row can hold (core/filecheck.py refuses files with more).
MAX_ITERATIONS = 10_000_000
WEEK_S = 7 * 24 * 3600  # the longest timeout any command takes

FLAG = "flag"  # the key of a field's Flag in its metadata

# --time-budget auto and --precision auto (their defaults), resolved once per run (resolve_auto).
# NCCL on a GPU times tightly: 3% within 0.05 s a point. gloo on a shared CPU is bimodal (a rank
# descheduled for a 4 ms tick): on a 2-core machine 3% within 0.05 s reached 0 of the default sweep's
# 24 points and 5% within 2 s reaches about 21 in 23 s (benchmarks/README.md, "Precision"). Layout and
# --split groups fill their budget (no early stop) and pairs times every pair: they keep NCCL's pair.
AUTO = "auto"


@dataclass(frozen=True)
class Target:
    """What "auto" stands for: a time budget, a precision, why, and how to ask for tighter."""

    time_budget: float
    precision: float
    why: str
    tighter: str


AUTO_TARGETS = {"nccl": Target(0.05, 0.03, "what NCCL's timings on a GPU allow", "--precision 0.01"),
                "gloo": Target(2.0, 0.05, "what timings on a shared CPU allow", "--precision 0.03 --time-budget 5")}
_GLOO, _NCCL = AUTO_TARGETS["gloo"], AUTO_TARGETS["nccl"]  # named in the help
AUTO_WIDE = workloadspec.names(backend_target=True)  # the workloads that take their backend's Target; the rest NCCL's


@dataclass(frozen=True)
class Flag:
    """How the command line spells and checks a shared run option (core has no click: the CLI
    turns this into its click option).

    kind: "int" or "float" (a number in [low, high], an end open where asked; `rule` replaces the
    range's wording, `example` is the fix's value), "switch" (names is ("--on/--off",)), "choice"
    (one of `choices`), "bind" (core/binding.py's MODES, checked there), "progress" (one of
    core/progress.py's MODES; both named by kind so that this module imports neither), "text"
    (free text stored in results, at most `most` characters; None: the CLI's limit) or "path"
    (any text)."""

    names: tuple[str, ...]
    kind: str
    help: str | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    rule: str | None = None
    example: str | None = None
    choices: tuple[str, ...] = ()
    most: int | None = None
    show_default: bool = True
    # "auto" is a value too (the default on the command line), resolved per backend (resolve_auto)
    auto: bool = False
    # The commands that take it (cli/options.py run_options, by the command's name); () every
    # measuring command. --layout, --order, --group and --solo are sweep's, zero's and buckets' (these
    # two run in the data-parallel groups, core/layout.py data_parallel); --split is sweep's.
    commands: tuple[str, ...] = ()

    def taken_by(self, command: str) -> bool:
        return not self.commands or command in self.commands


# The commands that run in parallel groups (--layout; docs/LAYOUTS.md); replay: its trace in every
# data-parallel group at once (--layout and --order only)
_GROUPED = workloadspec.names(option=workloadspec.GROUPS)
_LAID_OUT = workloadspec.names(option=workloadspec.LAYOUT)
_SPLIT = workloadspec.names(option=workloadspec.SPLIT)
_METRICS = workloadspec.names(option=workloadspec.METRICS)


def flag(default: Any, *names: str, kind: str, **how: Any) -> Any:
    """A RunOptions field the command line sets: its default, and its Flag."""
    return field(default=default, metadata={FLAG: Flag(names, kind, **how)})


@dataclass
class RunOptions:
    """What every workload shares: iteration policy, failure bounds, where results go. The fields
    made with `flag` are the shared options, in the order the help lists them."""

    warmup: int = flag(5, "-w", "--warmup", kind="int", low=0, high=100_000, example="5",
                       help="Warm-up iterations per point.")
    iters: int | None = flag(None, "-n", "--iters", kind="int", low=1, high=MAX_ITERATIONS, example="100",
                             show_default=False, help="Timed iterations per point [default: adaptive].")
    # adaptive: the most seconds of timed iterations per point (benchmarks/README.md)
    # (the command line's default is auto: resolve_auto; a RunOptions made in code gets NCCL's pair)
    time_budget: float = flag(0.05, "--time-budget", kind="float", low=0, high=3600, low_open=True, example="2",
                              auto=True, help="Most seconds of timed iterations per point (adaptive); auto: "
                                              f"{_GLOO.time_budget:g} with gloo (a sweep), else {_NCCL.time_budget:g}.")
    # adaptive: stop once the median's 95% CI half-width is this fraction (0: fill the budget)
    precision: float = flag(0.03, "--precision", kind="float", low=0, high=1, high_open=True, example="0.03",
                            rule="must be 0 (off), a fraction below 1 or auto", auto=True,
                            help="Adaptive: stop a point once its median is known to this fraction (95% CI "
                                 f"half-width); 0 fills --time-budget; auto: {_GLOO.precision:g} with gloo (a sweep), "
                                 f"else {_NCCL.precision:g}.")
    min_iters: int = flag(10, "--min-iters", kind="int", low=1, high=MAX_ITERATIONS, example="10")
    max_iters: int = flag(2000, "--max-iters", kind="int", low=1, high=MAX_ITERATIONS, example="2000")
    repetitions: int = flag(1, "-R", "--repetitions", kind="int", low=1, high=1000, example="5",
                            help="Run the whole grid this many times (rows carry their repetition); with "
                                 "--env/--mtu settings each repetition measures every setting in turn, every other "
                                 "one reversed (A B, B A, ...).")
    check: bool = flag(True, "--check/--no-check", kind="switch", help="Check every output, like nccl-tests' #wrong.")
    # NIC and port counters around every point (harness/wireprobe.py)
    wire: bool = flag(True, "--wire/--no-wire", kind="switch",
                      help="Read NIC, port and TCP counters before and after every point (the wire column).")
    backend: str = flag("auto", "--backend", kind="choice", choices=("auto", "nccl", "gloo"),
                        help="auto: nccl when CUDA GPUs are visible, else gloo.")
    # core/binding.py: local ranks' CPUs; under an external launcher only when given
    bind: str = flag("auto", "--bind", kind="bind",
                     help="CPUs of each local rank: auto (the cores of each GPU's NUMA node with NCCL, else "
                          "cores), cores (an even share of this process's CPUs each), numa (a NUMA node each), "
                          "none (the scheduler's). Under torchrun/srun/mpirun only when given.")
    # the traffic interface (GLOO/NCCL_SOCKET_IFNAME), and --mtu's; a comma list: one name a local
    # rank (core/ifaces.py), room for 16 names of 15 characters
    iface: str | None = flag(None, "--iface", kind="text", most=256, show_default=False,
                             help="Network interface for the traffic (sets GLOO_SOCKET_IFNAME and "
                                  "NCCL_SOCKET_IFNAME); a comma list eth0,eth1 gives local rank i the i-th "
                                  "(rail-aligned ranks; not gloo's own list of devices, docs/SETTINGS.md).")
    timeout: float = flag(300.0, "--timeout", kind="float", low=0, high=WEEK_S, low_open=True, example="300",
                          help="Seconds any collective may take before the run fails.")
    out: str = flag("results", "--out", kind="path", help="Folder for <run_id>.parquet, or a .parquet file name.")
    label: str = flag("", "--label", kind="text", show_default=False,
                      help="Free text stored with every row (e.g. mtu9000-after).")
    # core/progress.py: rank 0's live bar; how a run looks, not what it measures
    progress: str = flag("auto", "--progress", kind="progress",
                         help="Live progress bar on rank 0: auto (only on a terminal that no launcher such as "
                              "mpirun, srun or torchrun handed out, not with TERM=dumb or CI set), on (whenever "
                              "stdout is a terminal), off (plain lines).")
    # --layout and its kin (core/layout.py; docs/LAYOUTS.md): the ranks cut into parallel groups, every
    # group of the chosen dimensions running at once
    layout: str | None = flag(None, "--layout", kind="text", most=200, show_default=False, commands=_LAID_OUT,
                              help="Cut the ranks into parallel groups, e.g. tp=2,pp=2,dp=auto (tp, cp, ep, dp, "
                                   "pp; Megatron-LM's order, tp fastest): every group of the --group dimensions "
                                   "runs at once, each its own row (docs/LAYOUTS.md); zero, buckets: their step "
                                   "in every dp group at once, over P / (tp x pp); replay: the trace in every dp "
                                   "group at once, each op 1 / (tp x pp) of its bytes.")
    order: str | None = flag(None, "--order", kind="text", most=200, show_default=False, commands=_LAID_OUT,
                             help="The rank order of --layout, fastest first [default: tp-cp-ep-dp-pp].")
    group: str | None = flag(None, "--group", kind="text", most=200, show_default=False, commands=_GROUPED,
                             help="With --layout: the dimensions whose groups run, each with its collective, e.g. "
                                  "dp or dp:all_reduce,tp:all_gather [default: dp; tp/dp all_reduce, cp "
                                  "all_gather, ep all_to_all, pp send/recv between neighbouring stages].")
    split: str | None = flag(None, "--split", kind="text", most=200, show_default=False, commands=_SPLIT,
                             help="nccl-tests' NCCL_TESTS_SPLIT: groups of ranks by color, e.g. 'MOD 2', "
                                  "'AND 0x7', 'DIV 8'; every group runs --collective at once.")
    solo: bool = flag(False, "--solo/--no-solo", kind="switch", commands=_GROUPED,
                      help="With --layout or --split: also measure each group alone (A B B A), and give each "
                           "group's contention factor (concurrent / solo busbw).")
    # analysis/export/metrics.py write_metrics, on rank 0 after the closing lines (docs/METRICS.md)
    metrics: str | None = flag(None, "--metrics", kind="path", show_default=False, commands=_METRICS,
                               help="When the run finishes, write its Prometheus metrics to FILE (node_exporter's "
                                    "textfile format, replaced atomically; docs/METRICS.md).")
    run_id: str = ""
    workload: str = "sweep"
    # the fields that were "auto" on the command line (resolve_auto): the closing lines say so
    auto_fields: list[str] = field(default_factory=list)
    # --cuda-graph (sweep; as nccl-tests -G): calls per captured CUDA graph, each replay one sample; 0: plain loop
    cuda_graph: int = 0
    # settings axes (--env, --mtu; core/settings.py as_plan): the whole grid once per combination and
    # repetition, the combinations in turn within each repetition (harness/settingpasses.py)
    axes: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunOptions:
        return cls(**json.loads(text))


def shared_options(command: str | None = None) -> list[tuple[str, Any, Flag]]:
    """(field name, default, Flag) of every shared command-line option (those `command` takes),
    in the help's order."""
    return [(f.name, AUTO if f.metadata[FLAG].auto else f.default, f.metadata[FLAG])
            for f in dataclasses.fields(RunOptions)
            if FLAG in f.metadata and (command is None or f.metadata[FLAG].taken_by(command))]


def auto_target(backend: str, workload: str, grouped: bool = False) -> Target:
    """What "auto" stands for: the backend's Target (AUTO_TARGETS) for a sweep whose points stop at
    the target; NCCL's for the rest (groups that fill their budget, pairs' every pair, buckets, zero)."""
    wide = workload in AUTO_WIDE and not grouped
    return AUTO_TARGETS.get(backend, AUTO_TARGETS["nccl"]) if wide else AUTO_TARGETS["nccl"]


def resolve_auto(fields: dict[str, Any], backend: str, workload: str) -> dict[str, Any]:
    """`fields` (RunOptions' by name) with time_budget and precision given as "auto" made numbers,
    once per run, and auto_fields naming them."""
    target = auto_target(backend, workload, bool(fields.get("layout") or fields.get("split")))
    auto = [name for name in ("time_budget", "precision") if fields.get(name) == AUTO]
    return dict(fields, **{name: getattr(target, name) for name in auto}, auto_fields=auto)


def target_note(plan: Mapping[str, Any]) -> str:
    """Which target applied and why, where --precision was auto; '' otherwise."""
    if "precision" not in (plan.get("auto_fields") or ()):
        return ""
    target = auto_target(str(plan.get("backend") or ""), str(plan.get("workload") or "sweep"),
                         bool(plan.get("layout") or plan.get("split")))
    return (f"{float(plan['precision']):.0%} within {float(plan['time_budget']):g} s a point: --precision auto on "
            f"{plan.get('backend')}, {target.why}; for tighter, e.g. {target.tighter}")


def child_flags(run: dict[str, Any], leave: tuple[str, ...] = ()) -> list[str]:
    """The shared options of `run` (RunOptions fields) as a child command's flags: every one but
    those in `leave`, and but those unset (None or empty)."""
    flags: list[str] = []
    for name, _, how in shared_options():
        value = run.get(name)  # auto as its parent resolved it: tune's children keep its 0.05 s, not gloo's 2 s
        if name in leave or value is None or value == "":
            continue
        if how.kind == "switch":
            on, off = how.names[0].split("/")
            flags.append(on if value else off)
        else:
            flags += [how.names[0], str(value)]
    return flags
