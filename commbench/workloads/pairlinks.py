"""One step of `commbench pairs` on a sick fabric: the links of a round, each on a pair group of its
own, kept in step and collected over the control plane (harness/control.py).

Every rank that is in a link of the step measures it with its peer and puts the outcome into its
own mailbox (`res/<step>/<src>-<dst>`): the pair's per-iteration times and #wrong, or a failure
status and the reason. Before building the pair group each end asks whether its peer answers the
control plane, so a dead or cut-off peer costs seconds, not --timeout. Rank 0 reads each link's
outcome from either end (whichever it can reach) and writes the rows; what neither end reported
is judged by a roll call of the two. Steps start together: every rank waits at a barrier for the
ranks that still answer (a rank cut off from some peers waits only for those it can reach).

With --per-rail a step is one rail's links: the pair groups are bound to that interface
(harness/pairgroup.py) and the rows carry the rail; the confirmation round runs per rail too.

With --capture the confirmation round also measures the links of the hosts named slow, and each
of its links is captured on its first end while it runs (workloads/paircapture.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time

import torch

from commbench.core import wire
from commbench.core.errors import RuntimeFailure
from commbench.core import linkstatus
from commbench.harness import faults
from commbench.harness.control import PROBE_S, ControlPlane
from commbench.harness.tcpprobe import host_answers, probe
from commbench.harness.pairgroup import PairGroup
from commbench.harness.session import Measurement, Session, TransferFailed
from commbench.workloads import paircapture

WIRE_WAIT_S = 2.0  # for the second end's counters, once the first end's outcome is in
STEP_SLACK_S = 10.0  # beyond --timeout, for a barrier or a step's outcomes to arrive
LINGER_S = 1.0  # after the end: a rank cut off from rank 0 may still read "done" from this one
COLLECTIVE = {"sendrecv": "sendrecv", "bidir": "sendrecv_bidir"}
PATTERN_PERIOD = 251  # prime: a stream shifted by a few bytes, or another rank's data, does not match


def pattern(rank: int, numel: int, device) -> torch.Tensor:
    """What `rank` sends: bytes 1..251 in a rank-dependent order, built without an index tensor
    (an int64 arange of a 1 GiB message would need 8 GiB)."""
    base = (torch.arange(PATTERN_PERIOD, dtype=torch.int64) * 7 + 13 * rank) % PATTERN_PERIOD + 1
    return base.to(torch.uint8).repeat(-(-numel // PATTERN_PERIOD))[:numel].to(device)


def control_of(session: Session) -> ControlPlane:
    """The run's control plane: pairs reports every link's outcome through it (the launcher starts
    one for every measuring run; only a unit test's session goes without)."""
    if session.control is None:
        raise RuntimeFailure("the pairs workload needs the control plane, and this run has none")
    return session.control


class LinkTester:
    """Measures the links of each step and, on rank 0, turns their outcomes into rows."""

    def __init__(self, session: Session, plan, hosts: list[str], names: dict[int, str], buffers, players: list[int],
                 rail_addrs: list[dict[str, str]] | None = None):
        self.session, self.plan, self.hosts, self.names = session, plan, hosts, names
        self.buffers, self.players = buffers, players
        self.rail_addrs = rail_addrs or [{} for _ in hosts]  # per rank: rail -> its address (--per-rail)
        self.control = control_of(session)
        self.rows: list[dict] = []
        self.any_wrong = False
        self._said: set[int] = set()  # ranks already named as silent
        self.captures = paircapture.LinkCaptures(self) if getattr(plan, "capture", False) else None

    # ---- every rank ------------------------------------------------------------------------------

    def step(self, step: str, links: list[tuple[int, int]], repetition: int, number: int,
             confirm: bool = False, rail: str | None = None) -> None:
        self.control.barrier(step, self.players, self.plan.timeout + STEP_SLACK_S)
        mine = next(((s, d) for s, d in links if self.session.rank in (s, d)), None)
        if mine is not None:
            outcome = self._measure(step, mine, rail, confirm and self.captures is not None)
            self.control.put(_key(step, mine), json.dumps(outcome))
        if self.session.rank == 0:
            self._collect(step, links, repetition, number, confirm, rail)

    def _measure(self, step: str, link: tuple[int, int], rail: str | None = None, capture: bool = False) -> dict:
        """This end's outcome of one link: the pair's samples, or why it could not be measured."""
        rank = self.session.rank
        src, dst = link
        peer = dst if rank == src else src
        if not self.control.answers(peer):
            call = self.control.roll_call([peer])
            failure = _failure(call.status(peer) or linkstatus.ERROR, self._silent_text(peer, call), peer)
            return self._unmeasured(step, link, capture, failure)
        if rail is not None:
            dead = self._rail_silent(peer, rail)
            if dead:
                return self._unmeasured(step, link, capture, _failure(linkstatus.UNREACHABLE, dead))
        watch = self.captures.around(step, link, rail) if capture and self.captures else contextlib.nullcontext()
        with watch:  # from before the pair's connection is made, so the capture holds it whole
            try:
                lower = min(src, dst)
                group = PairGroup(self.control.store_of(lower), f"{step}/{lower}-{max(src, dst)}",
                                  0 if rank == lower else 1, self.session.ctx.backend, self.plan.timeout, rail)
                return self._transfer(group, link, peer, rank == src, rank == dst or self.plan.mode == "bidir")
            except (RuntimeError, ValueError) as exc:  # gloo's timeouts and closed connections are RuntimeErrors
                return self._after_error(peer, exc)

    def _unmeasured(self, step: str, link: tuple[int, int], capture: bool, failure: dict) -> dict:
        """A link that failed before its connection was tried: with --capture, why it has no capture."""
        if capture and self.captures is not None:
            self.captures.skipped(step, link, f"no connection was tried ({failure['error']})")
        return failure

    def _rail_silent(self, peer: int, rail: str) -> str | None:
        """Why the peer cannot be reached on the rail while its control plane answers, or None. A
        probe of its address there costs PROBE_S at most; gloo's connect to a dead rail would hold
        both ends for a few times --timeout and put the rounds out of step."""
        addr = self.rail_addrs[peer].get(rail)
        if addr is None:
            return None
        if host_answers(probe(addr, self.control.peers()[peer].probe_port, PROBE_S)):
            return None
        return (f"rank {peer} on {self.hosts[peer]} does not answer on rail {rail} ({addr}) while it answers the "
                "control plane")

    def _transfer(self, group: PairGroup, link: tuple[int, int], peer: int, sends: bool, receives: bool) -> dict:
        send, recv = self.buffers
        if self.plan.mode == "bidir":
            call = lambda: group.both(send, recv)  # noqa: E731
        elif sends:
            call = lambda: group.send(send)  # noqa: E731
        else:
            call = lambda: group.recv(recv)  # noqa: E731
        src, dst = link
        pair_session = dataclasses.replace(self.session, ops=group)
        label = f"the transfer {self.names[src]} -> {self.names[dst]}"
        per_end, iters, counters = pair_session.time_each(call, label)
        samples = [max(x, y) for x, y in zip(*per_end)]
        wrong = self._check(group, call, receives, peer)
        return {"samples": samples, "iters": iters, "wrong": wrong, "wire": counters}

    def _check(self, group: PairGroup, call, receives: bool, peer: int) -> int | None:
        """One more transfer into a cleared buffer; the bytes that differ from what the peer sends,
        summed over the pair's receiving ends (one in sendrecv, both in bidir)."""
        if not self.plan.check:
            return None
        send, recv = self.buffers
        mine = 0
        if receives:
            recv.zero_()
        call()
        if receives:
            if self.session.device.type == "cuda":
                torch.cuda.synchronize(self.session.device)
            if faults.corrupts_output(self.session.rank):
                recv[0] += 1
            mine = int((recv != pattern(peer, recv.numel(), self.session.device)).sum().item())
        total = torch.tensor([mine], dtype=torch.int64)
        return int(sum(t.item() for t in group.gather(total)))

    def _after_error(self, peer: int, exc: BaseException) -> dict:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        call = self.control.roll_call([peer])
        status = call.status(peer)
        counters = exc.wire if isinstance(exc, TransferFailed) else {}
        if status is None:  # the peer answers: the link, or the transfer itself, failed
            timed_out = "timed out" in text.lower() or "timeout" in text.lower()
            status = linkstatus.TIMEOUT if timed_out else linkstatus.ERROR
            return _failure(status, f"the transfer failed while rank {peer} on {self.hosts[peer]} answers the "
                                    f"control plane: {text}", wire=counters)
        return _failure(status, f"{self._silent_text(peer, call)}: {text}", peer, counters)

    def _silent_text(self, peer: int, call) -> str:
        return self.control.describe(call).split("; ranks ")[0] if call.silent else \
            f"rank {peer} on {self.hosts[peer]} did not answer in time"

    # ---- the confirmation round -------------------------------------------------------------------

    def confirm(self, bidir: bool) -> None:
        """Rank 0 decides which suspects to measure again (analysis/linkfaults.confirm_plan) and puts
        the plan in its mailbox; every rank reads it from whichever peer has it and runs it."""
        if self.session.rank == 0:
            plan = self._plan_confirmation()
            self.control.put("confirm", json.dumps({"pairs": plan, "run": self.plan.run_id}))
        others = [r for r in self.players if r != self.session.rank]
        text = self.control.relay("confirm", [0] + [r for r in others if r != 0],
                                  2 * self.plan.timeout + STEP_SLACK_S)
        told = json.loads(text) if text else {}
        planned = told.get("pairs", [])  # [a, b] each, or [a, b, rail] with --per-rail
        if self.captures is not None:
            self.captures.run_id = told.get("run", self.plan.run_id)  # pcaps named after the rows' run
        rails = list(dict.fromkeys(p[2] if len(p) > 2 else None for p in planned))
        ran = []
        for rail in rails:  # rail after rail, as in the main rounds
            pairs = [(p[0], p[1]) for p in planned if (p[2] if len(p) > 2 else None) == rail]
            where = f"confirm.{rail_token(rail)}" if rail else "confirm"
            for number, batch in enumerate(_disjoint(pairs), 1):
                self.step(f"{where}.{number}", batch, 0, number, confirm=True, rail=rail)
                ran += [(f"{where}.{number}", link, rail) for link in batch]
        if self.captures is not None:
            self.captures.publish()
            if self.session.rank == 0:
                self.captures.collect(ran, self.plan.timeout + STEP_SLACK_S + paircapture.SUMMARY_S * len(ran))

    def finish(self) -> None:
        """Mailboxes must outlive rank 0's collection: rank 0 says "done" when it has every row;
        the others wait for it (from any peer that has it), then linger a moment for cut-off peers."""
        others = [r for r in self.players if r not in (0, self.session.rank)]
        if self.session.rank == 0:
            self.control.put("done", "1")
            self.control.barrier("bye", self.players, LINGER_S * 5)  # each has read "done", or stopped answering
            return
        self.control.relay("done", [0] + others, 2 * self.plan.timeout + STEP_SLACK_S)
        self.control.put("at/bye", "1")
        time.sleep(LINGER_S)

    def _plan_confirmation(self) -> list[list]:
        """Per rail when the rows have rails: a rail's suspects are judged on that rail's rows."""
        import pandas as pd

        from commbench.analysis.pairs import linkfaults

        if not self.rows:
            return []
        frame = pd.DataFrame(self.rows)
        planned: list[list] = []
        culprits = []
        if "rail" not in frame.columns or frame["rail"].isna().all():
            culprits = [(c, None) for c in linkfaults.suspects(frame)]
            planned = [list(p) for p in linkfaults.confirm_plan(frame, [c for c, _ in culprits])]
        else:
            for rail, rows in frame.groupby("rail", sort=False):
                found = linkfaults.suspects(rows)
                culprits += [(c, rail) for c in found]
                planned += [[a, b, rail] for a, b in linkfaults.confirm_plan(rows, found)]
        if self.captures is not None:  # the slow hosts' links too: a lossy link is often only slow
            planned += self._plan_slow(frame, planned, culprits)
        return planned

    def _plan_slow(self, frame, planned: list[list], culprits: list) -> list[list]:
        """--capture: each slow endpoint against endpoints that are not (paircapture.slow_plan), and
        for every planned link, the suspect it checks (for the evidence lines)."""
        assert self.captures is not None
        slow = paircapture.slow_endpoints(frame, self.plan.per_rail, self.plan.run_id, self.plan.threshold)
        blamed = {e for c, _ in culprits if c.kind in ("host", "link") for e in c.name.split(" <-> ")}
        added = paircapture.slow_plan(slow, self.names, self.hosts, blamed, planned)
        what = [(f"failed {c.kind} {c.name}", c.name.split(" <-> "), rail)
                for c, rail in culprits if c.kind in ("host", "link")]
        what += [(f"slow host {s.name}" + (f" rail {s.rail}" if s.rail else ""), [s.name], s.rail) for s in slow]
        for p in planned + added:
            rail = p[2] if len(p) > 2 else None
            ends = {self.names[p[0]], self.names[p[1]]}
            why = [text for text, names, r in what if r == rail and ends & set(names)]
            if why:
                self.captures.why[(p[0], p[1], rail)] = ", ".join(dict.fromkeys(why))
        return added

    def capture_lines(self) -> list[str]:
        """--capture, rank 0: the evidence lines of the confirmation round's packet captures."""
        return self.captures.lines() if self.captures is not None and self.session.rank == 0 else []

    # ---- rank 0: the rows ----------------------------------------------------------------------

    def _collect(self, step: str, links: list[tuple[int, int]], repetition: int, number: int,
                 confirm: bool, rail: str | None = None) -> None:
        end = time.monotonic() + 2 * self.plan.timeout + STEP_SLACK_S
        rows = []
        for src, dst in links:
            outcome = self._outcome(step, (src, dst), end)
            outcome["wire"] = self._both_ends_wire(step, (src, dst), outcome)
            self._name_peer(outcome)
            rows.append(self._row(outcome, src, dst, repetition, number, confirm, rail))
        self.session.write(rows)
        self.rows += rows

    def _outcome(self, step: str, link: tuple[int, int], end: float) -> dict:
        """The link's outcome from either end's mailbox; a roll call of both when neither has it."""
        key = _key(step, link)
        while True:
            for end_rank in link:
                text = self.control.read(end_rank, key)
                if text is not None:
                    return json.loads(text)
            alive = [r for r in link if self.control.answers(r)]
            if not alive or time.monotonic() > end:
                break
            time.sleep(0.05)
        call = self.control.roll_call(list(link))
        silent = [r for r in link if r in call.silent]
        status = call.link_status(*link) or linkstatus.TIMEOUT
        if not silent:
            return _failure(status, "neither end reported in time")
        if status == linkstatus.UNOBSERVED:  # this rank is cut off from both ends: not theirs to answer for
            return _failure(status, f"not observed: {self.control.describe(call)}")
        return _failure(status, self._silent_text(silent[0], call), silent[0])

    def _both_ends_wire(self, step: str, link: tuple[int, int], outcome: dict) -> dict | None:
        """The counters of both ends' hosts during the transfer (each end reads its own host and
        puts it with its outcome; an end whose transfer failed, up to the failure: drops or
        retransmissions there say the wire starved it); None where neither end read any."""
        key, hosts = _key(step, link), dict[str, object]()
        deadline = time.monotonic() + WIRE_WAIT_S  # the other end puts its outcome right after the same gather
        for end_rank in (r for r in link if r != outcome.get("peer")):  # a silent end would cost a read timeout
            text = self.control.read(end_rank, key)
            while text is None and time.monotonic() < deadline and self.control.answers(end_rank):
                time.sleep(0.02)
                text = self.control.read(end_rank, key)
            if text is not None:
                hosts.update(json.loads(text).get("wire") or {})
        return hosts or None

    def _name_peer(self, outcome: dict) -> None:
        """A rank found hung, gone or unreachable is named on stderr while the run goes on, once."""
        peer = outcome.get("peer")
        if peer is not None and peer not in self._said:
            self._said.add(peer)
            print(f"commbench: {outcome['error']} (seen at {time.strftime('%H:%M:%S')}; the run goes on without "
                  "it)", flush=True, file=sys.stderr)

    def _row(self, outcome: dict, src: int, dst: int, repetition: int, number: int, confirm: bool,
             rail: str | None = None) -> dict:
        plan, session = self.plan, self.session
        status, samples = outcome.get("status"), outcome.get("samples") or [math.nan]
        wrong = outcome.get("wrong")
        if status is None and wrong:
            status = linkstatus.WRONG
            self.any_wrong = True
        row = session.record(collective=COLLECTIVE[plan.mode], dtype="uint8", op=None, root=-1,
                             size_bytes=plan.size_bytes, count=plan.size_bytes, in_place=False, busbw_factor=1.0,
                             m=Measurement(samples, int(outcome.get("iters") or 0), wrong, wire=outcome.get("wire")),
                             repetition=repetition, src_host=self.hosts[src], dst_host=self.hosts[dst],
                             src_rank=src, dst_rank=dst, status=status, error=outcome.get("error"),
                             confirm=True if confirm else None, rail=rail)
        if outcome.get("status"):
            row["samples_us"] = []
        self._print(row, number, src, dst, confirm)
        return row

    def _print(self, row: dict, number: int, src: int, dst: int, confirm: bool) -> None:
        arrow = "<->" if self.plan.mode == "bidir" else "->"
        link = f"{self.names[src]} {arrow} {self.names[dst]}" + (f" ({row['rail']})" if row.get("rail") else "")
        where = f"{'c' if confirm else ''}{number}"
        if row["status"] in linkstatus.FAILED:
            self.session.reporter.line(f"   {where:>5}  {link:<40} {'FAILED':>12} {row['status']:>9}  {row['error']}"
                                       + wire.mark(row.get("wire")))
            return
        bad = row["wrong"]
        self.session.reporter.line(f"   {where:>5}  {link:<40} {row['time_us']:12.1f} {row['busbw_GBps']:9.4f} "
                                   f"{'N/A' if bad is None else bad:>7}" + wire.mark(row.get("wire")))


def rail_token(rail: str) -> str:
    """A rail in a step's name: hex, since step names travel in mailbox URLs and store keys, and an
    interface name may hold any byte but '/', ':' and whitespace."""
    return "r" + rail.encode().hex()


def _key(step: str, link: tuple[int, int]) -> str:
    return f"res/{step}/{link[0]}-{link[1]}"


def _failure(status: str, error: str, peer: int | None = None, wire: dict | None = None) -> dict:
    """A link that could not be measured; `peer`: the rank found silent, when one was; `wire`: this
    end's host counters during the failed transfer, when it read them."""
    return {"status": status, "error": error, "peer": peer, "wire": wire or {}}


def _disjoint(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Pairs in batches that share no rank (greedy, order kept), so each batch runs at once."""
    batches: list[list[tuple[int, int]]] = []
    for pair in pairs:
        for batch in batches:
            if not any(set(pair) & set(other) for other in batch):
                batch.append(pair)
                break
        else:
            batches.append([pair])
    return batches
