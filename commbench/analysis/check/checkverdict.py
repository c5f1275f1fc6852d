"""`commbench check`'s verdict per host (docs/CHECK.md): PASS, WARN or FAIL, the reason in a
person's words and the evidence, from what each step found: doctor's findings, the pairs ranking
and fault verdict (analysis/pairs/linkrank.py, analysis/pairs/linkfaults.py), the sweep's gate report
(analysis/gate/gate.py) and each host's link rate against the profile's. The table, the JSON and the
drain list are all drawn from one CheckResult.

FAIL: pairs singles the host out as slow, or names it (its links fail), or doctor finds a problem
on it, or its link rate is below the profile's. WARN: a failed link between it and a healthy host,
or a sweep that missed its bands while no host is to blame (the sweep runs on every host at once).
Exit 0 when no host failed, 1 when one did, 3 when no step reached a verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commbench.analysis.pairs import linkfaults, linkrank
from commbench.core.errors import EXIT_BAD_RESULT, EXIT_OK, EXIT_RUNTIME
from commbench.core.linkrate import rate_text
from commbench.core.outtext import bounded, terminal

if TYPE_CHECKING:
    import pandas as pd

    from commbench.analysis.gate.gate import GateReport

ORDER = {"FAIL": 0, "WARN": 1, "PASS": 2}
REASON_LIMIT = 200  # one reason in the table and the drain list


@dataclass
class HostVerdict:
    host: str
    verdict: str = "PASS"
    reasons: list[str] = field(default_factory=list)  # worst first; the first is what a drain reason carries
    evidence: list[str] = field(default_factory=list)
    _ranks: list[tuple[int, int]] = field(default_factory=list, repr=False)

    def add(self, verdict: str, reason: str, evidence: str | None = None, weight: int = 1) -> None:
        """A reason of this verdict; among reasons of one verdict a measured one (weight 0: pairs)
        comes before a setup finding (doctor), since it says what the host's links really did."""
        if ORDER[verdict] < ORDER[self.verdict]:
            self.verdict = verdict
        key = (ORDER[verdict], weight)
        at = next((i for i, k in enumerate(self._ranks) if key < k), len(self._ranks))
        self._ranks.insert(at, key)
        self.reasons.insert(at, reason)
        if evidence:
            self.note(evidence)

    def note(self, evidence: str) -> None:
        """Evidence once: two ranks of one host (a local run) report the same line."""
        if evidence not in self.evidence:
            self.evidence.append(evidence)

    @property
    def reason(self) -> str:
        return bounded(self.reasons[0], REASON_LIMIT) if self.reasons else "every step passed"

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "verdict": self.verdict, "reason": self.reason, "reasons": self.reasons,
                "evidence": self.evidence}


@dataclass
class CheckResult:
    hosts: list[HostVerdict]
    steps: dict[str, str]  # step -> what it did ("ran", "skipped: ...", "failed: ...")
    job: list[str] = field(default_factory=list)  # what holds for the whole job, not one host

    @property
    def judged(self) -> bool:
        return any(v.startswith("ran") for v in self.steps.values())

    @property
    def exit_code(self) -> int:
        if not self.judged or not self.hosts:
            return EXIT_RUNTIME
        return EXIT_BAD_RESULT if any(h.verdict == "FAIL" for h in self.hosts) else EXIT_OK

    def drain_list(self) -> list[tuple[str, str]]:
        return [(h.host, h.reason) for h in self.hosts if h.verdict == "FAIL"]

    def to_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "steps": self.steps, "job": self.job,
                "hosts": [h.to_dict() for h in self.hosts],
                "drain": [{"host": h, "reason": r} for h, r in self.drain_list()]}


class Judge:
    """Collects each step's evidence into per-host verdicts."""

    def __init__(self, hosts: list[str]) -> None:
        self.by_host: dict[str, HostVerdict] = {h: HostVerdict(h) for h in hosts}
        self.steps: dict[str, str] = {}
        self.job: list[str] = []

    def host(self, name: str) -> HostVerdict:
        return self.by_host.setdefault(name, HostVerdict(name))

    def doctor(self, findings: list[dict]) -> None:
        for f in findings:
            for name in str(f.get("host") or "").split(","):
                if name and f.get("severity", "problem") == "problem":
                    self.host(name).add("FAIL", f"doctor: {f.get('message')}", f"doctor hint: {f.get('hint')}")

    def link_rates(self, rates: dict[str, float | None], expected: float) -> None:
        """Each host's slowest rail against the profile's link_rate (within 5%: tc's and a NIC's rounding)."""
        for name, bits in rates.items():
            if bits is None:
                self.host(name).evidence.append("link rate: unknown (no rail reports a speed)")
            elif bits < 0.95 * expected:
                self.host(name).add("FAIL", f"its link runs at {rate_text(bits)}, below the profile's "
                                    f"{rate_text(expected)}", f"link rate: {rate_text(bits)} < {rate_text(expected)}")

    def pairs(self, frame: pd.DataFrame | None, threshold: float) -> None:
        runs = linkrank.links_by_run(frame)
        if runs:
            ranking = linkrank.rank_links(next(iter(runs.values())), threshold)
            self._slow(ranking)
        verdict = linkfaults.faults(frame)
        for c in verdict.named:
            ends = [c.name] if c.kind == "host" else c.name.split(" <-> ")
            for end in ends:
                host = end.rsplit("/r", 1)[0]
                if c.kind == "host":
                    self.host(host).add("FAIL", f"its links fail ({c.status}): pairs names it",
                                        f"pairs: {'; '.join(c.evidence[:2])}", weight=0)
                else:
                    self.host(host).add("WARN", f"its link {c.label} fails ({c.status}) while both ends work "
                                        "with others", f"pairs: {'; '.join(c.evidence[:2])}")
        if verdict.undecided:
            self.job.append(f"pairs: no verdict on some failed links: {verdict.undecided}")

    def _slow(self, r: linkrank.Ranking) -> None:
        for e in r.endpoints:
            ratio = min(x for x in (e.send_ratio, e.recv_ratio, 1.0) if x is not None)
            best = min(x for x in (e.send_best, e.recv_best, float("inf")) if x is not None)
            ref = r.send_reference if e.slow_send or not e.slow_recv else r.recv_reference
            evidence = (f"pairs: best link {_mbps(best)} vs the median host's best {_mbps(ref)} "
                        f"(ratio {ratio:.2f}, threshold {r.threshold:.2f})")
            if e.slow:
                self.host(e.host).add("FAIL", f"its links run at {ratio:.2f} of the others (pairs: best link "
                                      f"{_mbps(best)} vs {_mbps(ref)})", evidence, weight=0)
            else:
                self.host(e.host).note(evidence)

    def sweep(self, report: GateReport) -> None:
        if not report.failed and not report.empty:
            self.job.append(report.summary())
            return
        self.job.append(report.summary())
        if any(h.verdict == "FAIL" for h in self.by_host.values()):
            return  # the slow or failing host explains the job's numbers
        for h in self.by_host.values():
            h.add("WARN", "the job's sweep missed its bands and no host is singled out",
                  f"sweep: {bounded(report.summary(), REASON_LIMIT)}")

    def result(self) -> CheckResult:
        hosts = sorted(self.by_host.values(), key=lambda h: (ORDER[h.verdict], h.host))
        return CheckResult(hosts, self.steps, self.job)


def _mbps(gbps: float | None) -> str:
    if gbps is None or gbps != gbps or gbps == float("inf"):
        return "n/a"
    return f"{gbps * 1000:.0f} MB/s" if gbps < 10 else f"{gbps:.1f} GB/s"


def table(result: CheckResult) -> list[str]:
    """The verdict as a person reads it: one line per host (worst first), its evidence under it."""
    width = max([len(h.host) for h in result.hosts] + [4])
    lines = [f"# check: {step}: {what}" for step, what in result.steps.items()]
    lines += [f"# job: {terminal(j, 400)}" for j in result.job]
    lines.append(f"{'host':<{width}}  verdict  reason")
    for h in result.hosts:
        lines.append(f"{terminal(h.host, 80):<{width}}  {h.verdict:<7}  {terminal(h.reason, REASON_LIMIT)}")
        lines += [f"{'':<{width}}           {terminal(e, 300)}" for e in h.evidence[:4]]
    drain = result.drain_list()
    lines.append(f"# drain list: {'; '.join(f'{h}: {terminal(r, 120)}' for h, r in drain) if drain else 'none'}")
    return lines


def to_json(result: CheckResult, extra: dict[str, Any] | None = None) -> str:
    return json.dumps(result.to_dict() | (extra or {}), indent=2, default=str)
