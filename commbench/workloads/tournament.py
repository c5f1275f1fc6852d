"""Round-robin schedule of pairs (the circle method): every pair of n players meets exactly once,
in n-1 rounds for even n and n rounds for odd n, and the pairs of one round are disjoint, so they
can all run at the same time.

`commbench pairs` measures every link of n hosts in O(n) rounds
instead of n(n-1)/2 runs one after another."""

from __future__ import annotations

BYE = None


def rounds(players: list) -> list[list[tuple]]:
    """The rounds of a round-robin over `players`, each a list of disjoint pairs.

    Circle method: the first player stays put, the others rotate one place per round; in each
    round position i meets position m-1-i. With an odd count a stand-in (a bye) is added and
    whoever meets it sits the round out, so one player idles per round.
    """
    seats = list(players)
    if len(set(seats)) != len(seats):
        raise ValueError("players must be distinct")
    if len(seats) < 2:
        return []
    if len(seats) % 2:
        seats.append(BYE)
    m = len(seats)
    out = []
    for _ in range(m - 1):
        pairs = [(seats[i], seats[m - 1 - i]) for i in range(m // 2)]
        out.append([p for p in pairs if BYE not in p])
        seats = [seats[0], seats[-1], *seats[1:-1]]  # rotate all but the first
    return out


def idle(players: list, round_pairs: list[tuple]) -> list:
    """The players that sit out a round (the bye, with an odd count)."""
    busy = {p for pair in round_pairs for p in pair}
    return [p for p in players if p not in busy]
