"""`commbench pairs` without ranks: the round-robin schedule, the link ranking and its rule for
singling out a host, rows -> links, the heat map, and the command's refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from commbench.analysis.pairs import linkrank
from commbench.analysis.pairs import pairsplot
from commbench.workloads import tournament
from commbench.cli.app import main
from commbench.core.errors import BadInput
from commbench.workloads.pairlinks import pattern
from commbench.workloads.pairs import PairsPlan, PairsWorkload, endpoint_names, participants

from unit.synthetic import make_rows, write

# ----------------------------------------------------------------------------- tournament


@pytest.mark.parametrize("n", range(0, 18))
def test_every_pair_meets_exactly_once_in_disjoint_rounds(n):
    players = list(range(n))
    rounds = tournament.rounds(players)
    if n < 2:
        assert rounds == []
        return
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    met = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, met)) == sorted(map(sorted, map(frozenset, itertools.combinations(players, 2))))
    assert len(set(met)) == len(met) == n * (n - 1) // 2
    for r in rounds:
        busy = [p for pair in r for p in pair]
        assert len(busy) == len(set(busy)), f"a player twice in one round: {r}"
        assert len(r) == n // 2  # everyone plays but the bye
        assert tournament.idle(players, r) == ([] if n % 2 == 0 else [p for p in players if p not in busy])
        assert len(tournament.idle(players, r)) == n % 2


def test_odd_count_gives_everyone_exactly_one_bye():
    players = ["a", "b", "c", "d", "e"]
    byes = [p for r in tournament.rounds(players) for p in tournament.idle(players, r)]
    assert sorted(byes) == players


def test_players_keep_their_identity_and_must_be_distinct():
    assert tournament.rounds([7, 3]) == [[(7, 3)]]
    with pytest.raises(ValueError):
        tournament.rounds([1, 1, 2])


# ----------------------------------------------------------------------------- ranking


def full_mesh(hosts, rate, bidir=False):
    """Every directed link (one per pair when bidir) at min(rate[a], rate[b]), like a switch."""
    pairs = itertools.combinations(hosts, 2) if bidir else itertools.permutations(hosts, 2)
    return [linkrank.Link(a, b, a, b, min(rate[a], rate[b]), bidir, hosts.index(a), hosts.index(b))
            for a, b in pairs]


HOSTS = ["n1", "n2", "n3", "n4"]


@pytest.mark.parametrize("bidir", [False, True])
def test_one_slow_host_is_named_and_its_links_are_the_slowest(bidir):
    rate = {"n1": 0.118, "n2": 0.119, "n3": 0.059, "n4": 0.117}
    r = linkrank.rank_links(full_mesh(HOSTS, rate, bidir))
    assert [e.name for e in r.singled_out] == ["n3"]
    assert r.singled_out[0].slow_send and r.singled_out[0].slow_recv
    assert len(r.slowest) == (3 if bidir else 6)
    assert all("n3" in (ln.src, ln.dst) for ln in r.slowest)
    assert r.host_counts[0] == ("n3", len(r.slowest))
    assert all(c < len(r.slowest) for h, c in r.host_counts[1:])
    text = "\n".join(linkrank.render(r))
    assert "Slow host: n3" in text and "No host stands out" not in text
    assert linkrank.verdict(r).startswith("slow host: n3 ")
    # two different medians on consecutive lines, each named for what it is (issue #40): the list's share
    # is of the median link, the verdict's of the median host's best link; no bare "median's" or "of median"
    header, verdict_line = text.splitlines()[0], text.splitlines()[-1]
    assert f"the median link {r.median_gbps:.4f} GB/s" in header
    assert f"50% of the median host's best link ({r.send_reference:.4f} GB/s)" in verdict_line
    assert "median's" not in text and "of median " not in text and "median link" not in verdict_line


@pytest.mark.parametrize("bidir", [False, True])
def test_equal_links_single_out_nobody(bidir):
    rate = {"n1": 0.118, "n2": 0.121, "n3": 0.119, "n4": 0.116}  # a few % of noise
    r = linkrank.rank_links(full_mesh(HOSTS, rate, bidir))
    assert r.singled_out == [] and linkrank.verdict(r) is None
    assert "No host stands out: every host's best link is at least 80%" in "\n".join(linkrank.render(r))


def test_two_slow_hosts_of_four_are_both_named():
    rate = {"n1": 0.06, "n2": 0.06, "n3": 0.12, "n4": 0.12}
    r = linkrank.rank_links(full_mesh(HOSTS, rate))
    assert [e.name for e in r.singled_out] == ["n1", "n2"]


def test_one_slow_host_of_three_is_named():
    rate = {"n1": 0.12, "n2": 0.06, "n3": 0.12}
    r = linkrank.rank_links(full_mesh(HOSTS[:3], rate))
    assert [e.name for e in r.singled_out] == ["n2"]


def test_a_bad_link_between_healthy_hosts_tops_the_list_but_blames_nobody():
    links = [ln if {ln.src, ln.dst} != {"n1", "n2"} else linkrank.Link(ln.src, ln.dst, ln.src, ln.dst, 0.03,
                                                                       False, ln.src_rank, ln.dst_rank)
             for ln in full_mesh(HOSTS, dict.fromkeys(HOSTS, 0.12))]
    r = linkrank.rank_links(links)
    assert {(ln.src, ln.dst) for ln in r.links[:2]} == {("n1", "n2"), ("n2", "n1")}
    assert r.singled_out == []


def test_a_host_that_only_sends_slowly_is_named_for_sending():
    links = [linkrank.Link(a, b, a, b, 0.05 if a == "n4" else 0.12, False, 0, 0)
             for a, b in itertools.permutations(HOSTS, 2)]
    r = linkrank.rank_links(links)
    [e] = r.singled_out
    assert e.name == "n4" and e.slow_send and not e.slow_recv
    assert "best link sending 0.0500 GB/s = 42%" in "\n".join(linkrank.render(r))


def test_two_hosts_cannot_be_told_apart():
    links = full_mesh(["a", "b"], {"a": 0.06, "b": 0.12})
    r = linkrank.rank_links(links)
    assert r.singled_out == [] and r.note and "No host singled out" in "\n".join(linkrank.render(r))


def test_the_threshold_decides():
    rate = {"n1": 0.12, "n2": 0.12, "n3": 0.10, "n4": 0.12}  # 83%
    assert linkrank.rank_links(full_mesh(HOSTS, rate), threshold=0.8).singled_out == []
    assert [e.name for e in linkrank.rank_links(full_mesh(HOSTS, rate), threshold=0.9).singled_out] == ["n3"]


def test_links_inside_a_host_do_not_hide_a_slow_nic():
    # three hosts x two ranks; host b's NIC is slow, but its two ranks talk to each other fast
    # (shared memory): that link must not count as either rank's best network link
    ends = [("a", 0), ("a", 1), ("b", 2), ("b", 3), ("c", 4), ("c", 5)]
    links = []
    for (h1, r1), (h2, r2) in itertools.permutations(ends, 2):
        gbps = 5.0 if h1 == h2 else (0.05 if "b" in (h1, h2) else 0.12)
        links.append(linkrank.Link(f"{h1}/r{r1}", f"{h2}/r{r2}", h1, h2, gbps, False, r1, r2))
    r = linkrank.rank_links(links)
    assert not r.per_host
    assert sorted(e.name for e in r.singled_out) == ["b/r2", "b/r3"]
    assert "Slow endpoint: b/r2 (host b)" in "\n".join(linkrank.render(r))


# ----------------------------------------------------------------------------- rows


def pairs_rows(rate, hosts=HOSTS, collective="sendrecv", run_id="20250101-000000-aaaaaa", repetitions=2):
    base = make_rows(collectives=("sendrecv",), sizes=(16 << 20,), placements=(False,), repetitions=1,
                     run_id=run_id, hosts=tuple(hosts), backend="gloo", device_name="cpu")[0]
    bidir = collective == "sendrecv_bidir"
    ranks = range(len(hosts))
    pairs = list(itertools.combinations(ranks, 2) if bidir else itertools.permutations(ranks, 2))
    rows = []
    for rep in range(repetitions):
        for s, d in pairs:
            gbps = min(rate[hosts[s]], rate[hosts[d]]) * (1 + 0.01 * rep)
            rows.append({**base, "workload": "pairs", "collective": collective, "dtype": "uint8", "op": None,
                         "repetition": rep, "busbw_GBps": gbps, "algbw_GBps": gbps,
                         "time_us": (16 << 20) / gbps / 1e3, "src_host": hosts[s], "dst_host": hosts[d],
                         "src_rank": s, "dst_rank": d, "world_size": len(hosts), "ranks_per_node": 1})
    return rows


def test_rows_become_links_with_the_median_over_repetitions():
    df = pd.DataFrame(pairs_rows({"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1}, repetitions=3))
    [(run_id, links)] = linkrank.links_by_run(df).items()
    assert len(links) == 12 and {ln.src for ln in links} == set(HOSTS)
    link = next(ln for ln in links if (ln.src, ln.dst) == ("n1", "n2"))
    assert link.gbps == pytest.approx(0.101) and not link.bidir  # median of 0.100, 0.101, 0.102


def test_several_ranks_per_host_are_named_host_rank():
    assert endpoint_names(["a", "a", "b"], [0, 1, 2]) == {0: "a/r0", 1: "a/r1", 2: "b"}
    assert endpoint_names(["a", "a", "b"], [0, 2]) == {0: "a", 2: "b"}


def test_hosts_only_takes_the_first_rank_of_each_host():
    hosts = ["a", "a", "b", "b", "c", "c"]
    assert participants(hosts, hosts_only=True) == [0, 2, 4]
    assert participants(hosts, hosts_only=False) == [0, 1, 2, 3, 4, 5]


def test_the_pattern_tells_ranks_and_shifts_apart():
    p0, p1 = pattern(0, 1000, "cpu"), pattern(1, 1000, "cpu")
    assert p0.dtype == torch.uint8 and p0.numel() == 1000 and int(p0.min()) >= 1
    assert (p0 != p1).all() and (p0[1:] != p0[:-1]).all()


def test_a_world_of_one_is_bad_input():
    with pytest.raises(BadInput, match="pairs needs at least 2 ranks"):
        PairsWorkload(PairsPlan()).validate(1)


def test_heat_map_matrix_and_figure(tmp_path):
    df = pd.DataFrame(pairs_rows({"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1}, repetitions=1))
    links = next(iter(linkrank.links_by_run(df).values()))
    names, m = pairsplot.matrix(links)
    assert names == HOSTS and np.isnan(np.diag(m)).all()
    assert m[0, 2] == pytest.approx(0.05) and m[0, 1] == pytest.approx(0.1)
    fig = pairsplot.build_figure(df)
    ax = fig.axes[0]
    red = [t.get_text() for t in ax.get_yticklabels() if t.get_color() == "#c00000"]
    assert red == ["n3"]
    assert "slow host: n3" in ax.get_title(loc="left")


def test_bidir_heat_map_is_symmetric():
    df = pd.DataFrame(pairs_rows({"n1": 0.1, "n2": 0.07, "n3": 0.1}, hosts=HOSTS[:3],
                                 collective="sendrecv_bidir", repetitions=1))
    names, m = pairsplot.matrix(next(iter(linkrank.links_by_run(df).values())))
    assert np.allclose(np.nan_to_num(m), np.nan_to_num(m.T))


# ----------------------------------------------------------------------------- the command


def test_from_results_names_the_slow_host_and_exits_1(tmp_path, capsys):
    path = write(tmp_path / "pairs.parquet", pairs_rows({"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1}))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    out, err = capsys.readouterr()
    assert info.value.code == 1
    assert "Slow host: n3" in out and "slow host: n3" in err


def test_from_results_with_equal_links_exits_0(tmp_path, capsys):
    path = write(tmp_path / "pairs.parquet", pairs_rows(dict.fromkeys(HOSTS, 0.1)))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    assert info.value.code == 0 and "No host stands out" in capsys.readouterr().out


def test_plot_draws_the_heat_map(tmp_path, capsys):
    path = write(tmp_path / "pairs.parquet", pairs_rows({"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1}))
    with pytest.raises(SystemExit) as info:
        main(["plot", str(path), "--out", str(tmp_path / "pairs.png")])
    assert info.value.code == 0 and (tmp_path / "pairs.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, message", [
    (["--size", "0"], "--size '0' must be at least 1 byte"),
    (["--size", "12Q"], "--size '12Q' is not a size"),
    (["--mode", "bogus"], "'bogus' is not one of 'sendrecv', 'bidir'"),
    (["--slow-below", "150%"], "--slow-below 150% must be more than 0 and below 100%"),
    (["--nproc", "1"], "pairs needs at least 2 ranks"),
    (["--hosts-only"], "no launcher started this run"),
    (["--from", "nothing-here.parquet"], "results file nothing-here.parquet does not exist"),
    (["--from", "x.parquet", "--mode", "bidir"], "--from ranks results already measured"),
    (["--size", "1T"], "lower --size"),
])
def test_bad_pairs_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch, args, message):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and message in err[0], err


def test_from_results_without_pairs_rows_is_bad_input(tmp_path, capsys):
    path = write(tmp_path / "sweep.parquet", make_rows(repetitions=1))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and "no pairs rows" in err[0]


def test_compare_keeps_every_link_a_point_of_its_own(tmp_path):
    from commbench.analysis.compare import compare

    fast = {h: 0.12 for h in HOSTS}
    before = pd.DataFrame(pairs_rows(fast, repetitions=5))
    after = pd.DataFrame(pairs_rows({**fast, "n3": 0.06}, run_id="20250102-000000-bbbbbb", repetitions=5))
    c = compare.compare_frames(before, after)
    assert len(c.points) == 12 and not c.only_before and not c.only_after
    slow = {(p.key["src_host"], p.key["dst_host"]) for p in c.points if p.verdict == "regression"}
    assert slow == {(s, d) for s, d in itertools.permutations(HOSTS, 2) if "n3" in (s, d)}
    assert c.verdict == "regression"


def test_report_has_the_links_section_with_the_ranking(tmp_path, capsys):
    from commbench.analysis.report import report

    rows = pairs_rows({"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1})
    page = report.build_html(pd.DataFrame(rows))
    assert 'id="pairs"' in page and "Slow host: n3" in page and 'id="curves"' not in page
    path = write(tmp_path / "p.parquet", rows)
    with pytest.raises(SystemExit) as info:
        main(["report", str(path), "--out", str(tmp_path / "r.md")])
    assert info.value.code == 0
    text = (tmp_path / "r.md").read_text()
    assert "## Links between hosts" in text and "](r-pairs.png)" in text and "Slow host: n3" in text
    assert (tmp_path / "r-pairs.png").read_bytes()[:4] == b"\x89PNG" and not (tmp_path / "r.png").exists()


def test_plot_of_pairs_beside_a_sweep_writes_both(tmp_path, capsys):
    rows = pairs_rows({"n1": 0.1, "n2": 0.1, "n3": 0.05, "n4": 0.1}) + make_rows(repetitions=1)
    path = write(tmp_path / "both.parquet", rows)
    with pytest.raises(SystemExit) as info:
        main(["plot", str(path)])
    assert info.value.code == 0 and "both-pairs.png" in capsys.readouterr().out
    assert (tmp_path / "both.png").exists() and (tmp_path / "both-pairs.png").exists()


# ----------------------------------------------------------------------------- rails (pairs --per-rail)


from commbench.analysis.pairs import faultstext, linkfaults, railrank  # noqa: E402
from commbench.workloads import pairrails  # noqa: E402

RAILS = ("eth0", "eth1")


def rail_rows(rate, rails=RAILS, hosts=HOSTS, repetitions=2, run_id="20250101-000000-rails1", status=None):
    """pairs --per-rail rows: each link on each rail, rail after rail within a round (the order
    pairs stores them); rate[(host, rail)] caps every link of that host on that rail (default 0.119).
    status(src_host, dst_host, rail) -> a failed row's status, or None."""
    rows = []
    for rep in range(repetitions):
        for pairs in tournament.rounds(list(range(len(hosts)))):
            for phase in (0, 1):
                for rail in rails:
                    for a, b in pairs:
                        s, d = (a, b) if phase == 0 else (b, a)
                        gbps = min(rate.get((hosts[s], rail), 0.119), rate.get((hosts[d], rail), 0.119))
                        gbps *= 1 + 0.01 * rep
                        failed = status(hosts[s], hosts[d], rail) if status else None
                        bw = float("nan") if failed else gbps
                        rows.append({**pairs_rows({h: 0.1 for h in hosts}, hosts=hosts, run_id=run_id,
                                                  repetitions=1)[0],
                                     "repetition": rep, "busbw_GBps": bw, "algbw_GBps": bw,
                                     "time_us": (16 << 20) / gbps / 1e3, "src_host": hosts[s], "dst_host": hosts[d],
                                     "src_rank": s, "dst_rank": d, "rail": rail, "status": failed,
                                     "error": f"rank {d} did not answer ({failed})" if failed else None})
    return rows


def test_a_slow_rail_of_one_host_names_that_host_and_rail_only():
    df = pd.DataFrame(rail_rows({("n3", "eth1"): 0.024}))
    rr = railrank.rank_rails(railrank.by_rail(df, "20250101-000000-rails1"))
    assert list(rr.rails) == ["eth0", "eth1"]
    assert [(s.name, s.rail) for s in rr.slow] == [("n3", "eth1")]
    assert rr.slow[0].gbps == pytest.approx(0.02412, abs=1e-4)
    assert rr.slow[0].reference == pytest.approx(0.1196, abs=1e-4)
    assert rr.slow[0].text() == "host n3 rail eth1: 0.0241 GB/s, the same rail elsewhere 0.1196 GB/s (20%)"
    assert not rr.rails["eth0"].singled_out  # its other rail is not suspect
    assert [e.name for e in rr.rails["eth1"].singled_out] == ["n3"]  # nor the other hosts' eth1
    text = "\n".join(railrank.render(rr))
    assert "# Slow rail: host n3 rail eth1: 0.0241 GB/s, the same rail elsewhere 0.1196 GB/s (20%); its other " \
           "rails (eth0) are normal" in text
    assert "Slow host" not in text and "Note:" not in text and text.count("Slow rail") == 1
    assert railrank.verdict(rr).startswith("slow rail: host n3 rail eth1: 0.0241 GB/s")


def test_a_slow_host_on_every_rail_is_named_on_each_rail():
    df = pd.DataFrame(rail_rows({("n2", "eth0"): 0.03, ("n2", "eth1"): 0.03}))
    rr = railrank.rank_rails(railrank.by_rail(df, "20250101-000000-rails1"))
    assert [(s.name, s.rail) for s in rr.slow] == [("n2", "eth0"), ("n2", "eth1")]
    assert "its other rails" not in "\n".join(railrank.render(rr))


def test_a_rail_slower_on_every_host_names_nobody_but_says_so():
    df = pd.DataFrame(rail_rows({(h, "eth1"): 0.024 for h in HOSTS}))
    rr = railrank.rank_rails(railrank.by_rail(df, "20250101-000000-rails1"))
    assert rr.slow == [] and railrank.verdict(rr) is None
    text = "\n".join(railrank.render(rr))
    assert "No rail of any host stands out" in text
    assert "# Note: rail eth1 is slower on every host" in text
    assert "eth0 0.1196, eth1 0.0241" in text


def test_rows_with_rails_become_links_per_rail_and_without_rails_per_run():
    df = pd.DataFrame(rail_rows({}, repetitions=1))
    runs = linkrank.links_by_run(df)
    assert sorted(runs) == ["20250101-000000-rails1 rail eth0", "20250101-000000-rails1 rail eth1"]
    assert all(len(links) == 12 for links in runs.values())
    plain = pd.DataFrame(pairs_rows(dict.fromkeys(HOSTS, 0.1)))
    assert list(linkrank.links_by_run(plain)) == ["20250101-000000-aaaaaa"]
    assert railrank.has_rails(df) and not railrank.has_rails(plain)


def test_a_failed_rail_of_one_host_names_that_rail_not_the_host():
    down = lambda s, d, rail: "unreachable" if rail == "eth1" and "n3" in (s, d) else None  # noqa: E731
    df = pd.DataFrame(rail_rows({}, status=down))
    v = linkfaults.faults(df)
    assert [(c.kind, c.name, c.rail, c.status) for c in v.named] == [("host", "n3", "eth1", "unreachable")]
    assert v.exit_code == 1 and v.named[0].label == "n3 rail eth1"
    text = "\n".join(faultstext.render_faults(v))
    assert "# Unreachable host: n3 rail eth1 (every link failed: 3 of 3, unreachable)" in text
    assert "n1 -> n3 (eth1)" in text and "(eth0)" not in text
    lines, verdicts = faultstext.report(df)
    assert verdicts == ["run 20250101-000000-rails1: unreachable host: n3 rail eth1 (every link failed: 3 of 3, "
                        "unreachable)"]
    assert "Slow rail" not in "\n".join(lines)  # eth1 has no link of n3's left to be slow; eth0 is equal


def test_from_results_with_rails_names_the_rail_and_exits_1(tmp_path, capsys):
    path = write(tmp_path / "rails.parquet", rail_rows({("n3", "eth1"): 0.024}))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    out, err = capsys.readouterr()
    assert info.value.code == 1
    assert "24 links on 2 rails" in out and "# Rail eth0: 12 links" in out and "# Rail eth1: 12 links" in out
    assert "# Slow rail: host n3 rail eth1: 0.0241 GB/s, the same rail elsewhere 0.1196 GB/s" in out
    assert err.strip().splitlines() == [
        "commbench: run 20250101-000000-rails1: slow rail: host n3 rail eth1: 0.0241 GB/s, the same rail elsewhere "
        "0.1196 GB/s (20%) (best link on the rail below 80% of the same rail's median host's best link)"]
    assert "Slow host" not in out


def test_from_results_with_equal_rails_exits_0(tmp_path, capsys):
    path = write(tmp_path / "rails.parquet", rail_rows({}))
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--from", str(path)])
    assert info.value.code == 0 and "No rail of any host stands out" in capsys.readouterr().out


def test_the_heat_map_has_one_map_per_rail(tmp_path):
    df = pd.DataFrame(rail_rows({("n3", "eth1"): 0.024}, repetitions=1))
    fig = pairsplot.build_figure(df)
    maps = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert len(maps) == 2
    assert "rail eth0" in maps[0].get_title(loc="left") and "rail eth1" in maps[1].get_title(loc="left")
    red = [[t.get_text() for t in ax.get_yticklabels() if t.get_color() == "#c00000"] for ax in maps]
    assert red == [[], ["n3"]]
    assert "slow on rail eth1: n3" in maps[1].get_title(loc="left") and "no host stands out" in maps[0].get_title(
        loc="left")


def test_compare_keeps_each_rail_a_point_of_its_own():
    from commbench.analysis.compare import compare

    before = pd.DataFrame(rail_rows({}, repetitions=6))
    after = pd.DataFrame(rail_rows({("n3", "eth1"): 0.06}, run_id="20250102-000000-rails2", repetitions=6))
    c = compare.compare_frames(before, after)
    assert len(c.points) == 24
    slow = {(p.key["src_host"], p.key["dst_host"], p.key["rail"]) for p in c.points if p.verdict == "regression"}
    assert slow == {(s, d, "eth1") for s, d in itertools.permutations(HOSTS, 2) if "n3" in (s, d)}


def test_the_rails_every_host_has_and_named_rails_checked():
    facts = [{"lo": "127.0.0.1", "eth0": "10.0.0.1", "eth1": "10.0.1.1"},
             {"lo": "127.0.0.1", "eth0": "10.0.0.2", "eth1": "10.0.1.2", "eth2": "10.0.2.2"},
             {"lo": "127.0.0.1", "eth0": "10.0.0.3", "eth1": "10.0.1.3"}]
    hosts = ["a", "b", "c"]
    assert pairrails.choose(facts, hosts, [0, 1, 2], None) == ["eth0", "eth1"]  # no loopback, only shared
    assert pairrails.choose(facts, hosts, [0, 1, 2], ["eth1"]) == ["eth1"]
    assert pairrails.choose(facts, hosts, [0, 1, 2], ["lo"]) == ["lo"]  # named: loopback allowed
    with pytest.raises(BadInput, match=r"^--rails eth2: host a has no interface eth2 with an IPv4 address "
                                       r"\(it has: eth0, eth1, lo\); name rails that every host has$"):
        pairrails.choose(facts, hosts, [0, 1, 2], ["eth0", "eth2"])
    assert pairrails.choose(facts, hosts, [1], ["eth2"]) == ["eth2"]  # only participants count
    with pytest.raises(BadInput, match="found no interface with an IPv4 address on every host"):
        pairrails.choose([{"lo": "127.0.0.1"}, {"lo": "127.0.0.1"}], ["a", "b"], [0, 1], None)
    assert pairrails.parse("eth0, eth1") == ["eth0", "eth1"] and pairrails.parse(None) is None
    for bad in ("eth0,,eth1", "a/b", "x" * 16, "eth0,eth0", "e th"):
        with pytest.raises(BadInput):
            pairrails.parse(bad)
    here = pairrails.local_rails()
    assert here.get("lo") == "127.0.0.1"


def test_the_plan_keeps_the_rails():
    plan = PairsPlan(per_rail=True, rails=["eth0", "eth1"])
    again = PairsPlan.from_json(plan.to_json())
    assert again.per_rail and again.rails == ["eth0", "eth1"]


@pytest.mark.parametrize("args, message", [
    (["--rails", "eth0"], "--rails names the rails of --per-rail: add --per-rail"),
    (["--per-rail", "--rails", "eth0,eth0"], "a rail is named twice"),
    (["--per-rail", "--rails", "a/b"], "is not an interface name"),
    (["--from", "x.parquet", "--per-rail"], "--from ranks results already measured"),
])
def test_bad_rails_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["pairs", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and message in err[0], err


def test_the_report_names_the_slow_rail():
    from commbench.analysis.report import report

    page = report.build_html(pd.DataFrame(rail_rows({("n3", "eth1"): 0.024})))
    assert 'id="pairs"' in page and "Slow rail: host n3 rail eth1" in page and "Slow host" not in page


def test_rails_that_only_some_hosts_have_are_said():
    facts = [{"eth0": "10.0.0.1", "eth1": "10.0.1.1", "eth2": "10.0.2.1"}, {"eth0": "10.0.0.2", "eth2": "10.0.2.2"},
             {"eth0": "10.0.0.3", "lo": "127.0.0.1"}]
    hosts = ["a", "b", "c"]
    chosen = pairrails.choose(facts, hosts, [0, 1, 2], None)
    assert chosen == ["eth0"]
    assert pairrails.partial(facts, hosts, [0, 1, 2], chosen) == ["eth1 (on a only)", "eth2 (on a, b only)"]


def test_a_nightly_folder_of_pairs_runs_maps_the_newest_four():
    """Six nights of pairs: the figure (plot, report) shows the newest four maps and says so, where
    it once refused the folder."""
    nights = [pd.DataFrame(pairs_rows({"n1": 0.1, "n2": 0.1, "n3": 0.1, "n4": 0.1}, run_id=f"2025010{d}-000000-aaaaaa",
                                      repetitions=1)).assign(label=f"night {d}") for d in range(1, 7)]
    fig = pairsplot.build_figure(pd.concat(nights[::-1], ignore_index=True))  # the files' order is not the nights'
    titles = [ax.get_title(loc="left").split(":")[0] for ax in fig.axes if ax.get_title(loc="left")]
    assert titles == ["night 3", "night 4", "night 5", "night 6"], titles
    assert any("the newest 4 of 6 pairs runs" in t.get_text() for t in fig.texts)
