"""`commbench check`: one acceptance pass over the hosts of a job (docs/CHECK.md). Each step runs the
way a user runs it, as a child `commbench` command on the hosts (`doctor --json`, `pairs`, `sweep`),
one rank per host through the launcher (`srun` in a Slurm job, `lab run` on the lab, local ranks),
within what is left of the profile's time budget; the parent reads their JSON and results files and
judges every host (analysis/check/checkverdict.py). `--mode healthcheck` runs doctor on this host alone,
with its link rate against the profile's: what fits Slurm's prolog and HealthCheckProgram (no job
context, no other host, no scontrol).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from commbench.analysis.check.checkprofile import Profile
from commbench.analysis.check.checkverdict import CheckResult, Judge
from commbench.analysis.gate import gate
from commbench.core.errors import BadInput
from commbench.core.linkrate import effective_rate
from commbench.core.outtext import bounded
from commbench.core.units import format_size
from commbench.net.doctorrails import rails

LAUNCHERS = ("local", "lab", "srun")
KILL_GRACE_S = 5.0
# Variables a launcher sets: a health check's doctor must judge this host alone, whatever the
# prolog's environment holds.
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                  "TORCHELASTIC_RUN_ID", "COMMBENCH_LAUNCHER", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                  "PMI_RANK", "PMI_SIZE")


@dataclass
class CheckPlan:
    profile: Profile
    launcher: str  # local, lab or srun
    out: str  # folder of the steps' files and log
    run_id: str
    nproc: int | None = None  # local: ranks of pairs and sweep


@dataclass
class Step:
    code: int | None  # None: the time budget ran out
    stdout: str


def child_argv(argv: list[str], launcher: str, nproc: int | None = None) -> list[str]:
    """One step's command: one rank on every host of the job (srun), of the lab (lab run), or local ranks."""
    own = [sys.executable, "-m", "commbench", *argv]
    if launcher == "srun":
        nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
        return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", *own]
    if launcher == "lab":
        return [sys.executable, "-m", "commbench", "lab", "run", "--", *own]
    return own + (["--nproc", str(nproc)] if nproc and argv[0] != "doctor" else [])


def run_step(cmd: list[str], deadline: float, log: Path, env: dict[str, str] | None = None) -> Step:
    """Run one step within the deadline; its stderr (and stdout, unless read) appended to the log.
    Past the deadline its whole process group is stopped (SIGTERM, then SIGKILL)."""
    with open(log, "ab") as err:
        err.write(f"\n$ {' '.join(cmd)}\n".encode())
        err.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True, env=env)
        try:
            out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _stop(proc)
            return Step(None, "")
    text = out.decode(errors="replace")
    with open(log, "a", encoding="utf-8") as f:
        f.write(text)
    return Step(proc.returncode, text)


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.communicate(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def doctor_json(text: str) -> dict | None:
    """doctor --json's document from its stdout (a launcher may add lines around it)."""
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and "hosts" in doc else None


def link_rates(doc: dict) -> dict[str, float | None]:
    """Each host's slowest rail (its effective rate: a shaper's where one caps it, core/linkrate.py)."""
    out: dict[str, float | None] = {}
    for facts in doc.get("hosts") or []:
        known = [r for r in (effective_rate(i)[0] for i in rails(facts)) if r is not None]
        out[str(facts.get("host"))] = min(known) if known else None
    return out


class Check:
    """The acceptance pass: each step of the profile in turn, then the verdict."""

    def __init__(self, plan: CheckPlan, say=None) -> None:
        self.plan = plan
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.deadline = time.monotonic() + plan.profile.time_budget_s
        Path(plan.out).mkdir(parents=True, exist_ok=True)
        self.log = Path(plan.out) / f"{plan.run_id}.check.log"
        self.judge = Judge([])

    def run(self) -> CheckResult:
        for step in self.plan.profile.steps:
            if time.monotonic() >= self.deadline:
                self.judge.steps[step] = "skipped: the time budget was spent"
                continue
            getattr(self, f"_{step}")()
        return self.judge.result()

    def _child(self, step: str, argv: list[str]) -> Step | None:
        self.say(f"# check: {step}: {' '.join(argv)} (log: {self.log})")
        got = run_step(child_argv(argv, self.plan.launcher, self.plan.nproc), self.deadline, self.log)
        if got.code is None:
            self.judge.steps[step] = f"failed: stopped at the time budget ({self.plan.profile.time_budget_s:g} s)"
            return None
        if got.code == 2:
            raise BadInput(f"check: the {step} step refused its input (exit 2): see {self.log}")
        return got

    def _doctor(self) -> None:
        got = self._child("doctor", ["doctor", "--json", "--timeout", str(int(self._left(60)))])
        doc = doctor_json(got.stdout) if got else None
        if got is None:
            return
        if doc is None:
            self.judge.steps["doctor"] = f"failed: exit {got.code}, no report (see {self.log})"
            return
        for facts in doc["hosts"]:
            self.judge.host(str(facts.get("host")))
        self.judge.doctor(doc.get("findings") or [])
        if self.plan.profile.link_rate_bits:
            self.judge.link_rates(link_rates(doc), self.plan.profile.link_rate_bits)
        self.judge.steps["doctor"] = f"ran on {len(doc['hosts'])} host(s), {len(doc.get('findings') or [])} finding(s)"

    def _pairs(self) -> None:
        p = self.plan.profile
        path = Path(self.plan.out) / f"{self.plan.run_id}.pairs.parquet"
        got = self._child("pairs", ["pairs", "--size", str(p.pairs_size), "-n", str(p.pairs_iters), "-w", "1",
                                    "--slow-below", f"{p.threshold * 100:g}%", "--progress", "off",
                                    "--timeout", str(int(self._left(300))), "--out", str(path)])
        if got is None:
            return
        frame = _read(path)
        if frame is None:
            self.judge.steps["pairs"] = f"failed: exit {got.code}, no results (see {self.log})"
            return
        self.judge.pairs(frame, p.threshold)
        self.judge.steps["pairs"] = f"ran: {format_size(p.pairs_size)} between every pair of hosts -> {path}"

    def _sweep(self) -> None:
        p = self.plan.profile
        path = Path(self.plan.out) / f"{self.plan.run_id}.sweep.parquet"
        got = self._child("sweep", ["sweep", "--collective", p.sweep_collective, "--sizes",
                                    ",".join(map(str, p.sweep_sizes)), "-n", str(p.sweep_iters), "-w", "1",
                                    "--progress", "off", "--timeout", str(int(self._left(300))), "--out", str(path)])
        if got is None:
            return
        if _read(path) is None:
            self.judge.steps["sweep"] = f"failed: exit {got.code}, no results (see {self.log})"
            return
        assert p.bands is not None  # the profile refuses a sweep step without bands
        self.judge.sweep(gate.gate_paths(p.bands, [str(path)]))
        self.judge.steps["sweep"] = f"ran: {p.sweep_collective} at {len(p.sweep_sizes)} size(s), judged by " \
                                    f"{p.bands.source} -> {path}"

    def _left(self, most: float) -> float:
        return max(1.0, min(most, self.deadline - time.monotonic()))


def _read(path: Path):
    from commbench.core.results import read_results

    if not path.is_file():
        return None
    try:
        return read_results([str(path)])
    except Exception:  # noqa: BLE001 - a file the step left half-written is no evidence
        return None


def healthcheck(profile: Profile, out: str) -> CheckResult:
    """This host alone: doctor's findings and its link rate against the profile's, within the time
    budget; no launcher, no other host, no scontrol (Slurm's prolog and HealthCheckProgram)."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("SLURM_")}
    Path(out).mkdir(parents=True, exist_ok=True)
    log = Path(out) / "healthcheck.log"
    judge = Judge([])
    budget = profile.time_budget_s
    got = run_step([sys.executable, "-m", "commbench", "doctor", "--json"], time.monotonic() + budget, log, env)
    doc = doctor_json(got.stdout) if got.code is not None else None
    if doc is None:
        why = f"stopped at the time budget ({budget:g} s)" if got.code is None else f"exit {got.code}, no report"
        judge.steps["doctor"] = f"failed: {why} (see {log})"
        return judge.result()
    for facts in doc["hosts"]:
        judge.host(str(facts.get("host")))
    judge.doctor(doc.get("findings") or [])
    if profile.link_rate_bits:
        judge.link_rates(link_rates(doc), profile.link_rate_bits)
    judge.steps["doctor"] = f"ran on this host, {len(doc.get('findings') or [])} finding(s)"
    return judge.result()


def healthcheck_line(result: CheckResult) -> str:
    """The one line slurmd's log keeps: verdict, host, reason."""
    if not result.hosts:
        return f"commbench healthcheck: NO VERDICT: {bounded('; '.join(result.steps.values()), 200)}"
    h = result.hosts[0]
    return f"commbench healthcheck: {h.verdict} {h.host}: {h.reason}"
