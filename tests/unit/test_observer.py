"""Judging the observer without ranks (harness/observer.py): a rank that reaches nobody checks its
own link, its route and what the others say they reach before it blames them; the control plane's
roll call, description, hang line and link status that follow from it (harness/control.py, with the
fake stores of test_control.py); and the pairs verdict when rank 0 was cut off mid-run
(analysis/pairs/linkfaults.py: links it could not observe are `unobserved`, its own host is named)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from commbench.analysis.pairs import faultstext, linkfaults
from commbench.harness import control, observer
from commbench.harness.control import ControlPlane
from commbench.harness.observer import OwnLink, judge, still_together
from commbench.harness.runner import failure_line

from unit import controlfakes
from unit.controlfakes import Clock, CountingStore, entry
from unit.test_link_faults import HOSTS, df_of, round_rows

fakes = controlfakes.fakes  # its fixture, found here
UP, DOWN = OwnLink("eth0", "up"), OwnLink("eth0", "lowerlayerdown")


# ----------------------------------------------------------------------------- the judgement


@pytest.mark.failure(row="rank-0-s-own-link-down-mid-sweep")
def test_its_own_link_down_makes_the_observer_the_culprit_whatever_else_it_saw():
    sight = judge(0, [1, 2, 3], [], {}, DOWN)
    assert sight is not None and sight.certain and sight.others == (1, 2, 3)
    assert sight.why == "lost its link (eth0 lowerlayerdown)"
    assert observer.line(0, "node1", sight) == ("rank 0's own host node1 lost its link (eth0 lowerlayerdown): ranks "
                                                "1, 2, 3 cannot be reached from it (it is the culprit, not them)")
    assert judge(0, [2], [1, 3], {}, DOWN) is not None  # one peer lost with the link down: still its own link
    assert judge(0, [1], [], {}, OwnLink("eth0", "down")).why == "lost its link (eth0 down)"


def test_a_peer_that_answers_leaves_the_blame_with_the_silent_ones():
    assert judge(0, [3], [1, 2], {}, UP) is None
    assert judge(0, [2, 3], [1], {1: [0, 1]}, UP) is None  # hung or gone peers count: their host answered
    assert judge(0, [], [1, 2], {}, DOWN) is None  # nobody unreachable: nothing to judge


def test_peers_that_reach_each_other_while_the_observer_reaches_none_make_it_the_culprit():
    who_answered_whom = {1: [1, 2, 3], 2: [2, 1]}  # as read earlier from their mailboxes (`sees`)
    sight = judge(0, [1, 2, 3], [], who_answered_whom, UP)
    assert sight is not None and sight.certain
    assert sight.why == "cannot reach any other rank while ranks 1, 2 still reach each other"
    assert judge(0, [1, 2, 3], [], {1: [0, 1]}, UP).certain is False  # it saw only itself and rank 0: no news


def test_no_route_to_any_peer_is_its_own_route():
    sight = judge(2, [0, 1], [], {}, UP, no_route=[0, 1])
    assert sight.certain and sight.why == "has no route to ranks 0, 1 (its link eth0 is up)"
    assert judge(2, [0, 1], [], {}, UP, no_route=[0]).certain is False  # a route to one: not its own route


def test_every_peer_silent_with_the_link_up_is_only_likely_and_one_peer_cannot_be_told():
    sight = judge(0, [1, 2], [], {}, UP)
    assert sight is not None and not sight.certain
    assert observer.line(0, "node1", sight) == ("no other rank answers rank 0's own host node1, which reaches none "
                                                "of them though its link eth0 is up: its route, a firewall or its "
                                                "switch port is as likely the cause")
    assert judge(0, [1], [], {}, UP) is None  # two ends: either may be to blame
    assert judge(0, [1, 2], [], {}, OwnLink(None, None)).certain is False  # the link's state unknown: not down


def test_the_lowest_of_the_ranks_that_still_reach_each_other_says_so():
    assert still_together(1, [0], [1, 2, 3]) == [1, 2, 3]
    assert still_together(2, [0], [1, 2, 3]) is None  # rank 1 says it
    assert still_together(1, [], [0, 1, 2]) is None  # nobody silent
    assert still_together(1, [0, 2, 3], [1]) is None  # it reaches nobody: not "together"


# ----------------------------------------------------------------------------- the control plane


def _cut_off_plane(fakes, monkeypatch, link: OwnLink, world: int = 4) -> ControlPlane:
    store = CountingStore()
    for r in range(1, world):
        store.set(control._PEERS + str(r), entry(r))
    plane = ControlPlane(store, 0, world, "10.0.0.0", 10.0, iface="eth0")
    assert plane.gather(5.0) == []
    monkeypatch.setattr(control, "probe", lambda addr, port, timeout: "no answer")
    monkeypatch.setattr(control, "time", Clock())
    monkeypatch.setattr(plane, "read_all", lambda r: None)
    monkeypatch.setattr(plane, "own_link", lambda: link)
    return plane


@pytest.mark.failure(row="rank-0-s-own-link-down-mid-sweep")
def test_rank_0_whose_link_is_down_names_its_own_host_in_the_roll_call_and_the_hang_line(fakes, monkeypatch):
    plane = _cut_off_plane(fakes, monkeypatch, DOWN)
    try:
        call = plane.roll_call()
        assert call.unreachable == [1, 2, 3] and call.cut_off
        line = plane.describe(call)
        assert line.startswith(f"rank 0's own host {plane.host} lost its link (eth0 lowerlayerdown): ranks 1, 2, 3 "
                               "cannot be reached from it")
        assert "host1" not in line and "is unreachable" not in line
        hang = plane._hang_line(3, "allreduce of 1 MiB", 1000.0)
        assert "not entered by" not in hang and "lost its link" in hang and "host2" not in hang
        assert call.link_status(1, 2) == "unobserved" and call.link_status(0, 2) == "unreachable"
        assert plane.together(call) is None  # it is the one cut off
        why = failure_line(RuntimeError("[../gloo/pair.cc:589] Connection closed by peer [10.0.0.1]:4321"),
                       SimpleEnv(), [{"rank": 1, "addr": "10.0.0.1", "host": "host1", "pid": 7}], 5.0, call)
        assert "lost rank" not in why and "host1" not in why  # the backend's words only
    finally:
        plane.close()


def test_a_partial_roll_call_probes_the_others_before_the_observer_judges_itself(fakes, monkeypatch):
    plane = _cut_off_plane(fakes, monkeypatch, UP)
    try:
        probed = {}

        def answer(addr, port, timeout):
            probed[port] = True
            return "no answer" if port in (9001, 9002) else "open"  # host3 answers: rank 0 is not cut off

        monkeypatch.setattr(control, "probe", answer)
        call = plane.roll_call([1, 2])
        assert call.unreachable == [1, 2] and call.sight is None and 9003 in probed
        assert call.link_status(1, 2) == "unreachable"  # two dead hosts of four: their link stays theirs
        assert "rank 1 on host1 (10.0.0.1) is unreachable" in plane.describe(call)
    finally:
        plane.close()


class SimpleEnv:
    rank = 0


# ----------------------------------------------------------------------------- the pairs verdict


def _cut_off_after(after: int):
    """Rank 0's link dies after round `after`: its links fail, the others' are unobserved."""
    def fail(s, d, number, rep):
        if (rep, number) <= (0, after):
            return None
        return "unreachable" if 0 in (s, d) else "unobserved"
    return fail


@pytest.mark.failure(row="rank-0-s-own-link-down-mid-pairs")
@pytest.mark.parametrize(("hosts", "after", "repetitions"), [(HOSTS, 1, 1), (HOSTS[:3], 3, 2)])
def test_pairs_names_rank_0_s_host_when_it_was_cut_off_and_stores_no_link_of_the_others_as_failed(hosts, after,
                                                                                                  repetitions):
    df = df_of(round_rows(hosts=hosts, fail=_cut_off_after(after), repetitions=repetitions))
    v = linkfaults.faults(df)
    assert [(c.kind, c.name) for c in v.named] == [("host", "n1")] and v.exit_code == 1
    assert v.undecided is None and v.unobserved >= 1
    assert {(f["src"], f["dst"]) for f in v.failed} <= {(a, b) for a in hosts for b in hosts if "n1" in (a, b)}
    lines = faultstext.render_faults(v)
    assert lines[0].startswith("# Unreachable host: n1 (every link since its first failure failed")
    assert any(line.startswith("#   rank 0's own host, which collects the rows") for line in lines)
    assert any(line.startswith(f"# Not observed ({v.unobserved} link(s), status unobserved)") for line in lines)
    assert "none can be blamed" not in "\n".join(lines)


def test_without_unobserved_rows_the_old_rules_hold():
    df = df_of(round_rows(fail=lambda s, d, number, rep: "unreachable" if number > 1 else None))
    v = linkfaults.faults(df)
    assert not v.named and v.exit_code == 3 and v.unobserved == 0


# ----------------------------------------------------------------------------- the ranks that still reach each other


class FakePlane:
    """What nobody_reaches_rank0 and judge_without_rank0 ask of a control plane."""

    def __init__(self, rank: int, keys: dict[int, str | None], call=None, timeout: float = 0.3):
        self.rank, self.keys, self.call, self.timeout = rank, keys, call, timeout

    def read(self, rank: int, key: str) -> str | None:
        return self.keys.get(rank)

    def answers(self, rank: int) -> bool:
        return rank in self.keys

    def roll_call(self):
        return self.call

    def describe(self, call) -> str:
        return "described"

    def together(self, call) -> str | None:
        return ControlPlane.together(self, call)  # type: ignore[arg-type]

    def _named(self):
        return {r: SimpleNamespace(host=f"node{r + 1}") for r in range(4)}


@pytest.mark.failure(row="rank-0-s-own-link-down-mid-pairs")
def test_pairs_ranks_leave_only_when_every_peer_they_reach_lost_rank_0_too():
    from commbench.harness.control import RollCall
    from commbench.workloads.pairs import nobody_reaches_rank0

    call = RollCall(answered=[1, 2, 3], unreachable=[0], observer=1)
    assert nobody_reaches_rank0(FakePlane(1, {2: "unreachable", 3: "unreachable"}), call)
    assert nobody_reaches_rank0(FakePlane(1, {2: "unreachable"}), call)  # rank 3 left since: no witness
    assert not nobody_reaches_rank0(FakePlane(1, {2: "unreachable", 3: "answers"}), call)  # a blackhole, not rank 0
    assert not nobody_reaches_rank0(FakePlane(1, {2: "unreachable", 3: None}), call)  # rank 3 never said: wait, go on


def test_a_sweep_rank_that_rank_0_never_called_says_once_that_the_others_still_reach_each_other(capsys):
    from commbench.harness.control import RollCall
    from commbench.harness.runner import judge_without_rank0

    env = SimpleNamespace(rank=1)
    judge_without_rank0(FakePlane(1, {}, RollCall(answered=[1, 2, 3], unreachable=[0], observer=1)), env)
    assert capsys.readouterr().err.endswith("rank 0 on node1 does not answer; ranks 1, 2, 3 still reach each other\n")
    env.rank = 2
    judge_without_rank0(FakePlane(2, {}, RollCall(answered=[1, 2, 3], unreachable=[0], observer=2)), env)
    assert capsys.readouterr().err == ""  # rank 1 says it
    cut = RollCall(answered=[2], unreachable=[0, 1, 3], observer=2, sight=observer.Sight(True, "lost its link", (0,)))
    judge_without_rank0(FakePlane(2, {}, cut), env)
    assert capsys.readouterr().err.endswith(": described\n")  # cut off itself: its own host, no "together"
