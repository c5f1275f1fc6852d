"""Judging the observer: before a rank that reaches nobody blames the others, it checks itself (its
own link's state, its route to them, whether they still reach each other), so that a rank whose
own link died names its own host, not every healthy one.

The judgement (judge) is a pure function of what the rank saw: which peers answered it, which did
not answer at all (unreachable: neither the process nor its host), what the peers it could read
say they reach (each rank keeps the ranks that answered its last roll call in its mailbox,
`sees`), its own link's state and which peers it has no route to. The facts are gathered by the
control plane (harness/control.py): the link's state comes from net/envinfo.iface_facts, the
interface every row already records, and a route from a UDP connect (nothing is sent).

Rules, in order: no unreachable peer -> nothing to judge. Its own link down (down, no carrier)
-> its own host's link is the culprit, whatever else it saw. Some peer answers it -> the silent
ones are theirs to answer for. Every peer unreachable and no route to any -> its own route. Every
peer unreachable while a peer it read says it reaches another -> its own host (they reach each
other). Every peer unreachable, two or more of them, nothing else known -> its own host, link or
route is as likely the cause as every other host being down: not certain, so the others are still
named, with that said. One peer alone: which end cannot be told.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

DOWN_STATES = frozenset({"down", "lowerlayerdown", "no-carrier", "dormant", "notpresent"})


@dataclass(frozen=True)
class OwnLink:
    """This rank's interface towards the others and its state (iface_facts' `operstate`: up,
    down, lowerlayerdown, ...); None where it is not known."""

    iface: str | None
    state: str | None

    @property
    def down(self) -> bool:
        return (self.state or "").lower() in DOWN_STATES


@dataclass(frozen=True)
class Sight:
    """The judgement of an observer that reaches nobody: its own host (or link, or route) is to
    blame. certain: its link is down, it has no route, or the others were seen reaching each other;
    False: only likely (every peer unreachable, nothing else known). why: what it found, e.g.
    "lost its link (eth0 down)". others: the ranks that cannot be reached from it."""

    certain: bool
    why: str
    others: tuple[int, ...]


def _ranks(rs) -> str:
    rs = sorted(rs)
    return f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"


def judge(me: int, unreachable: list[int], answered: list[int], views: dict[int, list[int]], link: OwnLink,
          no_route: list[int] | None = None) -> Sight | None:
    """The observer `me` judged (module docstring): a Sight when its own host, link or route is to
    blame, else None (the silent peers are to blame, or it cannot be told). `unreachable`: the
    peers that did not answer at all; `answered`: the peers that answered it (or whose host did:
    hung or gone); `views`: for peers it could read, the ranks that answered them; `no_route`: the
    peers it has no route to."""
    lost = tuple(sorted(set(unreachable) - {me}))
    if not lost:
        return None
    if link.down:
        return Sight(True, f"lost its link ({link.iface or 'its interface'} {link.state})", lost)
    if set(answered) - {me}:
        return None
    if no_route and set(lost) <= set(no_route):
        return Sight(True, f"has no route to {_ranks(lost)} (its link {link.iface or '?'} is {link.state or '?'})",
                     lost)
    among = sorted({p for p, seen in views.items() if p != me and set(seen) - {me, p}})
    if among:
        return Sight(True, f"cannot reach any other rank while {_ranks(among)} still reach each other", lost)
    if len(lost) >= 2:
        return Sight(False, f"reaches none of them though its link {link.iface or '?'} is {link.state or 'up'}: "
                            "its route, a firewall or its switch port is as likely the cause", lost)
    return None


def line(me: int, host: str, sight: Sight) -> str:
    """The observer's own host named when certain: "rank 0's own host node1 lost its link (eth0
    down): ranks 1, 2 cannot be reached from it (it is the culprit, not them)"; when not, the
    caveat that goes after the silent peers' names: "no other rank answers rank 0's own host
    node1, which reaches none of them though ..."."""
    if not sight.certain:
        return f"no other rank answers rank {me}'s own host {host}, which {sight.why}"
    return (f"rank {me}'s own host {host} {sight.why}: {_ranks(sight.others)} cannot be reached from it "
            "(it is the culprit, not them)")


def still_together(me: int, silent: list[int], answered: list[int]) -> list[int] | None:
    """For a rank that answers: the ranks that still reach each other (itself and those that
    answered it) when some rank is silent; None when nobody is silent or nobody answered it. The
    lowest of them says so, so that a fault makes one line, not one a rank."""
    if not silent or not set(answered) - {me}:
        return None
    together = sorted(set(answered) | {me})
    return together if together[0] == me else None


def no_route(addrs: dict[int, str]) -> list[int]:
    """The ranks whose address this host has no route to (a UDP connect picks the route; nothing
    is sent)."""
    out = []
    for rank, addr in addrs.items():
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((addr, 9))
        except OSError:
            out.append(rank)
    return out
