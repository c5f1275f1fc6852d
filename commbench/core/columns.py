"""The column registry: every column of a results file, declared once.

A column's Arrow type, unit, meaning, when it is filled, which workloads write it, the schema
version that added it and the roles it plays in analysis live here and nowhere else. Derived from
it: the parquet schema (core/results.py), every list of columns analysis reads by role (the point
key, what describes a run, what gate matches on, the heavy per-row lists), the type check at the
door (core/filecheck.py) and the column table of docs/RESULTS.md (tests/unit/test_columns.py
fails when the two differ: regenerate with `python -m commbench.core.columns`).

Schema versions: 1 is every file written before the registry (columns were added to it one by
one, so a version-1 file may lack any but the required ones); 2 is the registry's first: every
column typed as declared here; 3 adds `group_index`; 4 adds sweep's parallel groups (`group_dim`,
`group_ranks`, `group_hosts`, `concurrent`, `contention`; docs/LAYOUTS.md); 5 adds replay's
(`trace_step`, `trace_steps`, `trace_op`, `trace_group`, `recorded_us`, `trace_file`; docs/REPLAY.md).
A column added later says so in `since`, and the version rises.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from commbench.core import workloadspec

SCHEMA_VERSION = 5

# Roles: what analysis does with a column (names_with(role) gives them, in registry order).
KEY = "key"  # identifies a point across runs: compare pairs points on it, gate's entries match on part of it
IN_RUN = "in_run"  # tells points of one run apart besides the key (a run's own summary)
GATE = "gate"  # a band entry (gate) matches on it
LINE = "line"  # a curve's identity in plot and report
TOPOLOGY = "topology"  # how many ranks on how many hosts
LINK = "link"  # the two ends of a pairs link
RUN = "run"  # describes a run (the same on every row of it): compare's warnings and differences
WARN = "warn"  # should be the same on both sides of a comparison: a difference makes it suspect
DIFFERS = "differs"  # expected to differ between sides (often the point of the comparison): shown
HEAVY = "heavy"  # a list or a long JSON string a row: read only by what needs it
REQUIRED = "required"  # a file without it is not a results file

ALL_WORKLOADS = workloadspec.NAMES
MEASURED = workloadspec.names(measured=True)  # commbench's own ranks (not an imported log)


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str  # "" when none
    filled: str  # when it holds a value
    meaning: str
    roles: frozenset[str] = frozenset()
    writers: tuple[str, ...] = ALL_WORKLOADS
    since: int = 1
    # What a file without the column meant, per workload (an older file's rows): read as this value.
    absent: tuple[tuple[str, object], ...] = ()

    @property
    def key(self) -> bool:
        return KEY in self.roles


def _c(name: str, type_: pa.DataType, unit: str, filled: str, meaning: str, roles: str = "",
       writers: tuple[str, ...] = ALL_WORKLOADS, since: int = 1,
       absent: tuple[tuple[str, object], ...] = ()) -> Column:
    return Column(name, type_, unit, filled, meaning, frozenset(roles.split()), writers, since, absent)


_S, _I32, _I64, _F64, _B = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()

# The workloads that write a row per parallel group (--layout; docs/LAYOUTS.md)
_GROUPED = workloadspec.names(option=workloadspec.LAYOUT)  # replay: its op rows under --layout
_SOLO = workloadspec.names(option=workloadspec.GROUPS)  # --solo: the contention factor
_STOP_RULE = workloadspec.names(stop_rule=True)  # each rank's own times
_STEP_ROWS = workloadspec.names(drawn_as=workloadspec.STEPS)
_ZERO = ("zero", "deepspeed")  # a ZeRO stage's step: the schedule's, and the real engine's (zero --engine deepspeed)

REGISTRY: tuple[Column, ...] = (
    _c("run_id", _S, "", "always", "`YYYYMMDD-HHMMSS-xxxxxx`, one per run", "line run"),
    _c("label", _S, "", 'always ("" if none)', "`--label`", "line run differs"),
    _c("started_at", pa.timestamp("us", tz="UTC"), "", "always", "when the ranks were ready"),
    _c("collective", _S, "", "always", "canonical name (`all_reduce`, ...)", "key gate line required"),
    _c("dtype", _S, "", "always", "`float32`, `float16`, `bfloat16`, ...", "key gate line"),
    _c("op", _S, "", "reductions", "`sum`, `prod`, `max`, `min`, `avg`; null for non-reducing collectives",
       "key gate"),
    _c("root", _I32, "rank", "always",
       "root rank for broadcast/reduce, -1 otherwise (as nccl-tests prints); null in nccl-tests imports "
       "that do not print it", "in_run"),
    _c("size_bytes", _I64, "bytes", "always", "S, see above", "key gate required"),
    _c("count", _I64, "elements", "always", "nccl-tests' count column"),
    _c("in_place", _B, "", "always", "in-place (true) or out-of-place (false)", "key gate line"),
    _c("world_size", _I32, "ranks", "always", "ranks", "key gate topology run warn"),
    _c("nnodes", _I32, "hosts", "always", "distinct hosts", "key gate topology"),
    _c("group_index", _I32, "", "`sweep --layout`/`--split`, nccl-tests logs of a split run (NCCL_TESTS_SPLIT); "
       "null otherwise",
       "the rank group a row measured when the ranks ran in several groups at once; `world_size`, `nnodes` and "
       "`ranks_per_node` are then that group's, and busbw is taken with its size. sweep: the group's index among "
       "those of `group_dim`, in Megatron-LM's order (docs/LAYOUTS.md), or with `--split` its color, as "
       "nccl-tests numbers it; the per-rank lists (`rank_time_us`, "
       "`rank_skew_us`, `rank_cpus`, `rank_host`) are indexed by the rank's place in `group_ranks`, and `hosts` "
       "stays the run's. An nccl-tests split log prints the results of rank 0's group (its `Group` in the Rank "
       "lines, the color nccl-tests gave it), and `hosts` is that group's",
       "key", writers=(*_GROUPED, "nccl-tests"), since=3),
    _c("group_dim", _S, "",
       "`sweep --layout`/`--split`, `zero`/`buckets`/`replay --layout` (a replay's op rows), nccl-tests split logs "
       "(null otherwise)",
       "the parallel dimension whose groups ran: `tp`, `cp`, `ep`, `dp`, `pp` (`--group`), or `split` (`--split`, "
       "and an nccl-tests split log's rows, so compare pairs the two); part of the point", "key",
       writers=(*_GROUPED, "nccl-tests"), since=4),
    _c("group_ranks", _S, "", "as `group_dim`", "the group's ranks, comma-separated, in the group's own order "
       "(a pipeline's stages in order): `0,2`", writers=_GROUPED, since=4),
    _c("group_hosts", _S, "", "as `group_dim`", "the group's distinct hosts in the order of its ranks, "
       "comma-separated", writers=_GROUPED, since=4),
    _c("concurrent", _B, "", "as `group_dim`",
       "true: every group of `group_dim` ran at once (an nccl-tests split log's rows too); false: this group ran "
       "alone, the others idle (`--solo`). Part of the point", "key", writers=(*_GROUPED, "nccl-tests"), since=4),
    _c("contention", _F64, "", "`sweep --solo`, the concurrent rows (null otherwise)",
       "the group's contention factor at this point and repetition: its median busbw with every group running "
       "over its median busbw alone (the solo row's), from the same repetition's iterations; below 1: the "
       "groups slowed each other (docs/LAYOUTS.md, \"The contention factor\")", writers=_SOLO, since=4),
    _c("ranks_per_node", _I32, "ranks", "always", "most ranks on one host", "key topology run warn"),
    _c("backend", _S, "", "always", "`gloo` or `nccl`", "run warn"),
    _c("device", _S, "", "always", "`cpu` or `cuda`"),
    _c("device_name", _S, "", "always", "GPU model, or `cpu`", "run warn"),
    _c("launcher", _S, "", "always", "`local`, `torchrun`, `slurm`, `mpi`, `lab`"),
    _c("iters", _I32, "iterations", "always", "timed iterations of this point"),
    _c("warmup", _I32, "iterations", "always", "warm-up iterations of this point"),
    _c("repetition", _I32, "", "always", "0-based pass over the grid"),
    _c("time_us", _F64, "us", "always (NaN: a failed pairs link)",
       "median over iterations of the per-iteration max over ranks"),
    _c("time_us_min", _F64, "us", "always", "the fastest of the same samples"),
    _c("time_us_max", _F64, "us", "always", "the slowest of the same samples"),
    _c("time_us_p99", _F64, "us", "always", "the 99th percentile of the same samples"),
    _c("time_ci", _F64, "fraction", "runs since precision marks (null in older files, nccl-tests, and under 6 samples)",
       "how precisely `time_us` is known: its 95% confidence interval's half-width over `time_us` (order "
       "statistics of `samples_us`, distribution-free; the stop rule's `--precision` measure); algbw and busbw "
       "are known to the same fraction", writers=MEASURED),
    _c("algbw_GBps", _F64, "GB/s", "always", "S / `time_us`, see above"),
    _c("busbw_GBps", _F64, "GB/s", "always", "algbw x the collective's bus factor, see above", "required"),
    _c("wrong", _I64, "elements", "with `--check`", "elements wrong summed over ranks; null with `--no-check`"),
    _c("samples_us", pa.list_(_F64), "us", "always", "every timed iteration (max over ranks), in order", "heavy"),
    _c("rank_time_us", pa.list_(_F64), "us",
       "`sweep`, `buckets`, `zero` (null in older files, `pairs`, the DeepSpeed engine, nccl-tests)",
       "index = rank: that rank's own median time inside the call, see \"Per-rank timing and stragglers\"",
       "heavy", writers=_STOP_RULE),
    _c("rank_skew_us", pa.list_(_F64), "us", "as `rank_time_us`, and null for `broadcast`, `reduce`, `sendrecv`",
       "index = rank: that rank's median arrival skew, how late it entered the collective behind the first rank "
       "(0 = first); see below", "heavy", writers=_STOP_RULE),
    _c("rank_cpus", pa.list_(_S), "", "runs since `--bind` (null in older files and nccl-tests)",
       "per rank (index = rank): the CPUs it was allowed to run on, as a Linux cpulist (`0-3,8`, "
       "os.sched_getaffinity); `--bind` decides (README, \"Running it\")", "heavy", writers=MEASURED),
    _c("rank_host", pa.list_(_I32), "", "runs since per-rank hosts (null in older files and nccl-tests)",
       "per rank (index = rank): its host, as an index into `hosts` (`hosts[rank_host[r]]`): which rank ran "
       "where, whatever the launcher's placement; the straggler findings are judged again from it in the report",
       "heavy", writers=MEASURED),
    _c("workload", _S, "", "always",
       "`sweep`, `buckets`, `zero`, `deepspeed` (`zero --engine deepspeed`), `pairs`, `replay`, `nccl-tests` (an "
       "imported log; paired with `sweep` by compare)",
       "key gate run"),
    _c("bucket_bytes", _I64, "bytes", "`buckets`, `zero`", "the gradient bucket size; null for `sweep`", "key",
       writers=("buckets", "zero")),
    _c("zero_stage", _I32, "", "`zero`, `deepspeed`", "the ZeRO stage (0-3); null otherwise", "key",
       writers=_ZERO),
    _c("grad_accum", _I32, "micro-batches", "`zero`, `deepspeed` (the DeepSpeed engine)",
       "the point's gradient_accumulation_steps (micro-batches per optimizer step; `zero --grad-accum`); part of "
       "a point in compare and gate; `zero` files written before it read as 1 (a step was one micro-batch)",
       "key", writers=_ZERO, absent=(("zero", 1),)),
    _c("n_collectives", _I32, "", "`buckets`, `zero`, `deepspeed`, `replay` (a step row)",
       "collectives issued per timed iteration (the buckets of one step; a replayed step's ops)",
       writers=_STEP_ROWS),
    _c("overlap", _I32, "", "`buckets`, `zero`",
       "collectives in flight at once: `buckets --overlap N`; for `zero`, the gradient reductions in flight "
       "(overlap_comm: 2 for stages 1/2, 3 for stage 3, else 1)", writers=("buckets", "zero")),
    _c("scale", _F64, "", "`zero`",
       "the fraction of the model's parameters every message carries (`zero --scale`; 1 = the full model)",
       writers=("zero",)),
    _c("bytes_per_rank", _I64, "bytes", "`zero`, `deepspeed`",
       "bytes each rank moves in one optimizer step's collectives (the schedule's, at this scale; the engine's: "
       "its step row's all of them, an op type's row that op's)", writers=_ZERO),
    _c("paper_bytes_per_rank", _I64, "bytes", "`zero`, `deepspeed` (its step row)",
       "the ZeRO paper's volume per rank and step (2x the parameters' bytes at stages 0-2, 3x at stage 3, "
       "times grad_accum where gradients are reduced every micro-batch, x (n-1)/n), to hold bytes_per_rank against",
       writers=_ZERO),
    _c("ops", _S, "", "`zero`, `deepspeed`, `replay` (a step row)",
       "JSON: per collective of the step, its calls and bytes (`{\"all_reduce\": {\"count\": 3, \"bytes\": N}}`)",
       writers=(*_ZERO, "replay")),
    _c("trace_step", _I32, "", "`replay`",
       "the recorded step the row replays (the first of the steps it stands for, `trace_steps`); -1: the ops "
       "outside any step the job marked. Part of the point", "key", writers=("replay",), since=5),
    _c("trace_steps", _S, "", "`replay`",
       "the recorded steps the row stands for (`0-9`, `3,5`): steps that issue the same ops are replayed once",
       writers=("replay",), since=5),
    _c("trace_op", _I32, "", "`replay`, an op row (null on a step row, `collective` `replay_step`)",
       "the op's issue order on the lowest rank that issued it, from 0 (the trace's `index`). Part of the point",
       "key", writers=("replay",), since=5),
    _c("trace_group", _S, "", "`replay`, an op row", "the op's process group in the trace (`0`: the default group)",
       writers=("replay",), since=5),
    _c("recorded_us", _F64, "us", "`replay` (null where the trace holds no times)",
       "what the job itself took for the same op or step: the op's end minus start as recorded, max over its "
       "ranks; a step's, the sum over its ops per rank, max over ranks (with `--with-gaps`, the step's span); "
       "the median over the steps the row stands for", writers=("replay",), since=5),
    _c("trace_file", _S, "", "`replay`", "the replayed trace's file name", "run", writers=("replay",), since=5),
    _c("mtu", _I32, "bytes", "always (null if unknown)",
       "with `--mtu`, the MTU of that pass; otherwise rank 0's traffic interface's", "run differs"),
    _c("iface", _S, "", "always (null if unknown)",
       "rank 0's traffic interface: `GLOO_SOCKET_IFNAME`/`NCCL_SOCKET_IFNAME`, else the route to MASTER_ADDR",
       "run differs"),
    _c("link_layer", _S, "", "always (null if unknown)", "from sysfs type (`ethernet`, `infiniband`, `loopback`)",
       "run differs"),
    _c("hosts", pa.list_(_S), "", "always", "distinct hosts in rank order", "run warn"),
    _c("commbench_version", _S, "", "always", "", "run warn"),
    _c("torch_version", _S, "", "always", "", "run warn"),
    _c("nccl_version", _S, "", "NCCL runs", "null on gloo", "run warn"),
    _c("env", _S, "JSON", "always",
       "the environment's known settings (net/envinfo.py KNOWN_SETTINGS: NCCL's documented and source-read "
       "variables, GLOO_*, UCX_*, FI_*, CUDA_*, TORCH_NCCL_* ones, MASTER_*, Slurm/Open MPI/torchrun ids) with "
       "their values; other names under those prefixes as `<not recorded>` (set, value not kept); names that "
       "look like credentials are dropped", "run heavy"),
    _c("net", _S, "JSON", "always",
       "per host: iface, mtu, link_layer, speed_mbps, operstate, and `host_net` (the interfaces of note, each "
       "with a `shaper` {\"kind\": \"tbf\"\\|\"htb\", \"rate_bits\": N} where a root shaper caps it; RDMA ports; "
       "NCCL/GLOO env). The plot subtitle, the report's network table and compare show the effective rate: "
       "min(link speed, shaper rate)", "run heavy"),
    _c("plan", _S, "JSON", "always",
       "the whole SweepPlan of the run (`nccl-tests`: the source file or argv, program, nccl-tests version, line)",
       "heavy"),
    _c("check_error", _F64, "", "legacy nccl-tests logs",
       "nccl-tests' old `error` column (max abs difference); null otherwise", writers=("nccl-tests",)),
    _c("transport", _S, "", "NCCL runs with NCCL_DEBUG=INFO",
       "what NCCL's connections used, sorted and joined: `NET/IB`, `NET/Socket`, `P2P/IPC`, `SHM`, ... "
       "(`sweep --nccl-debug`, nccl-tests output; docs/NCCL_TESTS.md)"),
    _c("src_host", _S, "", "`pairs`", "the link a row measured: src sends to dst (`sendrecv_bidir`: both ways at "
       "once; src is the pair's first host); null otherwise (docs/PAIRS.md)", "key link", writers=("pairs",)),
    _c("dst_host", _S, "", "`pairs`", "the host src sends to", "key link", writers=("pairs",)),
    _c("src_rank", _I32, "rank", "`pairs`", "src_host's rank", "key link", writers=("pairs",)),
    _c("dst_rank", _I32, "rank", "`pairs`", "dst_host's rank", "key link", writers=("pairs",)),
    _c("status", _S, "", "`pairs`",
       "null for a link measured with every byte right; `wrong` when it was measured but data arrived wrong "
       "(the `wrong` column counts the bytes); otherwise why the link could not be measured: `unreachable` (the "
       "peer's host did not answer: a link down, a blackhole route, a dead host), `timeout` (the peer's process "
       "exists but did not answer within --timeout: hung, stopped), `error` (the transfer failed: the peer's "
       "process is gone, or the backend raised), `unobserved` (not measured as far as the run knows: rank 0, which "
       "collects the rows, judged its own host cut off from both ends, so their outcome never reached it), `never "
       "joined` (one end's rank never joined the run: its host was named at the start, the others went on without "
       "it; docs/PAIRS.md, \"Who arrived\"). The time and bandwidth columns of a failed row are NaN",
       writers=("pairs",)),
    _c("error", _S, "", "`pairs`, a failed row", "the one-line reason", writers=("pairs",)),
    _c("confirm", _B, "", "`pairs`",
       "true for a row of the confirmation round (a suspect re-measured against hosts that passed), null "
       "otherwise (docs/PAIRS.md)", "in_run", writers=("pairs",)),
    _c("wire", _S, "JSON",
       "`sweep`, `buckets`, `zero` and `pairs` (hosts of one rank) with `--wire` (the default); null with "
       "`--no-wire`, in older files, `pairs` with several ranks a host, the DeepSpeed engine, nccl-tests",
       "what every host's NIC, port and TCP counters did during the point: see \"The wire column\"", "heavy",
       writers=MEASURED),
    _c("wire_per_payload", _F64, "", "with `wire`, where every host has one rank",
       "the largest host's bytes sent (its traffic interface and RDMA ports) per bus byte the collective had to "
       "send: about (MTU+14)/(MTU-52) = 1.046 at MTU 1500 on a clean TCP link; more with retransmissions",
       writers=MEASURED),
    _c("wire_trouble", _B, "", "with `wire`",
       "true when any link, error, drop, retransmit, pause or congestion counter moved on any host during the "
       "point", writers=MEASURED),
    _c("settings", _S, "", "with `--env` or `--mtu` (null otherwise)",
       "the setting a row was measured under, one `NAME=value` per axis in the order given, joined by spaces: "
       "`GLOO_SOCKET_IFNAME=eth1`, `NCCL_ALGO=Ring NCCL_PROTO=LL`, `MTU=9000`. Part of the point: compare, gate, "
       "plot and report keep settings apart", "key gate run", writers=MEASURED),
    _c("rail", _S, "", "`pairs --per-rail` (null otherwise)",
       "the interface the row's transfer went over (the same name on every host of a rail-optimised fabric); "
       "part of the point", "key", writers=("pairs",)),
    _c("nccl_algo", _S, "", "NCCL runs with `--nccl-debug` where NCCL_DEBUG_SUBSYS output names them (null otherwise)",
       "the algorithm (`Ring`, `Tree`, `NVLS`, `CollNetDirect`, ...) NCCL chose for the point's collective and "
       "size (docs/NCCL_TESTS.md)"),
    _c("nccl_proto", _S, "", "as `nccl_algo`", "the protocol (`LL`, `LL128`, `Simple`) NCCL chose"),
    _c("schema_version", _I32, "", "always", "the version of this table a file follows (the registry's, now 5)",
       "run required"),
)

BY_NAME: dict[str, Column] = {c.name: c for c in REGISTRY}
NAMES: tuple[str, ...] = tuple(BY_NAME)
SCHEMA = pa.schema([(c.name, c.type) for c in REGISTRY])


def names_with(role: str) -> tuple[str, ...]:
    """The columns playing `role`, in registry order."""
    return tuple(c.name for c in REGISTRY if role in c.roles)


POINT_KEY = names_with(KEY)  # a point across runs (compare, and the engine's GROUP BY)
GROUP_KEY = ("group_dim", "group_index", "concurrent")  # a parallel group's part of the point (docs/LAYOUTS.md)
LAYOUT_POINT = ("group_dim", "collective", "in_place", "size_bytes")  # a size of one dimension's curve (report)
RUN_POINT_KEY = tuple(c.name for c in REGISTRY if KEY in c.roles or IN_RUN in c.roles)  # a point within a run
REQUIRED_COLUMNS = names_with(REQUIRED)
INT_KEYS = tuple(c for c in POINT_KEY if pa.types.is_integer(BY_NAME[c].type))
HEAVY_COLUMNS = names_with(HEAVY)
GATE_KEY = names_with(GATE)  # what a band entry matches on (analysis/gate/gate.py)
LINE_KEY = names_with(LINE)  # a curve's identity within its setting (analysis/points/frames.py)
CURVE_POINT = tuple(c for c in POINT_KEY if c in LINE_KEY or c == "size_bytes")  # a size on a curve
TOPOLOGY_COLUMNS = names_with(TOPOLOGY)
LINK_KEY = names_with(LINK)  # a pairs link: src_host, dst_host, src_rank, dst_rank
RUN_COLUMNS = names_with(RUN)
WARN_COLUMNS = names_with(WARN)
DIFFERENCE_COLUMNS = names_with(DIFFERS)


def markdown_table() -> str:
    """docs/RESULTS.md's column table, one row a column."""
    lines = ["| column | type | unit | key | written by | filled | since | meaning |",
             "|---|---|---|---|---|---|---|---|"]
    for c in REGISTRY:
        writers = "all" if c.writers == ALL_WORKLOADS else ", ".join(c.writers)
        lines.append(f"| {c.name} | {_type_name(c.type)} | {c.unit} | {'key' if c.key else ''} | {writers} | "
                     f"{c.filled} | {c.since} | {c.meaning} |")
    return "\n".join(lines) + "\n"


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "timestamp (UTC)"
    if pa.types.is_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return {"string": "string", "bool": "bool"}.get(str(t), str(t))


TABLE_BEGIN = "<!-- columns: generated from commbench/core/columns.py by `python -m commbench.core.columns` -->"
TABLE_END = "<!-- end of columns -->"


def with_table(doc: str) -> str:
    """`doc` with the text between the markers replaced by markdown_table()."""
    head, rest = doc.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_BEGIN}\n{markdown_table()}{TABLE_END}{tail}"


if __name__ == "__main__":  # python -m commbench.core.columns: rewrite docs/RESULTS.md's table
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "RESULTS.md"
    doc.write_text(with_table(doc.read_text()))
    print(f"wrote the column table of {doc}")
