"""Slurm node states for `commbench check --drain / --resume` (docs/CHECK.md): `scontrol show node
-o` read into nodes, the decisions (drain the hosts that failed; resume only nodes whose Reason
starts with "commbench:" and whose host now passes; never touch a node someone else drained), and
the `scontrol update` argv lists that carry them out, run through a runner the caller gives (a
subprocess on a cluster, the lab's client in the lab). Never a shell; never from a prolog or a
health check (`check --mode healthcheck` calls none of this).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from commbench.core.errors import RuntimeFailure
from commbench.core.outtext import bounded
from commbench.core.safetext import printable

PREFIX = "commbench:"
REASON_LIMIT = 160  # Slurm keeps the whole text; sinfo -R shows its first 20 characters
_FIELD = re.compile(r"(?:^|\s)(NodeName|NodeHostName|State)=(\S*)")
_REASON = re.compile(r"\sReason=(.*?)(?:\s\[[^\]\s]*@[^\]\s]*\])?\s*$")

Runner = Callable[[list[str]], subprocess.CompletedProcess]


@dataclass(frozen=True)
class Node:
    name: str
    hostname: str
    state: str  # e.g. IDLE, IDLE+DRAIN, MIXED+DRAIN
    reason: str  # without Slurm's "[user@time]"; "" when none

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.split("+") or self.state.startswith("DRAIN")

    @property
    def ours(self) -> bool:
        """Drained by commbench: its reason says so (a person's reason is never ours)."""
        return self.drained and self.reason.startswith(PREFIX)


@dataclass
class Plan:
    drain: list[tuple[Node, str]]  # node, reason (with the prefix)
    resume: list[Node]
    left: list[str]  # what is left alone, and why, one line each


def parse_nodes(text: str) -> list[Node]:
    """`scontrol show node -o`: one node a line; Reason is last and may hold spaces."""
    nodes = []
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "NodeName" not in fields:
            continue
        m = _REASON.search(line)
        nodes.append(Node(fields["NodeName"], fields.get("NodeHostName") or fields["NodeName"],
                          fields.get("State", ""), m.group(1).strip() if m else ""))
    return nodes


def reason_text(reason: str) -> str:
    """'commbench: <reason>' on one printable line, bounded (core/outtext.py)."""
    return bounded(printable(f"{PREFIX} {reason}").replace('"', "'"), REASON_LIMIT)


def node_of(host: str, nodes: Iterable[Node]) -> Node | None:
    """The Slurm node a host is: by NodeHostName, then NodeName, then short names."""
    nodes = list(nodes)
    short = host.split(".")[0]
    for key in (lambda n: n.hostname == host, lambda n: n.name == host,
                lambda n: n.hostname.split(".")[0] == short or n.name == short):
        found = [n for n in nodes if key(n)]
        if found:
            return found[0]
    return None


def plan(verdicts: dict[str, tuple[str, str]], nodes: list[Node], drain: bool, resume: bool) -> Plan:
    """verdicts: host -> (PASS|WARN|FAIL, reason). Drain FAIL hosts (a node another person drained
    keeps their reason); resume nodes drained by commbench whose host did not fail; a host that is
    no Slurm node is named, not guessed."""
    out = Plan([], [], [])
    for host, (verdict, reason) in verdicts.items():
        node = node_of(host, nodes)
        if node is None:
            if (drain and verdict == "FAIL") or resume:
                out.left.append(f"{host}: no Slurm node has this host name (scontrol show node): left alone")
            continue
        if verdict == "FAIL" and drain:
            if node.drained and not node.ours:
                out.left.append(f"{node.name}: already drained by someone else ({bounded(node.reason, 60)}): "
                                "their reason kept")
            else:
                out.drain.append((node, reason_text(reason)))
        elif verdict != "FAIL" and resume and node.drained:
            if node.ours:
                out.resume.append(node)
            else:
                out.left.append(f"{node.name}: drained by someone else ({bounded(node.reason, 60)}): not resumed")
    return out


def update_argv(node: Node, reason: str | None) -> list[str]:
    """scontrol's argv: drain with `reason`, or resume (reason None). One argument per field: no
    shell ever reads the reason."""
    if reason is None:
        return ["scontrol", "update", f"NodeName={node.name}", "State=RESUME"]
    return ["scontrol", "update", f"NodeName={node.name}", "State=DRAIN", f"Reason={reason}"]


def read_nodes(run: Runner) -> list[Node]:
    res = run(["scontrol", "show", "node", "-o"])
    if res.returncode != 0:
        raise RuntimeFailure(f"scontrol show node failed (exit {res.returncode}): "
                             f"{bounded(printable((res.stderr or res.stdout or '').strip()), 200)}")
    return parse_nodes(res.stdout)


def carry_out(p: Plan, run: Runner) -> list[str]:
    """Run the plan's updates; one line per node saying what was done (or why it failed)."""
    lines = []
    for node, reason in p.drain:
        lines.append(_update(run, node, reason, f"drained {node.name}: {reason}"))
    for node in p.resume:
        lines.append(_update(run, node, None, f"resumed {node.name} (was: {bounded(node.reason, 80)})"))
    return lines + p.left


def _update(run: Runner, node: Node, reason: str | None, done: str) -> str:
    res = run(update_argv(node, reason))
    if res.returncode == 0:
        return done
    why = bounded(printable((res.stderr or res.stdout or "").strip()), 160)
    return f"FAILED to {'resume' if reason is None else 'drain'} {node.name}: scontrol exit {res.returncode}: {why}"


def subprocess_runner(timeout: float = 30.0) -> Runner:
    """scontrol on this machine (inside a Slurm job or on an admin host), bounded in time."""
    def run(argv: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                  check=False)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} timed out after {timeout:g} s")
        except OSError as exc:
            return subprocess.CompletedProcess(argv, 127, "", str(exc))
    return run
