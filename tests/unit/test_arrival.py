"""harness/arrival.py without rank processes: reaching rank 0's port (the probe's own words are
test_tcpprobe.py's), the count on a real in-process TCPStore (rank 0's side and another rank's, on
threads), who never came and the one line that names them, and each launcher's rank -> host map."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch.distributed as dist

from commbench.core.errors import RuntimeFailure
from commbench.harness import arrival
from commbench.harness.arrival import Absent

from unit.arrivalstores import client_store, closed_port, env_of, server_store


# ---- reaching rank 0 -------------------------------------------------------------------------


def test_reach_returns_none_once_the_port_accepts():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        assert arrival.reach("127.0.0.1", listener.getsockname()[1], time.monotonic() + 5) is None


def test_reach_gives_up_at_the_deadline_with_the_last_answer():
    naps: list[float] = []
    start = time.monotonic()
    said = arrival.reach("127.0.0.1", closed_port(), start + 0.3, sleep=lambda s: (naps.append(s), time.sleep(s)))
    assert said == "refused"
    assert naps and time.monotonic() - start < 2.0


def test_reach_rank0_raises_one_line_naming_rank_0s_address(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    port = closed_port()
    with pytest.raises(RuntimeFailure) as info:
        arrival.reach_rank0(env_of(2, 4, port), 0.3)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith(f"rank 2 could not reach rank 0 at 127.0.0.1:{port} within 0.3 s")
    assert "nothing listens" in line


def test_rank_0_does_not_probe_its_own_port(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    before = time.monotonic()
    assert arrival.reach_rank0(env_of(0, 4, closed_port()), 30) >= before + 30


def test_unreached_line_words():
    line = arrival.unreached_line(3, "10.1.0.1", 29400, 15, "no route")
    assert line == ("rank 3 could not reach rank 0 at 10.1.0.1:29400 within 15 s: no route to it; check this host's "
                    "link (ip link, ibstat), its route to MASTER_ADDR and the firewall")


# ---- the count on rank 0's store ---------------------------------------------------------------


def test_every_rank_in_returns_at_once():
    store = server_store(2)
    assert arrival.register(store, 0, "a") == 1
    assert arrival.register(client_store(store), 1, "b") == 2
    assert arrival.await_all(store, 2, time.monotonic() + 5) == 2
    assert arrival.missing(store, 2) == []


def test_a_rank_that_never_came_is_missing_and_giving_up_stops_the_others():
    store = server_store(3)
    other = client_store(store)
    arrival.register(store, 0, "a")
    arrival.register(other, 1, "b")
    assert arrival.await_all(store, 3, time.monotonic() + 0.2) == 2
    assert arrival.give_up(store) == 2
    assert arrival.await_all(other, 3, time.monotonic() + 5) < 0  # at once, not at its deadline
    assert arrival.missing(store, 3) == [2]
    assert arrival.register(client_store(store), 2, "c") < 0  # one that comes late learns it too


def ranks_0_and_1_only(world: int = 3, port: int = 1, go_on: bool = False,
                       store: dist.TCPStore | None = None, quiet=lambda: None) -> dict[int, object]:
    """Ranks 0 and 1 of `world` arrive (rank 1 on a thread), the others never do; what each arrive()
    returned or raised (its text)."""
    store = store or server_store(world)
    got: dict[int, object] = {}

    def rank(r: int, s) -> None:
        try:
            got[r] = arrival.arrive(s, env_of(r, world, port), 0.5, time.monotonic() + 0.5, quiet, go_on)
        except RuntimeFailure as exc:
            got[r] = str(exc)

    one = threading.Thread(target=rank, args=(1, client_store(store)))
    one.start()
    rank(0, store)
    one.join(15)
    return got


def test_arrive_rank_0_names_the_absent_rank_and_the_other_says_a_short_line(monkeypatch):
    """Rank 0 and rank 1 arrive (on threads), rank 2 never does; its host is told by
    COMMBENCH_RANK_HOSTS and answers with a refusal (127.0.0.1, a closed port)."""
    monkeypatch.setenv("COMMBENCH_RANK_HOSTS", "h0,h1,localhost")
    store = server_store(3)
    port = closed_port()
    acks_when_quiet: list[int] = []
    errors = ranks_0_and_1_only(3, port, store=store,
                                quiet=lambda: acks_when_quiet.append(int(store.add(arrival.ACK, 0))))
    assert errors[1] == (f"rank 1: the process group at 127.0.0.1:{port} did not form within 0.5 s (rank 0 names "
                         "the ranks that never joined)")
    assert str(errors[0]).startswith(f"rank 2 (host localhost, 127.0.0.1: its host answers, but no rank came from "
                                     f"it) never joined the process group at 127.0.0.1:{port} within 0.5 s; check "
                                     "that the rank started there")
    assert "h0" not in str(errors[0]) and "h1" not in str(errors[0])
    assert int(store.add(arrival.ACK, 0)) == 1  # rank 1 read that rank 0 gave up
    assert acks_when_quiet == [0]  # rank 1 stopped its other store use first; rank 0 never calls it


def test_arrive_goes_on_when_everyone_came():
    store = server_store(2)
    other = client_store(store)
    done = threading.Event()
    t = threading.Thread(target=lambda: (arrival.arrive(other, env_of(1, 2, 1), 5, time.monotonic() + 5),
                                         done.set()))
    t.start()
    arrival.arrive(store, env_of(0, 2, 1), 5, time.monotonic() + 5)
    t.join(5)
    assert done.is_set()


def test_a_run_that_may_go_on_goes_on_with_the_ranks_that_joined(monkeypatch):
    monkeypatch.setenv("COMMBENCH_RANK_HOSTS", "h0,h1,localhost,localhost")
    got = ranks_0_and_1_only(4, closed_port(), go_on=True)
    zero, one = got[0], got[1]
    assert isinstance(zero, arrival.Joined) and isinstance(one, arrival.Joined), got
    assert zero.ranks == one.ranks == [0, 1]
    assert [zero.rank_of(0), one.rank_of(1)] == [0, 1]
    assert one.absent is None and one.line == ""  # rank 0 alone names them
    assert zero.absent is not None and zero.absent.ranks == [2, 3]
    assert "2 of 4 ranks, rank 2 (host localhost" in zero.line
    assert "the 2 ranks that did go on without them, renumbered 0-1 in order" in zero.line


def test_two_ranks_are_enough_to_go_on_and_a_run_that_may_not_stops():
    got = ranks_0_and_1_only(3, go_on=True)
    assert isinstance(got[0], arrival.Joined)  # two ranks are enough
    got = ranks_0_and_1_only(3)
    assert "rank 2 never joined the process group" in str(got[0]), got
    assert "did not form" in str(got[1]), got


def test_a_rank_that_came_after_rank_0_went_on_stops_with_a_short_line():
    store = server_store(3)
    store.set(arrival.JOINED, "0,1")
    store.add(arrival.COUNT, 2 - arrival.GAVE_UP)  # ranks 0 and 1 were in when rank 0 gave up
    with pytest.raises(RuntimeFailure, match="rank 2: the process group at .* did not form"):
        arrival.arrive(client_store(store), env_of(2, 3, 1), 0.5, time.monotonic() + 0.5, go_on=True)


def test_a_store_that_went_away_is_one_short_line():
    class Gone:
        def set(self, key, value):
            raise dist.DistNetworkError("Failed to recv, got 0 bytes")

    with pytest.raises(RuntimeFailure) as info:
        arrival.arrive(Gone(), env_of(1, 2, 29400), 5, time.monotonic() + 5)  # type: ignore[arg-type]
    assert str(info.value).startswith("rank 1: the process group at 127.0.0.1:29400 did not form")


# ---- the line ----------------------------------------------------------------------------------


def test_one_rank_with_no_answer_from_its_host():
    absent = Absent([3], 4, {3: "n4"}, {"n4": "no answer"}, {"n4": "10.0.0.4"})
    assert arrival.never_joined_line(absent, "10.0.0.1:29400", 15) == (
        "rank 3 (host n4, 10.0.0.4: no answer from it) never joined the process group at 10.0.0.1:29400 within "
        "15 s; check its link (ip link, ibstat) and its route to MASTER_ADDR")


def test_a_rank_without_a_known_host_is_named_by_rank_alone():
    line = arrival.never_joined_line(Absent([5], 8), "m:1", 30)
    assert line.startswith("rank 5 never joined the process group at m:1 within 30 s; check that it started")


def test_a_host_not_probed_is_still_named():
    line = arrival.never_joined_line(Absent([1], 2, {1: "here"}), "m:1", 30)
    assert line.startswith("rank 1 (host here) never joined")


def test_many_ranks_are_counted_past_the_first_few():
    ranks = list(range(1, 21))
    line = arrival.never_joined_line(Absent(ranks, 64), "m:1", 10)
    assert line.startswith("20 of 64 ranks, rank 1, rank 2,")
    assert "and 12 more never joined" in line
    assert "\n" not in line


def test_every_other_rank_silent_points_at_this_hosts_own_link():
    absent = Absent([1, 2, 3], 4, {1: "n2", 2: "n3", 3: "n4"}, dict.fromkeys(("n2", "n3", "n4"), "no answer"))
    assert "this host's own link or route is the likely cause" in arrival.never_joined_line(absent, "m:1", 10)


def test_probe_hosts_skips_this_host_and_probes_the_others(monkeypatch):
    monkeypatch.setattr(arrival, "resolve", lambda host, timeout=2.0: {"far": "127.0.0.1"}.get(host))
    absent = Absent([1, 2, 3], 4, {1: "me", 2: "far", 3: "nowhere"})
    arrival.probe_hosts(absent, "me", closed_port())
    assert absent.said == {"far": "refused"}
    assert absent.addrs == {"far": "127.0.0.1"}


# ---- where each rank runs ----------------------------------------------------------------------


def test_slurm_block_placement():
    env = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    assert arrival.slurm_hosts(env, 5) == {0: "n1", 1: "n1", 2: "n2", 3: "n2", 4: "n3"}


def test_slurm_cyclic_placement_and_step_variables_first():
    env = {"SLURM_JOB_NODELIST": "x[1-9]", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
           "SLURM_TASKS_PER_NODE": "9", "SLURM_DISTRIBUTION": "cyclic:block"}
    assert arrival.slurm_hosts(env, 4) == {0: "n1", 1: "n2", 2: "n1", 3: "n2"}


@pytest.mark.parametrize("env", [
    {},
    {"SLURM_JOB_NODELIST": "n[1-", "SLURM_TASKS_PER_NODE": "1"},
    {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "weird"},
    {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1"},  # one count for two nodes
    {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_DISTRIBUTION": "plane=2"},
])
def test_slurm_that_does_not_tell(env):
    assert arrival.slurm_hosts(env, 2) == {}


def test_a_huge_repeat_count_is_not_expanded():
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1(x99999999999)"}
    assert arrival.slurm_hosts(env, 2) == {0: "n1", 1: "n2"}


def test_lab_hosts_in_the_order_of_its_hosts_file(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n10.0.0.1 labnode1\n# a comment\n10.0.0.2 labnode2\n")
    assert arrival.lab_hosts(str(hosts)) == {0: "labnode1", 1: "labnode2"}
    assert arrival.lab_hosts(str(tmp_path / "none")) == {}


def test_launcher_hosts_by_launcher(monkeypatch):
    assert arrival.launcher_hosts("mpi", 2, {}) == {}
    assert arrival.launcher_hosts("local", 2, {}) == {0: socket.gethostname(), 1: socket.gethostname()}
    assert arrival.launcher_hosts("mpi", 2, {"COMMBENCH_RANK_HOSTS": "a, b"}) == {0: "a", 1: "b"}
    assert arrival.launcher_hosts("mpi", 3, {"COMMBENCH_RANK_HOSTS": "a,b"}) == {}  # not one a rank: ignored
    monkeypatch.setattr(arrival, "lab_hosts", lambda: {0: "l1", 1: "l2"})
    assert arrival.launcher_hosts("lab", 2, {}) == {0: "l1", 1: "l2"}
    assert arrival.launcher_hosts("lab", 3, {}) == {}  # fewer hosts than ranks: not the lab's placement


def test_torchrun_blocks_name_an_absent_rank_by_a_rank_of_its_node():
    hosts = {0: "a", 1: "a", 3: "b"}
    found = arrival.block_hosts([2, 4, 5], 2, hosts.get, 6)
    assert found == {2: "b"}  # ranks 4 and 5: nobody of their node came


def test_lab_run_tells_every_rank_each_ranks_host_in_rank_order():
    from commbench.lab.ranklaunch import rank_env
    from commbench.lab.state import LabNode, LabState

    nodes = [LabNode(f"xn{i}", f"10.9.0.{i}", f"xv{i}", 1500, "1gbit") for i in (1, 2, 3)]
    env = rank_env(LabState("10.9.0.0/24", "xbr", nodes), 2)
    assert env["COMMBENCH_RANK_HOSTS"] == "xn1,xn2,xn3"
    assert arrival.launcher_hosts("lab", 3, env) == {0: "xn1", 1: "xn2", 2: "xn3"}
