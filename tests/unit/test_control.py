"""harness/control.py without ranks: the mailboxes (harness/mailbox.py, real HTTP on this host,
between control planes of one process), the probe port, the roll call's verdicts, barrier and
relay, the watchdog's decisions, the stop guard (harness/stopguard.py) and serve()'s choice of
store. The stores are fakes (a dict for rank 0's main store, a recorder for torch's TCPStore and
PrefixStore), the heartbeat thread is not started, and time is a fake clock wherever a deadline or
a sleep matters: nothing here waits on the wall clock. The fakes and fixtures are tests/unit/controlfakes.py's."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from datetime import timedelta

import pytest

from commbench.harness import control, mailbox, stopguard
from commbench.harness.control import ControlPlane, Peer, RollCall, has_answered
from commbench.harness.tcpprobe import probe

from unit import controlfakes
from unit.controlfakes import HEARTBEAT, Clock, CountingStore, PrefixStore, Stop, TCPStore, entry

fakes, planes, rank0 = controlfakes.fakes, controlfakes.planes, controlfakes.rank0  # its fixtures, found here


# ---- mailboxes ---------------------------------------------------------------------------------


def test_every_rank_finds_every_other_through_the_main_store(planes):
    p0, p1, p2 = planes(3)
    peers = p1.peers()
    assert sorted(peers) == [0, 1, 2]
    for r, plane in enumerate((p0, p1, p2)):
        assert peers[r] == Peer(r, socket.gethostname(), "127.0.0.1", plane._own.server_address[1],
                                plane.pair_store.port, plane._probe.getsockname()[1])
    assert len({p.port for p in peers.values()} | {p.probe_port for p in peers.values()}) == 6
    assert [s.is_master for s in TCPStore.made] == [True, True, True]  # each rank serves its own pair store


def test_a_rank_reads_its_own_mailbox_and_its_peers(planes):
    p0, p1 = planes(2)
    p1.put("where", "point 3")
    assert p0.read(1, "where") == "point 3"
    assert p0.read(1, "nothing") is None  # 404: absent
    assert p0.read_all(1) == {"where": "point 3"}
    p0.put("mine", "x")
    assert p0.read(0, "mine") == "x" and p0.read_all(0) == {"mine": "x"} and p0.read(0, "nothing") is None
    p1.put("where", "point 4")  # a rank overwrites its own key
    assert p0.read(1, "where") == "point 4"


def test_a_mailbox_that_is_gone_reads_as_none_and_does_not_answer(planes):
    p0, p1 = planes(2)
    p1.put("beat", "1")
    assert p0.answers(1)
    p1.close()
    assert p0.read(1, "beat") is None and p0.read_all(1) is None and not p0.answers(1)


@pytest.mark.parametrize("timeout, longest, patience", [(100.0, 3.0, 3.0), (10.0, 3.0, 1.0), (1.0, 3.0, 0.2),
                                                        (10.0, 0.5, 0.5)])
def test_patience_is_shorter_under_a_short_timeout_but_never_below_a_fifth_of_a_second(fakes, timeout, longest,
                                                                                     patience):
    plane = object.__new__(ControlPlane)
    plane.timeout = timeout
    assert plane._patience(longest) == pytest.approx(patience)


# ---- probes ------------------------------------------------------------------------------------


def test_the_probe_port_answers_while_the_plane_lives(planes):
    p0, p1 = planes(2)
    port = p0.peers()[1].probe_port
    assert port != p0.peers()[1].port  # not the mailbox: reads never fill the probes' backlog
    assert [probe("127.0.0.1", port, timeout=5) for _ in range(3)] == ["open"] * 3  # connections are drained


# ---- roll call ---------------------------------------------------------------------------------


@pytest.mark.parametrize("before, after, answered", [
    (None, None, False), (None, {"beat": "3"}, False),  # first seen in the second read: not known to move
    ({"beat": "1"}, {"beat": "2"}, True), ({"beat": "2"}, {"beat": "2"}, False),
    ({"beat": "2"}, None, False), (None, {"beat": "1", "report": "stopped: bad input"}, True),
    ({"beat": "9"}, {"beat": "9", "report": ""}, False),  # an empty report says nothing
])
def test_a_rank_answered_when_its_heartbeat_moved_or_it_said_why_it_stopped(before, after, answered):
    assert has_answered(before, after) is answered


def test_a_roll_call_s_silent_ranks_and_the_status_their_links_get():
    call = RollCall(answered=[0, 4], hung=[3], gone=[1], unreachable=[2])
    assert call.silent == [1, 2, 3]
    assert [call.status(r) for r in range(5)] == [None, "error", "unreachable", "timeout", None]


def test_a_roll_call_reads_twice_and_probes_only_the_silent(rank0, monkeypatch):
    plane = rank0(6, timeout=10.0)
    reads = {1: [{"beat": "1"}, {"beat": "2"}],  # moved: answered
             2: [{"beat": "5"}, {"beat": "5"}],  # stuck, its process there: hung
             3: [None, None],  # never read, its host refuses: gone
             4: [{"beat": "1"}, None],  # read once, then nothing answers: unreachable
             5: [None, {"beat": "1", "report": "bad input"}]}  # reported why it stopped: answered
    monkeypatch.setattr(plane, "read_all", lambda r: reads[r].pop(0))
    probed = []

    def fake_probe(addr, port, timeout):
        probed.append((addr, port, timeout))
        return {9002: "open", 9003: "refused", 9004: "no route"}[port]

    monkeypatch.setattr(control, "probe", fake_probe)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    call = plane.roll_call()
    assert (call.answered, call.hung, call.gone, call.unreachable) == ([0, 1, 5], [2], [3], [4])
    assert call.last == {1: {"beat": "2"}, 2: {"beat": "5"}, 3: {}, 4: {"beat": "1"},
                         5: {"beat": "1", "report": "bad input"}}
    assert sorted(probed) == [(f"10.0.0.{r}", 9000 + r, 1.0) for r in (2, 3, 4)]  # patience under --timeout 10
    assert clock.slept == [1.0]  # one wait between the reads: ROLL_CALL_S, shortened by --timeout
    assert reads == {r: [] for r in range(1, 6)}


def test_a_roll_call_of_named_ranks_leaves_out_this_rank_and_the_others(rank0, monkeypatch):
    plane = rank0(4)
    asked = []
    monkeypatch.setattr(plane, "read_all", lambda r: asked.append(r) or {"beat": str(len(asked))})
    monkeypatch.setattr(control, "time", Clock())
    call = plane.roll_call([0, 2])
    assert asked == [2, 2] and call.answered == [0, 2] and call.silent == [] and list(call.last) == [2]


def test_describe_names_who_is_silent_and_what_that_points_at(rank0):
    plane = rank0(5)
    assert plane.describe(RollCall(answered=[0, 1, 2, 3, 4])).startswith("every rank answered the roll call")
    line = plane.describe(RollCall(answered=[0, 1], hung=[2], gone=[3], unreachable=[4]))
    assert line == ("rank 4 on host4 (10.0.0.4) is unreachable: neither it nor its host answers (a link down, a "
                    "blackhole route or a dead host); rank 2 on host2 is hung: it does not answer but its process is "
                    "there (stopped, deadlocked or busy); rank 3 on host3 is gone: its host answers but the process "
                    "is not there (killed or crashed); ranks 1 answered")
    assert not plane.describe(RollCall(answered=[0], gone=[1, 2, 3, 4])).endswith("answered")


def test_who_answered_names_ranks_only_and_absence_says_how_long(rank0):
    plane = rank0(4, timeout=10.0)
    assert plane.who_answered(RollCall(answered=[0, 3], gone=[1], unreachable=[2])) == \
        "ranks 1, 2 no longer answer; rank 3 answered"
    assert plane.who_answered(RollCall(answered=[0, 1, 2], hung=[3])) == "rank 3 no longer answers; ranks 1, 2 answered"
    assert plane.who_answered(RollCall(answered=[0])) == ""
    assert plane.absence(12.4) == ("this process was suspended for 12 s (SIGSTOP, a debugger or a frozen host), "
                                   "longer than --timeout 10 s: the other ranks went on without it")
    assert "longer than" not in plane.absence(6.0)


# ---- suspension, from the heartbeat ------------------------------------------------------------


def test_the_heartbeat_counts_beats_and_records_the_times_the_process_did_not_run(rank0, monkeypatch):
    plane = rank0(2, timeout=10.0)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    plane._tick = clock.now
    plane._stop = Stop(clock, turns=3, step=[0.5, 8.0, 0.5])  # the second wait took 8 s: a stop
    HEARTBEAT(plane)  # the loop itself, here rather than on its thread
    assert plane.read(0, "beat") == "4"
    assert plane._naps == [(1008.5, 8.0)]


@pytest.mark.parametrize("tick_ago, naps, within, expected", [
    (0.5, [], None, 0.0),  # running as it should
    (0.5, [(-3.0, 7.0)], None, 7.0),  # stopped 7 s, woke 3 s ago
    (0.5, [(-3.0, 4.0)], None, 0.0),  # 4 s: under SUSPENDED_S and half of --timeout
    (0.5, [(-30.0, 9.0)], None, 0.0),  # woke longer ago than --timeout + STUCK_SLACK_S (25 s)
    (0.5, [(-30.0, 9.0)], 40.0, 9.0),  # ... but within what the caller asks about
    (6.0, [(-3.0, 5.5)], None, 6.0),  # not beaten for 6 s: stopped now
])
def test_suspended_is_the_longest_recent_gap_past_the_threshold(rank0, monkeypatch, tick_ago, naps, within,
                                                                 expected):
    plane = rank0(2, timeout=10.0)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    plane._tick = clock.now - tick_ago
    plane._naps = [(clock.now + woke, gap) for woke, gap in naps]
    assert plane.suspended_s(within) == pytest.approx(expected)


# ---- barrier and relay -------------------------------------------------------------------------


def test_a_barrier_waits_for_arrivals_drops_the_silent_and_gives_up_at_its_deadline(rank0, monkeypatch):
    plane = rank0(4)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    polls = {1: 0, 2: 0, 3: 0}

    def boxes(r):
        polls[r] += 1
        if r == 1:
            return {"at/x": "1"} if polls[r] >= 2 else {}  # arrives on the second poll
        if r == 2:
            return {"beat": "1"}  # answers, never arrives
        return None  # does not answer: not waited for

    monkeypatch.setattr(plane, "read_all", boxes)
    assert plane.barrier("x", [0, 1, 2, 3], deadline_s=1.0) == [2]
    assert plane.read(0, "at/x") == "1"  # this rank's own arrival, for the others
    assert polls[1] == 2 and polls[3] == 1 and 20 <= polls[2] <= 21  # 1 s of 0.05 s naps
    assert 1001.0 <= clock.now <= 1001.06


def test_a_barrier_everyone_reached_returns_at_once(rank0, monkeypatch):
    plane = rank0(3)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    monkeypatch.setattr(plane, "read_all", lambda r: {"at/done": "1"})
    assert plane.barrier("done", [0, 1, 2], deadline_s=30.0) == [] and clock.slept == []


def test_relay_takes_the_key_from_the_first_rank_that_has_it_and_keeps_it(rank0, monkeypatch):
    plane = rank0(4)
    monkeypatch.setattr(control, "time", Clock())
    monkeypatch.setattr(plane, "read_all", lambda r: {1: None, 2: {"plan": "p2"}, 3: {"plan": "p3"}}[r])
    assert plane.relay("plan", [1, 2, 3], deadline_s=5.0) == "p2"
    assert plane.read(0, "plan") == "p2"  # a rank cut off from rank 2 can read it here


def test_relay_gives_up_when_no_rank_answers_for_its_silence_or_at_its_deadline(rank0, monkeypatch):
    plane = rank0(3, timeout=10.0)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    monkeypatch.setattr(plane, "read_all", lambda r: None)
    assert plane.relay("plan", [1, 2], deadline_s=60.0, silence_s=2.0) is None
    assert 2.0 < clock.now - 1000.0 <= 2.2  # silence, not the deadline
    clock2 = Clock()
    monkeypatch.setattr(control, "time", clock2)
    monkeypatch.setattr(plane, "read_all", lambda r: {"beat": "1"})  # they answer, nobody has it
    assert plane.relay("plan", [1, 2], deadline_s=3.0) is None
    assert 3.0 <= clock2.now - 1000.0 <= 3.1 and plane.read(0, "plan") is None


# ---- naming a hang -----------------------------------------------------------------------------


def test_enter_and_leave_mark_the_points(rank0, monkeypatch):
    plane = rank0(2)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    plane.enter("all_reduce 1 MiB")
    assert plane.read(0, "at") == "1" and plane._inside == (1, "all_reduce 1 MiB", 1000.0)
    clock.now += 2
    plane.leave()
    assert plane._inside is None and plane._progress == (1, "what follows all_reduce 1 MiB", 1002.0)
    plane.enter("all_reduce 2 MiB")
    assert plane.read(0, "at") == "2" and plane._progress == (2, "all_reduce 2 MiB", 1002.0)


def test_the_hang_line_names_ranks_behind_and_the_silent(rank0, monkeypatch):
    plane = rank0(4, timeout=20.0)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    call = RollCall(answered=[0, 1, 2], unreachable=[3], last={1: {"at": "5"}, 2: {"at": "4"}, 3: {}})
    monkeypatch.setattr(plane, "roll_call", lambda ranks=None: call)
    line = plane._hang_line(5, "all_reduce 64 MiB", clock.now - 12)
    assert line.startswith("commbench: hang: all_reduce 64 MiB has waited 12 s of --timeout 20 s; not entered by "
                           "rank 2 on host2, rank 3 on host3; rank 3 on host3 (10.0.0.3) is unreachable")
    call = RollCall(answered=[0, 1, 2, 3], last={1: {"at": "5"}, 2: {"at": "5"}, 3: {"at": "6"}})
    assert plane._hang_line(5, "x", clock.now).endswith("; every rank answers the control plane (a slow or stuck "
                                                        "collective, not a lost rank)")


class Left(Exception):
    """os._exit, as a test sees it."""


@pytest.fixture
def leaving(monkeypatch):
    said: list[str] = []

    def exit_(code):
        raise Left(code)

    monkeypatch.setattr(control.os, "_exit", exit_)
    return said


def test_a_stuck_point_with_every_peer_answering_is_only_long(rank0, monkeypatch, leaving):
    plane = rank0(3)
    monkeypatch.setattr(plane, "roll_call", lambda ranks=None: RollCall(answered=[0, 1, 2]))
    plane._leave_if_stuck(leaving.append, "all_reduce 1 GiB", 30.0)
    assert leaving == []


def test_a_stuck_point_cut_off_from_every_peer_blames_this_rank_s_own_link_and_leaves(rank0, monkeypatch,
                                                                                     leaving):
    plane = rank0(3, timeout=10.0)
    monkeypatch.setattr(control, "time", Clock())
    plane._tick = control.time.monotonic()
    monkeypatch.setattr(plane, "roll_call", lambda ranks=None: RollCall(answered=[0], unreachable=[1, 2]))
    with pytest.raises(Left) as left:
        plane._leave_if_stuck(leaving.append, "all_reduce 1 MiB", 26.0)
    assert left.value.args == (3,)
    host = socket.gethostname()
    assert leaving == [f"commbench: rank 0 on {host}: all_reduce 1 MiB has not returned after 26 s (--timeout 10 s) "
                       "and no other rank answers it: this rank's own link or host is the likely cause: the backend "
                       "is blocked on a dead link; leaving (every finished row is already written)"]


def test_a_stuck_point_with_some_peers_silent_describes_them(rank0, monkeypatch, leaving):
    plane = rank0(3, timeout=10.0)
    monkeypatch.setattr(control, "time", Clock())
    plane._tick = control.time.monotonic()
    monkeypatch.setattr(plane, "roll_call", lambda ranks=None: RollCall(answered=[0, 1], gone=[2]))
    with pytest.raises(Left):
        plane._leave_if_stuck(leaving.append, "all_reduce 1 MiB", 26.0)
    assert "and rank 2 on host2 is gone: its host answers but the process is not there" in leaving[0]


def test_a_rank_that_was_suspended_says_so_instead_of_blaming_its_peers(rank0, monkeypatch, leaving):
    plane = rank0(3, timeout=10.0)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    plane._tick = clock.now
    plane._naps = [(clock.now - 1.0, 30.0)]
    monkeypatch.setattr(plane, "roll_call", lambda ranks=None: RollCall(answered=[0, 1], gone=[2]))
    with pytest.raises(Left):
        plane._leave_if_stuck(leaving.append, "all_reduce 1 MiB", 31.0)
    assert leaving == [f"commbench: rank 0 on {socket.gethostname()}: in all_reduce 1 MiB, this process was "
                       "suspended for 30 s (SIGSTOP, a debugger or a frozen host), longer than --timeout 10 s: the "
                       "other ranks went on without it (rank 2 no longer answers; rank 1 answered); leaving (every "
                       "finished row is already written)"]


def test_the_watchdog_warns_once_a_point_and_checks_once_a_boundary(rank0, monkeypatch):
    plane = rank0(2, timeout=10.0)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    monkeypatch.setattr(plane, "_hang_line", lambda seq, label, started: f"hang {seq} {label}")
    checked = []
    monkeypatch.setattr(plane, "_leave_if_stuck", lambda say, label, idle: checked.append((label, idle)))
    said: list[str] = []
    plane.enter("p1")
    plane._stop = Stop(clock, turns=120, step=0.25)  # 30 s in the watchdog's quarter-second turns
    plane._watchdog(said.append, 5.0)
    assert said == ["hang 1 p1"]  # once at 5 s, not every turn after
    assert checked == [("p1", 25.0)]  # --timeout + STUCK_SLACK_S, once for this boundary
    plane.leave()
    plane.enter("p2")
    plane._stop = Stop(clock, turns=8, step=0.25)
    plane._watchdog(said.append, 5.0)
    assert said == ["hang 1 p1"]  # p2 has waited 2 s


def test_only_rank_0_warns(planes, monkeypatch):
    _, p1 = planes(2, timeout=10.0)
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    monkeypatch.setattr(p1, "_hang_line", lambda *a: "hang")
    monkeypatch.setattr(p1, "_leave_if_stuck", lambda *a: None)
    said: list[str] = []
    p1.enter("p1")
    p1._stop = Stop(clock, turns=40, step=0.25)
    p1._watchdog(said.append, 5.0)
    assert said == []


# ---- serve and the stores ----------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1])
def test_serve_makes_rank_0_the_store_s_server(fakes, monkeypatch, rank):
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    plane = ControlPlane.serve("10.0.0.1", 29400, rank, 2, None, 30.0)
    try:
        main = TCPStore.made[0]
        assert (main.host, main.port, main.world, main.is_master) == ("10.0.0.1", 29400, 2, rank == 0)
        assert main.timeout.total_seconds() == 30.0 and plane.main is main
        group = plane.group_store()
        assert isinstance(group, PrefixStore) and (group.prefix, group.store) == ("commbench/pg", main)
    finally:
        plane.close()


def test_under_torchrun_s_agent_store_every_rank_connects_with_the_attempt_s_prefix(fakes, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    plane = ControlPlane.serve("10.0.0.1", 29400, 0, 2, None, 30.0)
    try:
        assert TCPStore.made[0].is_master is False
        assert isinstance(plane.main, PrefixStore) and plane.main.prefix == "/worker/attempt_2"
        assert plane.main.store is TCPStore.made[0]
    finally:
        plane.close()


def test_a_pair_s_store_is_this_rank_s_own_or_a_client_of_the_peer_s(rank0):
    plane = rank0(3, timeout=7.0)
    assert plane.store_of(0) is plane.pair_store
    client = plane.store_of(2)
    assert (client.host, client.port, client.world, client.is_master) == ("10.0.0.2", 8002, 1, False)
    assert client.timeout.total_seconds() == 7.0


def test_a_reader_that_gave_up_is_no_error_but_anything_else_is_one_line(capsys):
    box = object.__new__(mailbox.Mailbox)
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        box.handle_error(None, ("10.0.0.2", 5555))
    assert capsys.readouterr().err == ""
    try:
        raise ValueError("bad request line")
    except ValueError:
        box.handle_error(None, ("10.0.0.2", 5555))
    assert capsys.readouterr().err == ("commbench: control plane: a read from 10.0.0.2 failed: ValueError: "
                                       "bad request line\n")


# ---- bounded ends: the peers gathered at start, a stop that the network cannot hold up ----------


@pytest.mark.failure(row="network-gone-control-plane")
def test_the_peers_are_gathered_once_at_start_and_the_store_is_never_read_again(fakes, monkeypatch):
    store = CountingStore()
    for r in (1, 2):
        store.set(control._PEERS + str(r), entry(r))
    plane = ControlPlane(store, 0, 3, "10.0.0.0", 10.0)
    try:
        assert plane.gather(5.0) == [] and sorted(plane.peers()) == [0, 1, 2]
        reads = store.reads
        monkeypatch.setattr(control, "probe", lambda addr, port, timeout: "silent")
        monkeypatch.setattr(control, "time", Clock())
        monkeypatch.setattr(plane, "read_all", lambda r: None)
        call = plane.roll_call()
        assert call.unreachable == [1, 2] and "rank 2 on host2 (10.0.0.2)" in plane.describe(call)
        assert plane.peers()[2].probe_port == 9002 and store.reads == reads  # the roll call read no store
    finally:
        plane.close()


@pytest.mark.failure(row="network-gone-control-plane")
def test_a_store_that_no_longer_answers_holds_no_control_plane_call(fakes, monkeypatch):
    store = CountingStore()
    store.held.set()  # every read of rank 0's store blocks: the network went away before the gather ended
    plane = ControlPlane(store, 0, 3, "10.0.0.0", 2.0)
    try:
        monkeypatch.setattr(control, "probe", lambda addr, port, timeout: "silent")
        monkeypatch.setattr(control, "time", Clock())  # the roll call's own wait between its reads
        monkeypatch.setattr(plane, "read_all", lambda r: None)
        started = time.monotonic()
        call = plane.roll_call()  # waits a read's patience (0.2 s under --timeout 2) for the peers, no probe
        line = plane.describe(call)
        assert time.monotonic() - started < 2.0
        assert call.unreachable == [1, 2] and line.startswith("rank 1 on an unknown host")
    finally:
        store.hold.set()
        plane.close()


def test_the_stop_guard_leaves_unless_python_s_handler_let_the_signal_by():
    guard = object.__new__(stopguard.StopGuard)
    guard.asked, guard.still, guard.tick, guard.handled, guard.raised = None, 0.0, 5, -1, False

    def look(signals: bytes, waited: float):
        guard.tick += 1
        return guard.step(signals, waited)

    assert look(b"\x00\x11", 0.0) is None and guard.asked is None  # neither SIGINT nor SIGTERM
    assert look(bytes([signal.SIGTERM]), 0.0) is None and guard.asked == signal.SIGTERM
    assert [look(b"", 1.0) for _ in range(5)] == [None] * 4 + [143]  # the handler never ran: stuck
    guard.asked, guard.handled, guard.raised = None, guard.tick, False  # an old run, before the next signal
    look(bytes([signal.SIGINT, signal.SIGTERM]), 0.0)
    guard.handled, guard.raised = guard.tick, True  # it ran and raised: stopping, but not closed
    assert [look(b"", 2.5) for _ in range(2)] == [None, 130]  # the first signal's code
    guard.asked = None
    guard.handled, guard.raised = guard.tick, False  # it ran (just before the byte was read) and let it by
    look(bytes([signal.SIGTERM]), 0.0)
    assert [look(b"", 9.0) for _ in range(3)] == [None] * 3 and guard.asked is None


@pytest.mark.failure(
    row="network-gone-control-plane",
    section="Lost ranks and broken links",
    failure="the network goes away while the ranks are blocked in a collective or a read of rank 0's store, and "
            "they are asked to stop",
    does="the peers' addresses were gathered at start (rank 0's store is never read later; a roll call waits for "
         "nothing that cannot answer); a rank whose main thread stays blocked 5 s after SIGTERM / SIGINT says "
         "`asked to stop (SIGTERM) but blocked for 5 s in ...; leaving without it` and exits 143 / 130, rows kept",
)
def test_a_rank_blocked_in_a_store_read_leaves_when_asked_to_stop(fakes, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(stopguard, "STOP_GRACE_S", 0.3)
    left: list[tuple[int, float]] = []
    monkeypatch.setattr(stopguard.StopGuard, "leave", lambda self, code: left.append((code, time.monotonic())))
    handled: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: handled.append(signum))
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=1.5), wait_for_workers=False)
    plane = ControlPlane.serve("127.0.0.1", 1, 0, 1, None, 10.0)  # the fakes' store; the guard is real
    try:
        assert plane._guard is not None
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        started = time.monotonic()
        with pytest.raises(RuntimeError):
            server.get("never")  # the main thread inside a C++ call that does not give back for 1.5 s
        assert left and left[0][0] == 143 and left[0][1] - started < 1.2, left  # while the read still blocked
        assert handled == [signal.SIGTERM]  # Python's own handler ran only once the call returned
    finally:
        plane.close()
        signal.signal(signal.SIGTERM, previous)
    assert signal.set_wakeup_fd(-1) == -1  # close() put the previous wakeup fd (none) back


def test_the_stop_guard_obeys_a_handler_that_lets_the_signal_by_and_puts_everything_back(fakes, monkeypatch):
    monkeypatch.setattr(stopguard, "STOP_GRACE_S", 0.3)
    left: list[int] = []
    monkeypatch.setattr(stopguard.StopGuard, "leave", lambda self, code: left.append(code))
    ignore = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: ignore.append(signum))  # a rank reporting
    plane = ControlPlane.serve("127.0.0.1", 1, 0, 1, None, 10.0)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.8)
        assert ignore == [signal.SIGTERM] and left == []
    finally:
        plane.close()
    try:
        assert signal.getsignal(signal.SIGTERM) is not previous and signal.getsignal(signal.SIGTERM).__name__ == \
            "<lambda>"  # the test's own handler, unwrapped
        assert signal.set_wakeup_fd(-1) == -1
    finally:
        signal.signal(signal.SIGTERM, previous)
