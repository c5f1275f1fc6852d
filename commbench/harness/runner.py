"""The harness every workload runs on, on every rank: the process group, the Session it hands the
workload (harness/session.py), exit codes, naming a lost peer.

It chooses backend and device, joins the process group (bounded by --timeout), gathers host and
network facts, opens the results file on rank 0, and hands a `Session` to the workload; the
session's `time_call` is the one timing loop of commbench (harness/session.py). Failures map to
exit codes here, once, for every workload.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import sys
from typing import Protocol

import torch
import torch.distributed as dist

import commbench
from commbench.harness import faults
from commbench.harness.backend import choose_backend
from commbench.harness.closing import closing_lines
from commbench.harness.console import Reporter
from commbench.harness.control import ControlPlane, RollCall
from commbench.harness.joining import first_line, join_group, local_addr
from commbench.net.envinfo import iface_facts, traffic_iface
from commbench.core.errors import EXIT_BAD_RESULT, EXIT_OK, EXIT_RUNTIME, BadInput, CommbenchError
from commbench.core.launch import RankEnv, ignore_further_signals
from commbench.core.binding import collisions, current_cpulist
from commbench.net.netinfo import host_summary
from commbench.core.options import RunOptions
from commbench.core.results import ResultWriter, resolve_out
from commbench.harness.session import RunContext, Session
from commbench.harness.settingpasses import axis_interfaces, run_each, settings_of
from commbench.core.stragglers import straggler_warnings
from commbench.harness.wireprobe import WireProbe
from commbench.core import wire as wirecols
from commbench.harness.timing import timer_for


class Workload(Protocol):
    """What a run measures (workloads/sweep.py, workloads/buckets.py, ...)."""

    plan: RunOptions

    def validate(self, world: int) -> None:
        """Checks that need the world size (raise BadInput)."""

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        """Refuse what cannot run (dtype, op, memory) before the process group exists."""

    def total_points(self, world: int) -> int:
        """Points per repetition, for the progress bar."""

    def run(self, session: Session, repetitions: range) -> bool:
        """Measure the whole grid once per repetition in `repetitions`, recording each row's number;
        return True if any output was wrong. harness/settingpasses.py run_each passes every repetition
        at once, or with --env/--mtu axes one at a time, each setting in turn."""


def _device_for(backend: str, env: RankEnv) -> torch.device:
    if backend == "nccl":
        dev = torch.device("cuda", env.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def _nccl_version(backend: str) -> str | None:
    if backend != "nccl":
        return None
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _gather_ranks(env: RankEnv, device: torch.device, device_name: str) -> list[dict]:
    iface = traffic_iface(env.master_addr)
    mine = {"rank": env.rank, "host": socket.gethostname(), "pid": os.getpid(), "device": str(device),
            "device_name": device_name, **iface_facts(iface), "host_net": host_summary(iface),
            "addr": local_addr(env.master_addr), "cpus": current_cpulist(), "ncpus": os.cpu_count()}
    everyone: list[dict] = [None] * env.world_size  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)
    return everyone


def _agree_on(error: str | None, device: torch.device) -> None:
    """Rank 0 broadcasts a setup error so that every rank stops with the same message."""
    box = [error]
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    if box[0]:
        raise BadInput(box[0])


def _header_lines(ctx: RunContext, ranks: list[dict]) -> list[str]:
    plan = ctx.plan
    iters = f"iters: {plan.iters}" if plan.iters else (
        f"iters: adaptive (until the median is known to {plan.precision:.0%} or {plan.time_budget:g} s per point, "
        f"{plan.min_iters}..{plan.max_iters})" if plan.precision > 0 else
        f"iters: adaptive ({plan.time_budget:g} s per point, {plan.min_iters}..{plan.max_iters})")
    lines = [
        f"# commbench {commbench.__version__}  run {plan.run_id}  workload {plan.workload}  torch {torch.__version__}"
        + (f"  nccl {ctx.nccl_version}" if ctx.nccl_version else ""),
        f"# backend {ctx.backend}  launcher {ctx.env.launcher}  ranks {ctx.env.world_size} "
        f"({ctx.nnodes} node(s) x {ctx.ranks_per_node})  "
        f"warmup iters: {'' if plan.iters or not plan.precision else 'up to '}{max(1, plan.warmup)}  {iters}  "
        f"repetitions: {plan.repetitions}  validation: {int(plan.check)}",
        "#",
        "# Using devices",
    ]
    for r in ranks:
        lines.append(f"#  Rank {r['rank']:2d} Pid {r['pid']:7d} on {r['host']:>10s} device {r['device']} "
                     f"[{r['device_name']}] iface {r['iface']} mtu {r['mtu']} cpus {r.get('cpus')}")
    lines.append("#")
    return lines


def rank_main(workload: Workload, env: RankEnv) -> int:
    """The entry point of every rank, however it was launched; returns its exit code."""
    try:
        return run_workload(workload, env)
    except CommbenchError as exc:
        _say(env, f"commbench: {exc}", rank0_only=isinstance(exc, BadInput))
        return exc.exit_code


def run_workload(workload: Workload, env: RankEnv) -> int:
    """Every rank calls this; returns the rank's exit code. Rank 0 prints and writes."""
    plan = workload.plan
    backend = choose_backend(plan.backend)
    device = _device_for(backend, env)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    workload.prepare(backend, device, env)
    # the timer itself unless a test delays this rank
    timer = faults.late_timer(timer_for(device, plan.cuda_graph), env.rank)
    control, env, joined = join_group(plan, backend, env, getattr(workload, "goes_on_without_absent", False))
    if joined is not None:  # some ranks never came: the workload measures what it can without them
        workload.absent = joined.absent  # type: ignore[attr-defined]  # set where goes_on_without_absent is
        if joined.line:
            _say(env, f"commbench: {joined.line}")
    broken = False
    writer: ResultWriter | None = None
    reporter = Reporter(False, 0)
    ranks: list[dict] = []
    probe: WireProbe | None = None
    try:
        ranks = _gather_ranks(env, device, device_name)
        probe = WireProbe.for_rank(ranks, env.rank, axis_interfaces(plan)) if plan.wire else None
        ctx = _run_context(plan, env, backend, device, device_name, ranks)
        writer = _open_writer(plan, env, device)
        passes = max(1, len(settings_of(plan)))
        reporter = Reporter(env.rank == 0, passes * plan.repetitions * workload.total_points(env.world_size),
                            progress=plan.progress)
        for line in _header_lines(ctx, ranks):
            reporter.line(line)
        for line in collisions(ranks) if env.rank == 0 and env.launcher != "local" else []:
            _say(env, f"commbench: warning: {line}")  # the local spawner binds (and says so) itself
        control.watch(lambda line: _say(env, line))
        any_wrong = run_each(Session(ctx, timer, reporter, writer, control=control, wire=probe), workload.run)
        if writer is not None:
            _summarise(writer, backend, env, ranks, reporter, plan)
            finished = getattr(workload, "finished", None)  # e.g. sweep --metrics: after the last line
            if finished is not None:
                finished(writer.rows)
        if any_wrong:
            reporter.close()
            _say(env, getattr(workload, "failure_message", "commbench: some results were wrong (see the #wrong "
                                                             "column): the collective or the network corrupts data"),
                 rank0_only=True)
            return EXIT_BAD_RESULT
        return EXIT_OK
    except BaseException as exc:  # noqa: BLE001 - every way out (a signal too) ends in _stopped_by's exit code
        ignore_further_signals()  # stopping now: a launcher's SIGTERM must not cut the report short
        reporter.close()
        broken = isinstance(exc, (RuntimeError, dist.DistBackendError)) and not isinstance(exc, CommbenchError)
        return _stopped_by(exc, env, writer, ranks, plan.timeout, control)
    finally:
        reporter.close()
        if not broken:  # a group broken by a dead link blocks in its teardown (a send waits for TCP's retries)
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group cannot always be torn down; the process ends anyway
                pass
        control.close()
        if probe is not None:
            probe.close()


def _run_context(plan, env: RankEnv, backend: str, device, device_name: str, ranks: list[dict]) -> RunContext:
    """What every row records about the run: hosts, ranks per node, each host's network facts."""
    hosts = list(dict.fromkeys(r["host"] for r in ranks))
    per_host_counts = [sum(1 for r in ranks if r["host"] == h) for h in hosts]
    per_host = {h: {k: v for k, v in next(r for r in ranks if r["host"] == h).items()
                    if k in ("iface", "mtu", "link_layer", "speed_mbps", "operstate", "host_net")} for h in hosts}
    return RunContext(plan, env, backend, device, device_name, hosts, len(hosts), max(per_host_counts),
                      {**ranks[0], "per_host": per_host}, dt.datetime.now(dt.timezone.utc), _nccl_version(backend),
                      [r.get("cpus") for r in ranks], [hosts.index(r["host"]) for r in ranks])


def _open_writer(plan, env: RankEnv, device) -> ResultWriter | None:
    """Rank 0 creates the results file; every rank learns whether that worked before measuring."""
    setup_error, writer = None, None
    if env.rank == 0:
        writer = ResultWriter(resolve_out(plan.out, plan.run_id))
        try:
            writer.create()
        except BadInput as exc:
            setup_error = str(exc)
            writer = None
    _agree_on(setup_error, device)
    return writer


def _summarise(writer: ResultWriter, backend: str, env: RankEnv, ranks: list[dict], reporter: Reporter,
               plan: RunOptions) -> None:
    """Rank 0 after the last point: NCCL's transport, straggler warnings, nccl-tests' closing lines
    and the run's summary (harness/closing.py)."""
    if backend == "nccl":
        from commbench.net.ncclinfo import record_debug
        record_debug(writer)  # NCCL_DEBUG_FILE (sweep --nccl-debug): the transport and algorithms NCCL used
    warnings = straggler_warnings(writer.rows, [r["host"] for r in ranks])
    values = [r.get("wire") for r in writer.rows]
    warnings += wirecols.total_lines(values, len(writer.rows))
    if writer.rows:  # --nccl-debug: NCCL's word against the counters
        warnings += wirecols.transport_lines(writer.rows[0].get("transport"), values)
    if warnings:
        reporter.close()  # a progress bar must not draw over them
    for warning in warnings:
        _say(env, warning)
    note = writer.close()  # the parts compacted into the one results file (a failure keeps them, readable)
    if note:
        reporter.close()
        _say(env, f"commbench: warning: {note}")
    for line in closing_lines(writer.rows, plan):
        reporter.line(line)
    reporter.last_line(f"# Results: {writer.path} ({len(writer.rows)} rows)")


def _stopped_by(exc: BaseException, env: RankEnv, writer: ResultWriter | None, ranks: list[dict],
                timeout: float, control: ControlPlane) -> int:
    """A rank stopped by an error or a signal: say why, say what was kept, return its exit code
    (re-raising what is neither ours nor a collective's failure)."""
    if isinstance(exc, CommbenchError):
        _say(env, f"commbench: {exc}", rank0_only=isinstance(exc, BadInput))
        _kept(env, writer)
        return exc.exit_code
    if isinstance(exc, RuntimeError) or isinstance(exc, dist.DistBackendError):
        asleep = control.suspended_s()
        if asleep:  # its peers went on while it did not run: what it finds on waking is not theirs to answer for
            _say(env, f"commbench: rank {env.rank} on {socket.gethostname()}: collective failed after "
                      f"{control.absence(asleep)}: {_SOURCE.sub('', first_line(exc))}")
            _kept(env, writer)
            return EXIT_RUNTIME
        call, called = _roll_call(control, env, first_line(exc))
        own = f"{control.describe(call)}: " if call is not None and call.cut_off else ""
        _say(env, f"commbench: rank {env.rank} on {socket.gethostname()}: collective failed: {own}"
                  f"{failure_line(exc, env, ranks, timeout, call)}")
        if call is not None and not own:
            _say(env, f"commbench: roll call: {control.describe(call)}")
        if not called:
            judge_without_rank0(control, env)
        _kept(env, writer)
        return EXIT_RUNTIME
    _kept(env, writer)
    raise exc


ROLL_CALL_SLACK_S = 15.0  # beyond --timeout: how long a failed rank waits for rank 0's roll call
ROLL_CALL_SILENCE_S = 5.0  # ... unless rank 0 does not answer for this long: no roll call is coming


def _roll_call(control: ControlPlane, env: RankEnv, why: str) -> tuple[RollCall | None, bool]:
    """Every rank reports its failure on the control plane (a report is an answer); rank 0 then
    calls the roll, so the ranks that stopped answering are named, not the first to complain.
    (rank 0's roll call or None elsewhere, whether rank 0 called it)."""
    try:
        control.report(why)
        if env.rank != 0:  # stay up (a report is only read while its mailbox exists) until rank 0 called
            heard = control.relay("rollcall", [0], control.timeout + ROLL_CALL_SLACK_S,
                                  silence_s=ROLL_CALL_SILENCE_S)
            return None, heard is not None
        call = control.roll_call()
        control.put("rollcall", "done")
        return call, True
    except Exception:  # noqa: BLE001 - the control plane is gone too (rank 0's host): the backend's words must do
        return None, True


def judge_without_rank0(control: ControlPlane, env: RankEnv) -> None:
    """A rank that rank 0 never called the roll for calls its own: cut off itself, it names its own
    host (harness/observer.py); still reaching others, the lowest of them says so in one line."""
    try:
        call = control.roll_call()
    except Exception:  # noqa: BLE001 - the control plane is gone too: the lines above must do
        return
    if call.cut_off:
        _say(env, f"commbench: rank {env.rank} on {socket.gethostname()}: {control.describe(call)}")
    elif (line := control.together(call)) is not None:
        _say(env, line)


_SOURCE = re.compile(r"^\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\]\s*")  # gloo's "[.../pair.cc:537] "
_PEER = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")  # gloo names the peer as [addr]:port


def failure_line(exc: BaseException, env: RankEnv, ranks: list[dict], timeout: float,
             call: RollCall | None = None) -> str:
    """One line on why a collective failed: the timeout, or the peer whose connection broke (by rank
    and host where the address tells), then the backend's own words. With a roll call (rank 0) a
    peer is called lost only when the roll call found it silent; one that answered is not blamed."""
    text = _SOURCE.sub("", first_line(exc))
    if call is not None and call.cut_off:  # this rank's own host is to blame: no peer is named
        return text
    if "timed out" in text.lower() or "timeout" in text.lower():
        return (f"no answer within --timeout {timeout:g} s (a rank, its host or the link stopped "
                f"responding): {text}")
    m = _PEER.search(text)
    if m:
        peers = [r for r in ranks if r["rank"] != env.rank and r.get("addr") == m.group(1)]
        if len(peers) == 1:
            p = peers[0]
            if call is None or p["rank"] in call.silent:
                return f"lost rank {p['rank']} on {p['host']} (pid {p['pid']}, {m.group(1)}): {text}"
            return (f"the connection to rank {p['rank']} on {p['host']} ({m.group(1)}) closed (it answered the "
                    f"roll call: it stopped because another rank did): {text}")
        if peers and len({p["host"] for p in peers}) == 1:
            which = ", ".join(str(p["rank"]) for p in peers)
            verb = "lost a rank" if call is None or set(call.silent) & {p["rank"] for p in peers} else \
                "the connection closed to a rank"
            return f"{verb} on {peers[0]['host']} (one of ranks {which}, {m.group(1)}): {text}"
    return text


def _say(env: RankEnv, message: str, rank0_only: bool = False) -> None:
    if rank0_only and env.rank != 0:
        return
    print(message, file=sys.stderr, flush=True)


def _kept(env: RankEnv, writer: ResultWriter | None) -> None:
    if writer is not None:
        note = writer.close()  # compacted, or left in parts that every reader reads
        if note:
            _say(env, f"commbench: warning: {note}")
        _say(env, f"commbench: {len(writer.rows)} finished rows kept in {writer.path}")
