"""The packet captures of `pairs --capture`: the suspect links measured again in the confirmation
round (the failed ones' plan, and with --capture each host named slow against two that are not), a
headers-only tcpdump of each on the link's first end (net/linkcapture.py), each summarised by the rank
that took it (net/pcapsummary.py) and collected by rank 0 into evidence lines that name the .pcap.

Why the slow ones too: a lossy link (a short queue that drops) is often only slow, and without
--capture the confirmation round re-measures failed links only. Its rows have `confirm` true like
every confirmation row, so the ranking (main rounds only) is not changed by them, nor by the
capture's own load.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from commbench.net import linkcapture, pcapsummary
from commbench.net.envinfo import traffic_iface

KEY = "cap/"  # cap/<step>/<src>-<dst> in the capturing rank's mailbox
SLOW_PARTNERS = 2  # a slow host is measured again against this many hosts that are not slow
SUMMARY_S = 5.0  # rank 0 waits this much longer a captured link: dpkt reads 200,000 packets (-c) in about 4 s
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Slow:
    """An endpoint named slow in the main rounds (on a rail with --per-rail), and which way."""

    name: str
    rail: str | None
    sends: bool = True  # its sending is slow
    receives: bool = True


def slow_endpoints(frame, per_rail: bool, run_id: str, threshold: float) -> list[Slow]:
    """The endpoints linkrank.py (railrank.py with rails) names slow, from the main rounds' rows."""
    from commbench.analysis.pairs import linkrank, railrank

    if per_rail:
        rails = railrank.by_rail(frame, run_id)
        if not rails:
            return []
        ranked = railrank.rank_rails(rails, threshold)
        return [Slow(e.name, rail, e.slow_send, e.slow_recv)
                for rail, r in ranked.rails.items() for e in r.singled_out]
    runs = linkrank.links_by_run(frame)
    if not runs:
        return []
    ranking = linkrank.rank_links(next(iter(runs.values())), threshold)
    return [Slow(e.name, None, e.slow_send, e.slow_recv) for e in ranking.singled_out]


def slow_plan(slow: list[Slow], names: dict[int, str], hosts: list[str], blamed: set[str],
              taken: list[list]) -> list[list]:
    """Confirmation links for the slow endpoints: each against SLOW_PARTNERS endpoints that are not
    slow (on its rail), not blamed by the failed links and on another host, in rank order, in turn;
    its slow direction first ([src, dst] or [src, dst, rail]). A pair already in `taken` is not
    added again (whichever its direction)."""
    rank_of = {n: r for r, n in names.items()}
    seen = {(frozenset(p[:2]), p[2] if len(p) > 2 else None) for p in taken}
    out: list[list] = []
    cursor = 0
    for s in slow:
        me = rank_of.get(s.name)
        if me is None:
            continue
        slow_here = {x.name for x in slow if x.rail == s.rail}
        pool = [r for r, n in sorted(names.items()) if n not in slow_here and n not in blamed and hosts[r] != hosts[me]]
        picked = [pool[(cursor + i) % len(pool)] for i in range(min(SLOW_PARTNERS, len(pool)))]
        cursor += len(picked)
        for i, peer in enumerate(picked):
            outward = s.sends if not (s.sends and s.receives) else i % 2 == 0
            link = [me, peer] if outward else [peer, me]
            if (frozenset(link), s.rail) not in seen:
                seen.add((frozenset(link), s.rail))
                out.append(link + ([s.rail] if s.rail is not None else []))
    return out


def file_name(folder: Path, run_id: str, src: str, dst: str, rail: str | None) -> Path:
    """<folder>/<run_id>-<src>-<dst>[-<rail>].pcap, each part made safe for a file name."""
    parts = [run_id, src, dst] + ([rail] if rail else [])
    return folder / ("-".join(_SAFE.sub("_", p) for p in parts) + ".pcap")


class LinkCaptures:
    """One rank's captures of the confirmation round, and on rank 0 everyone's summaries."""

    def __init__(self, tester) -> None:
        self.tester = tester
        self.run_id: str = tester.plan.run_id  # replaced by rank 0's (the rows' run) from the plan
        self.mine: list[dict] = []  # what this rank captured: key, file, iface, error, dropped
        self.off: str | None = None  # why this rank takes no captures (said once)
        self.got: list[tuple[str, dict]] = []  # rank 0: (link text, its capture record), in plan order
        self.why: dict[tuple, str] = {}  # rank 0: (src, dst, rail) -> the suspect it checks

    # ---- the capturing end ---------------------------------------------------------------------

    @contextlib.contextmanager
    def around(self, step: str, link: tuple[int, int], rail: str | None) -> Iterator[None]:
        """A capture while the block runs, when this rank is the link's first end."""
        t = self.tester
        if t.session.rank != link[0]:
            yield
            return
        record = {"key": _key(step, link), "host": t.control.host}
        cap = self._start(link, rail, record)
        try:
            yield
        finally:
            if cap is not None and cap.stop():
                record["dropped"] = cap.dropped
            elif cap is not None:
                record["error"] = cap.error
            self.mine.append(record)

    def skipped(self, step: str, link: tuple[int, int], why: str) -> None:
        """The link's first end says why it took no capture (the link failed before a connection)."""
        if self.tester.session.rank == link[0]:
            self.mine.append({"key": _key(step, link), "host": self.tester.control.host, "error": why})

    def _start(self, link: tuple[int, int], rail: str | None, record: dict) -> linkcapture.Capture | None:
        t = self.tester
        if self.off is not None:
            record["error"] = self.off
            return None
        peer_rank = link[1]
        peers = t.control.peers()
        peer, me = peers.get(peer_rank), peers.get(t.session.rank)
        addr = t.rail_addrs[peer_rank].get(rail) if rail else (peer.addr if peer else None)
        if addr is None or me is None or peer is None:
            record["error"] = f"the address of rank {peer_rank} is unknown here"
            return None
        iface = rail or traffic_iface(addr) or "any"
        path = file_name(Path(_results_folder(t.plan.out)), self.run_id, t.names[link[0]], t.names[link[1]], rail)
        record.update(iface=iface, file=str(path.resolve()))
        skip = [p.port for p in (me, peer)] + [p.probe_port for p in (me, peer)] + [p.pair_port for p in (me, peer)]
        user = pwd.getpwuid(0).pw_name if os.geteuid() == 0 else None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            record["error"] = f"cannot make {path.parent}: {exc.strerror or exc}"
            return None
        cap = linkcapture.Capture(linkcapture.argv(iface, addr, str(path), skip, 2 * t.plan.timeout + 10, user=user),
                              str(path), 2 * t.plan.timeout + 10)
        if cap.start():
            return cap
        record["error"] = cap.error
        self.off = cap.error  # missing or not permitted: so for the rest of the round too
        print(f"commbench: rank {t.session.rank} on {t.control.host}: --capture: {cap.error}; the links go on "
              "without packet captures", file=sys.stderr, flush=True)
        return None

    def publish(self) -> None:
        """Summarise this rank's captures and put each in its mailbox for rank 0."""
        for record in self.mine:
            if record.get("file") and not record.get("error"):
                record["summary"] = pcapsummary.summarise(record["file"]).to_dict()
            self.tester.control.put(KEY + record["key"], json.dumps(record))

    # ---- rank 0 --------------------------------------------------------------------------------

    def collect(self, ran: list[tuple[str, tuple[int, int], str | None]], deadline_s: float) -> None:
        """Each captured link's record from its first end (waiting while that end answers)."""
        t = self.tester
        end = time.monotonic() + deadline_s
        for step, (src, dst), rail in ran:
            key = KEY + _key(step, (src, dst))
            text = t.control.read(src, key)
            while text is None and time.monotonic() < end and t.control.answers(src):
                time.sleep(0.05)
                text = t.control.read(src, key)
            record = json.loads(text) if text else {"host": t.hosts[src], "error": "its first end never reported it"}
            arrow = "<->" if t.plan.mode == "bidir" else "->"
            label = f"{t.names[src]} {arrow} {t.names[dst]}" + (f" ({rail})" if rail else "")
            why = self.why.get((src, dst, rail)) or self.why.get((dst, src, rail))
            self.got.append((label + (f", checking {why}" if why else ""), record))

    def lines(self) -> list[str]:
        """The evidence: one line per captured link (rank 0)."""
        if not self.got:
            return ["# Packet captures (--capture): no link was suspect (none failed or was named slow), so none "
                    "was captured."]
        out = [f"# Packet captures of the confirmation round (--capture: headers only, {linkcapture.SNAP_BYTES} B a "
               "packet; open a .pcap in Wireshark, or with tcpdump -r):"]
        for label, record in self.got:
            where = f"{record.get('host')} {record.get('iface', '')}".strip()
            if record.get("error"):
                out.append(f"#   {label}: no capture at {where}: {record['error']}")
                continue
            s = pcapsummary.Summary.from_dict(record.get("summary") or {})
            dropped = record.get("dropped")
            kernel = f", {dropped:,} dropped by the kernel" if dropped else ""
            out.append(f"#   {label}: {s.text()} (captured at {where}{kernel}): {record.get('file')}")
        return out


def _key(step: str, link: tuple[int, int]) -> str:
    return f"{step}/{link[0]}-{link[1]}"


def _results_folder(out: str) -> str:
    """The folder the results file goes to (--out DIR, or the folder of --out FILE.parquet)."""
    return str(Path(out).parent) if out.lower().endswith(".parquet") else out
