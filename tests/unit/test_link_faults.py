"""`commbench pairs` on a sick fabric, without ranks: links whose transfer failed (status
unreachable / timeout / error) judged by their pattern (linkfaults.suspects, faults, confirm_plan,
render_faults), and the bandwidth ranking leaving them out (docs/PAIRS.md, "When links fail")."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from commbench.analysis.pairs import faultstext, linkfaults, linkrank
from commbench.analysis.pairs.linkfaults import Culprit
from commbench.cli.app import main
from commbench.workloads import tournament

from unit.synthetic import frame, make_rows, write

RUN = "20250101-000000-fault1"
HOSTS = ["n1", "n2", "n3", "n4"]
BASE = make_rows(collectives=("sendrecv",), sizes=(16 << 20,), placements=(False,), repetitions=1, run_id=RUN,
                 hosts=tuple(HOSTS), backend="gloo", device_name="cpu")[0]


def row(hosts, s, d, status=None, bidir=False, confirm=None, rep=0, gbps=0.12, run_id=RUN):
    failed = status in linkrank.FAILED
    bw = math.nan if failed else gbps
    return {**BASE, "run_id": run_id, "workload": "pairs", "collective": "sendrecv_bidir" if bidir else "sendrecv",
            "dtype": "uint8", "op": None, "repetition": rep, "busbw_GBps": bw, "algbw_GBps": bw,
            "time_us": math.nan if failed else (16 << 20) / gbps / 1e3, "wrong": None if failed else 0,
            "src_host": hosts[s], "dst_host": hosts[d], "src_rank": s, "dst_rank": d,
            "world_size": len(hosts), "ranks_per_node": 1, "status": status,
            "error": f"peer rank {d} did not answer ({status})" if failed else None, "confirm": confirm}


def mesh_rows(hosts=HOSTS, fail=lambda s, d: None, bidir=False, repetitions=1, confirm=(), run_id=RUN):
    """Every pair of ranks (both directions unless bidir); fail(src, dst) -> the row's status.
    confirm: (src, dst, status) of the confirmation round (sendrecv: both directions)."""
    ranks = range(len(hosts))
    pairs = list(itertools.combinations(ranks, 2) if bidir else itertools.permutations(ranks, 2))
    rows = [row(hosts, s, d, fail(s, d), bidir, rep=rep, run_id=run_id) for rep in range(repetitions) for s, d in pairs]
    for s, d, status in confirm:
        for a, b in [(s, d)] if bidir else [(s, d), (d, s)]:
            rows.append(row(hosts, a, b, status, bidir, confirm=True, run_id=run_id))
    return rows


def dead(*ranks, status="unreachable"):
    return lambda s, d: status if s in ranks or d in ranks else None


def broken(a, b, status="error", one_way=False):
    return lambda s, d: status if (s, d) == (a, b) or (not one_way and (s, d) == (b, a)) else None


def df_of(rows):
    return pd.DataFrame(rows)


def round_rows(hosts=HOSTS, fail=lambda s, d, number, rep: None, bidir=False, repetitions=1, schedule=None,
               run_id=RUN):
    """Rows in the order commbench pairs measures (and stores) them: per repetition, each round of
    the schedule (tournament.rounds unless given); sendrecv: the lower seat sends, then the other
    way. fail(src, dst, round number, repetition) -> the row's status."""
    schedule = schedule or tournament.rounds(list(range(len(hosts))))
    rows = []
    for rep in range(repetitions):
        for number, pairs in enumerate(schedule, 1):
            for phase in range(1 if bidir else 2):
                for a, b in pairs:
                    s, d = (a, b) if phase == 0 else (b, a)
                    rows.append(row(hosts, s, d, fail(s, d, number, rep), bidir, rep=rep, run_id=run_id))
    return rows


def down(*ranks, after, status="unreachable"):
    """The ranks stop answering after round `after` (of the first repetition)."""
    return lambda s, d, number, rep: status if {s, d} & set(ranks) and (rep, number) > (0, after) else None


# ----------------------------------------------------------------------------- the rules


@pytest.mark.parametrize("bidir", [False, True])
@pytest.mark.failure(
    row="which-end-failed-link-blame",
    section="Lost ranks and broken links",
    failure="which end of a failed link is to blame (pattern rules, confirmation round)",
    does="host (every link failed, or every link since its first failure), link (both ends work elsewhere), "
         "undecided (two hosts, or everything failed: exit 3)",
    name="test_*",
)
def test_a_host_whose_links_all_fail_is_named_and_nobody_else(bidir):
    df = df_of(mesh_rows(fail=dead(2), bidir=bidir))
    [c] = linkfaults.suspects(df)
    assert (c.kind, c.name, c.status, c.confirmed) == ("host", "n3", "unreachable", None)
    assert c.evidence == ("3 of 3 links failed (unreachable): n3 <-> n1, n3 <-> n2, n3 <-> n4",
                          "n1, n2, n4 each work with other hosts",
                          "error: peer rank 2 did not answer (unreachable)")  # the most common one
    v = linkfaults.faults(df)
    assert v.named == [c] and v.undecided is None and v.exit_code == 1
    assert len(v.failed) == (3 if bidir else 6)
    assert v.failed[0] == {"src": "n1", "dst": "n3", "status": "unreachable",
                           "error": "peer rank 2 did not answer (unreachable)", "confirm": None, "bidir": bidir}
    assert faultstext.render_faults(v)[0] == "# Unreachable host: n3 (every link failed: 3 of 3, unreachable)"


def test_a_failed_link_between_healthy_hosts_is_the_link_not_a_host():
    df = df_of(mesh_rows(fail=broken(0, 3)))
    [c] = linkfaults.suspects(df)
    assert (c.kind, c.name, c.status) == ("link", "n1 <-> n4", "error")
    assert c.evidence == ("link failed (error): n1 <-> n4", "n1 and n4 each work with other hosts",
                          "error: peer rank 3 did not answer (error)")
    v = linkfaults.faults(df)
    assert v.exit_code == 1 and v.undecided is None
    assert [(f["src"], f["dst"]) for f in v.failed] == [("n1", "n4"), ("n4", "n1")]
    assert faultstext.render_faults(v)[0] == "# Failed link: n1 <-> n4 (error; both hosts work with others)"


def test_a_link_that_fails_one_way_says_which_way():
    [c] = linkfaults.suspects(df_of(mesh_rows(fail=broken(3, 0, one_way=True))))
    assert c.name == "n1 <-> n4" and c.evidence[0] == "link failed (error): n4 -> n1"


def test_with_two_hosts_a_failed_link_is_undecided_exit_3():
    v = linkfaults.faults(df_of(mesh_rows(hosts=["a", "b"], fail=broken(0, 1, "unreachable", one_way=True))))
    [c] = v.culprits
    assert (c.kind, c.name, c.status) == ("undecided", "a <-> b", "unreachable")
    assert c.evidence[1] == ("with 2 hosts a failed link cannot be pinned on either end (2 hosts cannot be told "
                             "apart): measure at least 3 hosts")
    assert v.named == [] and v.exit_code == 3
    assert v.undecided == "with two endpoints a failed link cannot be pinned on either end: measure at least 3 hosts"
    lines = faultstext.render_faults(v)
    assert lines[0] == "# Cannot tell which end: a <-> b (unreachable; only two hosts)"
    assert ("# No verdict: with two endpoints a failed link cannot be pinned on either end: measure at least "
            "3 hosts.") in lines


def test_when_every_link_fails_there_is_no_verdict():
    v = linkfaults.faults(df_of(mesh_rows(fail=lambda s, d: "unreachable")))
    assert v.culprits == [] and v.named == [] and v.exit_code == 3 and len(v.failed) == 12
    assert v.undecided == ("every link failed (6 of 6): no two endpoints worked together, so none can be blamed; "
                           "check that the hosts are up and can reach each other")
    assert faultstext.render_faults(v)[0] == "# No verdict: " + v.undecided + "."
    assert linkfaults.suspects(df_of(mesh_rows(fail=lambda s, d: "unreachable"))) == []


def test_everything_failed_between_two_hosts_is_no_verdict_too():
    v = linkfaults.faults(df_of(mesh_rows(hosts=["a", "b"], fail=lambda s, d: "timeout")))
    assert [(c.kind, c.status) for c in v.culprits] == [("undecided", "timeout")] and v.exit_code == 3
    assert v.undecided.startswith("with two endpoints a failed link cannot be pinned")


def test_a_hung_host_is_named_with_status_timeout():
    v = linkfaults.faults(df_of(mesh_rows(fail=dead(3, status="timeout"))))
    [c] = v.named
    assert (c.kind, c.name, c.status) == ("host", "n4", "timeout")
    assert faultstext.render_faults(v)[0] == "# Hung host: n4 (every link failed: 3 of 3, timeout)"


def _wire_of(host, *trouble):
    """A row's wire value as harness/wireprobe.py writes it: one host's entry with its trouble counters."""
    from commbench.core import wire

    return wire.columns({host: {"ranks": 1, "trouble": [list(t) for t in trouble]}}, None)["wire"]


def test_timeouts_while_the_wire_lost_packets_name_a_lossy_host_not_a_hung_one():
    """n4's transfers timed out while its queue dropped and its peers retransmitted (the lab: a tbf
    queue of 4000 B): the verdict says Lossy, with the counters summed over the failed attempts."""
    rows = mesh_rows(fail=dead(3, status="timeout"))
    for r in rows:
        if r["status"] == "timeout":
            sender = r["src_host"]
            r["wire"] = (_wire_of("n4", ("eth0 qdisc", "drops", 35, "drop")) if sender == "n4" else
                         _wire_of(sender, ("tcp", "RetransSegs", 200, "retransmit")))
    v = linkfaults.faults(df_of(rows))
    [c] = v.named
    assert (c.kind, c.name, c.status, c.lossy) == ("host", "n4", "timeout", True)
    lines = faultstext.render_faults(v)
    assert lines[0] == "# Lossy host: n4 (every link failed: 3 of 3, timeout)"
    assert ("#   wire during the failed transfers: n4 eth0 qdisc drops +105, n1 tcp RetransSegs +200, "
            "n2 tcp RetransSegs +200, n3 tcp RetransSegs +200 "
            "(packets were lost on the data path: a sick link, NIC or queue, "
            "not a hung process)") in lines


def test_counters_that_moved_without_loss_keep_a_hung_host_hung():
    """Pause frames or queue overlimits during a timeout are shown, but lose no packet: still Hung."""
    rows = mesh_rows(fail=dead(3, status="timeout"))
    for r in rows:
        if r["status"] == "timeout":
            r["wire"] = _wire_of(r["src_host"], ("eth0 qdisc", "overlimits", 9, "queue"))
    [c] = linkfaults.faults(df_of(rows)).named
    assert not c.lossy and faultstext.render_faults(linkfaults.faults(df_of(rows)))[0].startswith("# Hung host: n4")


def test_two_dead_hosts_of_four_are_both_named():
    v = linkfaults.faults(df_of(mesh_rows(fail=dead(1, 3))))
    assert [(c.kind, c.name) for c in v.named] == [("host", "n2"), ("host", "n4")]
    assert v.named[0].evidence[1] == "n1, n3 each work with other hosts"  # n4 works with nobody
    assert v.undecided is None and v.exit_code == 1


def test_a_dead_host_and_a_bad_link_elsewhere_are_both_named():
    df = df_of(mesh_rows(hosts=HOSTS + ["n5"], fail=lambda s, d: dead(4)(s, d) or broken(0, 1)(s, d)))
    assert [(c.kind, c.name) for c in linkfaults.suspects(df)] == [("host", "n5"), ("link", "n1 <-> n2")]


def test_the_dominant_status_and_repetitions():
    # repetition 0 unreachable, 1 and 2 timeout: the link failed, mostly by timing out
    rows = mesh_rows(repetitions=3, fail=broken(0, 1, "unreachable"))
    for r in rows:
        if {r["src_rank"], r["dst_rank"]} == {0, 1} and r["repetition"] > 0:
            r["status"] = "timeout"
    [c] = linkfaults.suspects(df_of(rows))
    assert (c.name, c.status) == ("n1 <-> n2", "timeout")
    assert [(f["src"], f["dst"], f["status"]) for f in linkfaults.faults(df_of(rows)).failed] == \
        [("n1", "n2", "timeout"), ("n2", "n1", "timeout")]


def test_a_link_that_failed_once_of_three_repetitions_is_a_failed_link():
    rows = mesh_rows(repetitions=3, fail=lambda s, d: None)
    rows[0]["status"] = "error"  # n1 -> n2, repetition 0
    assert [(c.kind, c.name) for c in linkfaults.suspects(df_of(rows))] == [("link", "n1 <-> n2")]


def test_wrong_data_is_not_a_failed_link():
    rows = mesh_rows()
    rows[0].update(status="wrong", wrong=17)
    v = linkfaults.faults(df_of(rows))
    assert v.culprits == [] and v.failed == [] and v.exit_code == 0
    assert len(linkrank.links_by_run(df_of(rows))[RUN]) == 12


# ----------------------------------------------------------------------------- in measurement order


def test_the_schedule_of_four_hosts():
    # what the tests below rely on: n4 (rank 3) meets n1 in round 1, n2 in round 2, n3 in round 3
    assert tournament.rounds([0, 1, 2, 3]) == [[(0, 3), (1, 2)], [(0, 2), (3, 1)], [(0, 1), (2, 3)]]


@pytest.mark.parametrize("bidir", [False, True])
def test_a_host_that_goes_down_after_round_1_is_named_and_not_its_links(bidir):
    df = df_of(round_rows(fail=down(3, after=1), bidir=bidir))
    [c] = linkfaults.suspects(df)
    assert (c.kind, c.name, c.status, c.confirmed, c.worked_before) == ("host", "n4", "unreachable", None, 1)
    assert c.evidence[:2] == ("every link since its first failure failed: 2 of 2 (unreachable): n4 <-> n2, "
                              "n4 <-> n3; it worked before (1 link: n4 <-> n1)",
                              "n2, n3 each work with other hosts")
    assert len(c.evidence) == 3 and c.evidence[2].startswith("error: peer rank ")
    v = linkfaults.faults(df)
    assert v.culprits == [c] and v.named == [c] and v.undecided is None and v.exit_code == 1
    assert faultstext.render_faults(v)[0] == ("# Unreachable host: n4 (every link since its first failure failed: "
                                              "2 of 2, unreachable; it worked before)")
    assert linkfaults.confirm_plan(df, [c]) == [(0, 3), (1, 3)]  # against two endpoints that passed
    lines, verdicts = faultstext.report(df)
    assert verdicts == [f"run {RUN}: unreachable host: n4 (every link since its first failure failed: 2 of 2, "
                        "unreachable; it worked before)"]


def test_a_host_that_went_down_is_confirmed_by_the_confirmation_round():
    rows = round_rows(fail=down(3, after=1))
    rows += [row(HOSTS, s, d, "unreachable", confirm=True) for s, d in [(0, 3), (3, 0), (1, 3), (3, 1)]]
    [c] = linkfaults.faults(df_of(rows)).named
    assert (c.name, c.confirmed) == ("n4", True)
    assert c.evidence[-1] == "confirmation round: failed again against n1, n2"
    assert faultstext.render_faults(linkfaults.faults(df_of(rows)))[0] == (
        "# Unreachable host: n4 (every link since its first failure failed: 2 of 2, unreachable; it worked before; "
        "confirmed against n1, n2)")


def test_a_host_that_goes_down_between_the_two_directions_of_a_round():
    # n1 -> n4 worked, n4 -> n1 did not: every link of n4 has a failed row, the first form of rule a)
    fail = lambda s, d, number, rep: "timeout" if 3 in (s, d) and (number > 1 or s == 3) else None  # noqa: E731
    [c] = linkfaults.suspects(df_of(round_rows(fail=fail)))
    assert (c.kind, c.name, c.status, c.worked_before) == ("host", "n4", "timeout", 0)
    assert c.evidence[0] == "3 of 3 links failed (timeout): n4 -> n1, n4 <-> n2, n4 <-> n3"


def test_two_hosts_that_go_down_together_are_both_named():
    # n3 and n4 stop after round 1; n1 and n2 still work together in round 3
    v = linkfaults.faults(df_of(round_rows(fail=down(2, 3, after=1))))
    assert [(c.kind, c.name) for c in v.culprits] == [("host", "n3"), ("host", "n4")]
    assert v.culprits[0].evidence[1] == "n1 works with other hosts"  # n4 went down too: no witness
    assert v.undecided is None and v.exit_code == 1


def test_when_every_peer_since_went_down_too_there_is_no_verdict():
    # n3 and n4 stop after round 1, in which n1 met n2 and n3 met n4: the two halves look alike
    schedule = [[(0, 1), (2, 3)], [(0, 2), (1, 3)], [(0, 3), (1, 2)]]
    v = linkfaults.faults(df_of(round_rows(fail=down(2, 3, after=1), schedule=schedule)))
    assert v.culprits == [] and v.exit_code == 3
    assert v.undecided == ("n1, n2, n3, n4 each failed every link since their first failure, and so did each of "
                           "their peers since then: which of them stopped working during the run cannot be told")


def test_a_host_whose_last_link_failed_alone_is_a_failed_link():
    # one failed link is not enough to name a host: n4 failed only in round 3, with n3
    [c] = linkfaults.suspects(df_of(round_rows(fail=down(3, after=2))))
    assert (c.kind, c.name) == ("link", "n3 <-> n4")


def test_a_flapping_link_stays_a_link():
    # n1 <-> n2 fails in repetition 0 and works again in repetition 1: the link, not n1 or n2
    fail = lambda s, d, number, rep: "error" if {s, d} == {0, 1} and rep == 0 else None  # noqa: E731
    df = df_of(round_rows(fail=fail, repetitions=2))
    [c] = linkfaults.suspects(df)
    assert (c.kind, c.name, c.status) == ("link", "n1 <-> n2", "error")
    assert c.evidence[:3] == ("link failed (error): n1 <-> n2", "n1 and n2 each work with other hosts",
                              "it worked again after failing (flapping): 2 of 4 measurements failed")
    assert linkfaults.faults(df).exit_code == 1
    assert linkfaults.confirm_plan(df, [c]) == [(0, 1), (0, 2), (1, 3)]
    assert len(linkrank.links_by_run(df)[RUN]) == 12  # repetition 1 measured it


def test_a_host_that_comes_back_is_not_named_as_a_host():
    # n4 fails rounds 2 of repetition 0 only, then works with everyone again
    fail = lambda s, d, number, rep: "unreachable" if 3 in (s, d) and (rep, number) == (0, 2) else None  # noqa: E731
    culprits = linkfaults.suspects(df_of(round_rows(fail=fail, repetitions=2)))
    assert [(c.kind, c.name) for c in culprits] == [("link", "n2 <-> n4")]
    assert culprits[0].evidence[2] == "it worked again after failing (flapping): 2 of 4 measurements failed"


# ----------------------------------------------------------------------------- several ranks per host


RANK_HOSTS = ["a", "a", "b", "b", "c", "c"]


def test_several_ranks_per_host_name_the_rank_whose_links_fail():
    # b/r2's rail is down: its links to other hosts fail, its link to b/r3 (shared memory) works
    fail = lambda s, d: "unreachable" if 2 in (s, d) and {s, d} != {2, 3} else None  # noqa: E731
    v = linkfaults.faults(df_of(mesh_rows(hosts=RANK_HOSTS, fail=fail)))
    [c] = v.named
    assert (c.kind, c.name) == ("host", "b/r2")
    assert c.evidence[0].startswith("4 of 4 links failed (unreachable): b/r2 <-> a/r0, b/r2 <-> a/r1, ")
    assert c.evidence[1] == "a/r0, a/r1, c/r4, c/r5 each work with other endpoints"
    assert faultstext.render_faults(v)[0] == "# Unreachable endpoint: b/r2 (every link failed: 4 of 4, unreachable)"


def test_a_host_whose_network_is_down_has_every_rank_named():
    fail = lambda s, d: "unreachable" if (RANK_HOSTS[s] == "b") != (RANK_HOSTS[d] == "b") else None  # noqa: E731
    v = linkfaults.faults(df_of(mesh_rows(hosts=RANK_HOSTS, fail=fail)))
    assert [(c.kind, c.name) for c in v.named] == [("host", "b/r2"), ("host", "b/r3")]
    assert v.undecided is None


def test_a_failed_link_inside_a_host_is_a_link():
    v = linkfaults.faults(df_of(mesh_rows(hosts=RANK_HOSTS, fail=broken(4, 5))))
    assert [(c.kind, c.name) for c in v.named] == [("link", "c/r4 <-> c/r5")]
    assert faultstext.render_faults(v)[0] == "# Failed link: c/r4 <-> c/r5 (error; both endpoints work with others)"


def test_two_hosts_with_several_ranks_still_find_a_dead_rail():
    hosts = ["a", "a", "b", "b"]
    fail = lambda s, d: "unreachable" if 3 in (s, d) and {s, d} != {2, 3} else None  # noqa: E731
    assert [(c.kind, c.name) for c in linkfaults.suspects(df_of(mesh_rows(hosts=hosts, fail=fail)))] == \
        [("host", "b/r3")]
    # but when host b's network is down, either host may be the one: no verdict
    fail = lambda s, d: "unreachable" if (hosts[s] == "b") != (hosts[d] == "b") else None  # noqa: E731
    v = linkfaults.faults(df_of(mesh_rows(hosts=hosts, fail=fail)))
    assert v.culprits == [] and v.exit_code == 3
    assert v.undecided.startswith("every link between hosts failed (4 of 4)")


# ----------------------------------------------------------------------------- the confirmation round


def test_confirm_plan_pairs_a_host_with_two_that_passed():
    df = df_of(mesh_rows(fail=dead(2)))
    assert linkfaults.confirm_plan(df, linkfaults.suspects(df)) == [(0, 2), (1, 2)]


def test_confirm_plan_for_a_link_measures_it_again_and_each_end_elsewhere():
    df = df_of(mesh_rows(fail=broken(0, 1)))
    assert linkfaults.confirm_plan(df, linkfaults.suspects(df)) == [(0, 1), (0, 2), (1, 3)]


def test_confirm_plan_spreads_over_the_good_hosts_and_never_repeats_a_pair():
    hosts = [f"n{i}" for i in range(1, 7)]
    df = df_of(mesh_rows(hosts=hosts, fail=lambda s, d: dead(5)(s, d) or broken(0, 1)(s, d)))
    culprits = linkfaults.suspects(df)
    assert [(c.kind, c.name) for c in culprits] == [("host", "n6"), ("link", "n1 <-> n2")]
    assert linkfaults.confirm_plan(df, culprits) == [(2, 5), (3, 5), (0, 1), (0, 4), (1, 2)]
    assert linkfaults.confirm_plan(df, culprits + culprits) == linkfaults.confirm_plan(df, culprits)


def test_confirm_plan_pairs_ranks_with_other_hosts_only():
    fail = lambda s, d: "unreachable" if 2 in (s, d) and {s, d} != {2, 3} else None  # noqa: E731
    df = df_of(mesh_rows(hosts=RANK_HOSTS, fail=fail))
    assert linkfaults.confirm_plan(df, linkfaults.suspects(df)) == [(0, 2), (1, 2)]  # not b/r3


def test_confirm_plan_skips_undecided_and_refuses_unknown_names():
    df = df_of(mesh_rows(hosts=["a", "b"], fail=broken(0, 1)))
    assert linkfaults.confirm_plan(df, linkfaults.suspects(df)) == []
    with pytest.raises(ValueError, match="nowhere is not an endpoint"):
        linkfaults.confirm_plan(df_of(mesh_rows()), [Culprit("host", "nowhere", "unreachable", ())])


def test_confirm_plan_ignores_confirmation_rows():
    with_confirm = df_of(mesh_rows(fail=dead(2), confirm=[(2, 0, "unreachable")]))
    main = df_of(mesh_rows(fail=dead(2)))
    assert linkfaults.confirm_plan(with_confirm, linkfaults.suspects(with_confirm)) == \
        linkfaults.confirm_plan(main, linkfaults.suspects(main))


def test_a_host_that_fails_again_is_confirmed():
    v = linkfaults.faults(df_of(mesh_rows(fail=dead(2), confirm=[(0, 2, "unreachable"), (1, 2, "unreachable")])))
    [c] = v.named
    assert c.confirmed is True and c.evidence[-1] == "confirmation round: failed again against n1, n2"
    assert faultstext.render_faults(v)[0] == \
        "# Unreachable host: n3 (every link failed: 3 of 3, unreachable; confirmed against n1, n2)"
    assert [f["confirm"] for f in v.failed].count(True) == 4 and v.exit_code == 1
    assert "#   n1 -> n3                                 unreachable (confirmation)  peer rank 2 did not answer " \
           "(unreachable)" in faultstext.render_faults(v)


def test_a_host_that_recovers_is_refuted_and_not_named():
    v = linkfaults.faults(df_of(mesh_rows(fail=dead(2), confirm=[(0, 2, "unreachable"), (1, 2, None)])))
    [c] = v.culprits
    assert c.confirmed is False and v.named == [] and v.exit_code == 0
    assert c.evidence[-1] == "confirmation round: worked with n2: it recovered, not named"
    assert faultstext.render_faults(v)[0] == ("# Unreachable host: n3 (every link failed: 3 of 3, unreachable; "
                                            "recovered when measured again: not named)")


def test_a_link_that_fails_again_while_its_ends_work_is_confirmed():
    confirm = [(0, 1, "error"), (0, 2, None), (1, 3, None)]
    v = linkfaults.faults(df_of(mesh_rows(fail=broken(0, 1), confirm=confirm)))
    [c] = v.named
    assert c.confirmed is True
    assert c.evidence[-1] == "confirmation round: the link failed again; n1 worked with n3; n2 worked with n4"
    assert faultstext.render_faults(v)[0] == "# Failed link: n1 <-> n2 (error; both hosts work with others; confirmed)"


def test_a_link_that_works_when_measured_again_is_refuted():
    v = linkfaults.faults(df_of(mesh_rows(fail=broken(0, 1), confirm=[(0, 1, None), (0, 2, None), (1, 3, None)])))
    assert [c.confirmed for c in v.culprits] == [False] and v.named == [] and v.exit_code == 0
    assert v.culprits[0].evidence[-1] == "confirmation round: the link worked when measured again: it recovered, " \
                                         "not named"


def test_a_link_that_fails_again_with_both_ends_failing_elsewhere_is_inconclusive_but_named():
    confirm = [(0, 1, "error"), (0, 2, "error"), (1, 3, "error")]
    v = linkfaults.faults(df_of(mesh_rows(fail=broken(0, 1), confirm=confirm)))
    [c] = v.named
    assert (c.kind, c.confirmed) == ("link", None) and v.exit_code == 1
    assert c.evidence[-1] == ("confirmation round: the link failed again, but n1 and n2 worked with no other "
                              "endpoint either: inconclusive")


@pytest.mark.parametrize("status, label", [("error", "Failing"), ("unreachable", "Unreachable")])
def test_the_confirmation_round_turns_a_link_into_the_end_that_fails_everywhere(status, label):
    # n1 <-> n2 failed; measured again, it fails, n1 fails against n3 (which passed), n2 works with n4
    confirm = [(0, 1, status), (0, 2, status), (1, 3, None)]
    v = linkfaults.faults(df_of(mesh_rows(fail=broken(0, 1, status), confirm=confirm)))
    [c] = v.named
    assert (c.kind, c.name, c.status, c.confirmed, c.via) == ("host", "n1", status, True, "n1 <-> n2")
    assert v.culprits == [c] and v.exit_code == 1 and v.undecided is None
    assert c.evidence[0] == f"link failed ({status}): n1 <-> n2"
    assert c.evidence[-1] == ("confirmation round: the link failed again; n1 failed against every endpoint that "
                              "passed (1 of 1: n3) while n2 worked with n4: n1 is to blame, not the link")
    assert faultstext.render_faults(v)[0] == (f"# {label} host: n1 (its link n1 <-> n2 failed; in the confirmation "
                                              f"round it failed against n3, {status}, while n2 worked; confirmed)")


def test_a_suspect_without_confirmation_rows_is_named_unconfirmed():
    # the confirmation round re-measured the link only: the host n3 has no confirmation rows
    df = df_of(mesh_rows(hosts=HOSTS + ["n5"], fail=lambda s, d: dead(2)(s, d) or broken(0, 1)(s, d),
                         confirm=[(0, 1, "error")]))
    v = linkfaults.faults(df)
    assert [(c.name, c.confirmed) for c in v.named] == [("n3", None), ("n1 <-> n2", None)]
    assert v.named[1].evidence[-1] == "confirmation round: the link failed again, but n1 and n2 worked with no " \
                                      "other endpoint either: inconclusive"


def test_confirmation_through_a_results_file(tmp_path):
    """The real writer and reader: confirm is a nullable bool column, status a nullable string."""
    df = frame(mesh_rows(fail=dead(2), confirm=[(0, 2, "unreachable"), (1, 2, "unreachable")]), tmp_path)
    [c] = linkfaults.faults(df).named
    assert (c.name, c.confirmed) == ("n3", True)
    assert len(linkrank.links_by_run(df)[RUN]) == 6


# ----------------------------------------------------------------------------- the ranking and the report


def test_the_ranking_leaves_failed_and_confirmation_rows_out():
    df = df_of(mesh_rows(fail=dead(2), confirm=[(0, 2, None)]))
    links = linkrank.links_by_run(df)[RUN]
    assert len(links) == 6 and all(math.isfinite(ln.gbps) for ln in links)
    assert {ln.src for ln in links} | {ln.dst for ln in links} == {"n1", "n2", "n4"}
    r = linkrank.rank_links(links)
    assert math.isfinite(r.median_gbps) and r.singled_out == []


def test_null_status_columns_change_nothing():
    plain = df_of(mesh_rows(repetitions=2))
    for r in (plain,):
        r.loc[r["src_host"] == "n3", "busbw_GBps"] = 0.05
    bare = plain.drop(columns=["status", "error", "confirm"])
    assert linkrank.links_by_run(plain) == linkrank.links_by_run(bare)
    assert faultstext.report(plain) == faultstext.report(bare)
    assert linkfaults.faults(plain) == linkfaults.FaultVerdict([], [], None)
    assert linkfaults.faults(bare).exit_code == 0


def test_report_adds_the_fault_lines_and_names_the_host():
    lines, verdicts = faultstext.report(df_of(mesh_rows(fail=dead(2))))
    assert lines[0] == f"# run {RUN}: sendrecv of 16 MiB, 4 hosts, 6 links, 6 failed"
    assert "# Unreachable host: n3 (every link failed: 3 of 3, unreachable)" in lines
    assert "# Failed links (6):" in lines
    assert verdicts == [f"run {RUN}: unreachable host: n3 (every link failed: 3 of 3, unreachable)"]


def test_report_of_a_run_where_everything_failed():
    lines, verdicts = faultstext.report(df_of(mesh_rows(fail=lambda s, d: "unreachable")))
    assert lines[:2] == [f"# run {RUN}: sendrecv of 16 MiB, 4 hosts, 0 links, 12 failed",
                         "# No link was measured: every transfer of this run failed."]
    assert verdicts == [] and lines[2].startswith("# No verdict: every link failed (6 of 6)")
    assert linkfaults.faults_by_run(df_of(mesh_rows(fail=lambda s, d: "unreachable")))[RUN].exit_code == 3


def test_faults_judge_one_run_at_a_time():
    df = df_of(mesh_rows(fail=dead(2)) + mesh_rows(run_id="20250101-000000-fault2"))
    with pytest.raises(ValueError, match="judged per run"):
        linkfaults.faults(df)
    by_run = linkfaults.faults_by_run(df)
    assert {k: v.exit_code for k, v in by_run.items()} == {RUN: 1, "20250101-000000-fault2": 0}


def test_the_failed_list_is_capped():
    hosts = [f"n{i}" for i in range(1, 11)]
    v = linkfaults.faults(df_of(mesh_rows(hosts=hosts, fail=dead(9))))
    lines = faultstext.render_faults(v)
    assert "# Failed links (18):" in lines and len(lines) == 4 + 1 + 18
    lines = faultstext.render_faults(v, shown=10)
    assert lines[-1] == "#   ... and 8 more (the status and error columns hold them all)"
    assert len(lines) == 4 + 1 + 10 + 1
    assert v.named[0].evidence[0] == ("9 of 9 links failed (unreachable): n10 <-> n1, n10 <-> n2, n10 <-> n3, "
                                      "n10 <-> n4, n10 <-> n5, n10 <-> n6, n10 <-> n7, n10 <-> n8, ... (9 in all)")


def test_pairs_from_names_the_dead_host_and_exits_1(tmp_path, capsys):
    path = write(tmp_path / "pairs.parquet", mesh_rows(fail=dead(2)))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    out, err = capsys.readouterr()
    assert info.value.code == 1
    assert "# Unreachable host: n3 (every link failed: 3 of 3, unreachable)" in out
    assert f"commbench: run {RUN}: unreachable host: n3" in err


def test_pairs_from_a_host_that_went_down_exits_1(tmp_path, capsys):
    """Through ResultWriter and the reader: the rows keep their measurement order."""
    path = write(tmp_path / "pairs.parquet", round_rows(fail=down(3, after=1)))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    out, err = capsys.readouterr()
    assert info.value.code == 1
    assert "# Unreachable host: n4 (every link since its first failure failed: 2 of 2, unreachable; " \
           "it worked before)" in out
    assert "# Failed link:" not in out and "# No verdict" not in out
    assert f"commbench: run {RUN}: unreachable host: n4" in err


def test_pairs_from_exits_3_when_every_link_failed(tmp_path, capsys):
    path = write(tmp_path / "pairs.parquet", mesh_rows(fail=lambda s, d: "unreachable"))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    out, err = capsys.readouterr()
    assert info.value.code == 3
    assert "# No link was measured: every transfer of this run failed." in out
    assert err.strip().splitlines() == [f"commbench: run {RUN}: no verdict: every link failed (6 of 6): no two "
                                        "endpoints worked together, so none can be blamed; check that the hosts are "
                                        "up and can reach each other"]


def test_pairs_from_exits_0_when_a_refuted_suspect_is_all_that_failed(tmp_path):
    path = write(tmp_path / "pairs.parquet", mesh_rows(fail=broken(0, 1), confirm=[(0, 1, None), (0, 2, None),
                                                                                  (1, 3, None)]))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    assert info.value.code == 0


# ----------------------------------------------------------------------------- rails (pairs --per-rail)


def rail_mesh(fail, rails=("eth0", "eth1"), hosts=HOSTS, confirm=()):
    """mesh_rows per rail; fail(src, dst, rail) -> status. confirm: (src, dst, status, rail)."""
    rows = []
    for rail in rails:
        rows += [{**r, "rail": rail} for r in mesh_rows(hosts, lambda s, d, rail=rail: fail(s, d, rail))]
    for s, d, status, rail in confirm:
        rows += [{**row(hosts, a, b, status, confirm=True), "rail": rail} for a, b in [(s, d), (d, s)]]
    return rows


def test_a_failed_link_on_one_rail_is_that_rail_s_link():
    rows = rail_mesh(lambda s, d, rail: "error" if rail == "eth1" and {s, d} == {0, 1} else None)
    v = linkfaults.faults(df_of(rows))
    assert [(c.kind, c.name, c.rail) for c in v.named] == [("link", "n1 <-> n2", "eth1")]
    lines = faultstext.render_faults(v)
    assert "# Failed link: n1 <-> n2 rail eth1 (error; both hosts work with others)" in lines
    assert {f["rail"] for f in v.failed} == {"eth1"}
    eth1 = df_of(rows)[df_of(rows)["rail"] == "eth1"]
    assert linkfaults.confirm_plan(eth1, linkfaults.suspects(eth1)) == [(0, 1), (0, 2), (1, 3)]


def test_a_rail_link_that_works_in_its_confirmation_round_is_not_named():
    rows = rail_mesh(lambda s, d, rail: "error" if rail == "eth1" and {s, d} == {0, 1} else None,
                     confirm=[(0, 1, None, "eth1"), (0, 2, None, "eth1"), (1, 3, None, "eth1")])
    v = linkfaults.faults(df_of(rows))
    assert v.named == [] and v.culprits[0].confirmed is False and v.culprits[0].rail == "eth1"
    assert v.exit_code == 0


def test_a_failed_rail_between_two_hosts_is_no_verdict_on_that_rail(tmp_path, capsys):
    rows = rail_mesh(lambda s, d, rail: "timeout" if rail == "eth1" else None, hosts=HOSTS[:2])
    v = linkfaults.faults(df_of(rows))
    assert v.named == [] and v.exit_code == 3 and v.undecided.startswith("rail eth1: ")
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(write(tmp_path / "two.parquet", rows))])
    assert info.value.code == 3 and "no verdict: rail eth1: " in capsys.readouterr().err


# ----------------------------------------------------------------------------- a host that never joined


class _Session:
    """What PairsWorkload._absent_rows uses of a Session: rank 0 of the 3 ranks that joined."""

    rank, world = 0, 3

    def __init__(self):
        self.lines, self.written = [], []
        self.reporter = type("Reporter", (), {"line": lambda _, text: self.lines.append(text)})()

    def record(self, *, m, **columns):
        return {**row(HOSTS, 0, 1), "busbw_GBps": math.nan, "algbw_GBps": math.nan, "time_us": math.nan,
                "wrong": None, **columns}

    def write(self, rows):
        self.written += rows


@pytest.mark.parametrize("mode", ["sendrecv", "bidir"])
def test_a_host_that_never_joined_is_named_from_its_rows_and_nobody_else(mode):
    """n3 (rank 2 at launch) never joined; the three that did were renumbered 0-2 (n1, n2, n4)."""
    from commbench.harness.arrival import Absent
    from commbench.workloads.pairs import PairsPlan, PairsWorkload

    absent = Absent([2], 4, {2: "n3"}, {"n3": "no answer"}, {"n3": "10.0.0.3"})
    work = PairsWorkload(PairsPlan(size_bytes=16 << 20, mode=mode), absent=absent)
    session, joined = _Session(), ["n1", "n2", "n4"]
    rows = work._absent_rows(session, joined, [0, 1, 2], [None])  # type: ignore[arg-type]
    assert session.written == rows and len(rows) == (3 if mode == "bidir" else 6)
    assert {r["status"] for r in rows} == {"never joined"}
    assert {(r["src_rank"], r["dst_rank"]) for r in rows} >= {(0, 3), (1, 3), (2, 3)}  # numbered after the run's
    assert rows[0]["error"] == ("rank 2 (host n3, 10.0.0.3: no answer from it) never joined the run (its rank number "
                                "at launch)")
    assert session.lines == ["# Never joined: n3 (rank 2 at launch): its links are stored with status `never joined`"]
    bidir = mode == "bidir"
    measured = mesh_rows(joined, bidir=bidir)
    v = linkfaults.faults(df_of(rows + measured))
    [c] = v.named
    assert (c.kind, c.name, c.status) == ("host", "n3", "never joined")
    assert faultstext.render_faults(v)[0] == "# Never joined host: n3 (every link failed: 3 of 3, never joined)"
    assert v.exit_code == 1


def test_no_row_for_an_absent_rank_whose_host_joined_with_another_rank():
    from commbench.harness.arrival import Absent
    from commbench.workloads.pairs import PairsPlan, PairsWorkload

    work = PairsWorkload(PairsPlan(), absent=Absent([1], 4, {1: "n1"}))
    assert work._absent_rows(_Session(), ["n1", "n2", "n4"], [0, 1, 2], [None]) == []  # type: ignore[arg-type]


def test_with_rails_a_host_that_never_joined_has_its_rows_on_every_rail():
    from commbench.harness.arrival import Absent
    from commbench.workloads.pairs import PairsPlan, PairsWorkload

    work = PairsWorkload(PairsPlan(mode="bidir", per_rail=True), absent=Absent([2], 4, {2: "n3"}))
    rows = work._absent_rows(_Session(), ["n1", "n2", "n4"], [0, 1, 2], ["eth0", "eth1"])  # type: ignore[arg-type]
    assert sorted((r["rail"], r["src_host"]) for r in rows) == sorted(
        (rail, h) for rail in ("eth0", "eth1") for h in ("n1", "n2", "n4"))
