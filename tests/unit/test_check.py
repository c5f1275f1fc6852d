"""`commbench check` without ranks (issue #41 parts 1 and 2): the profile parser, the verdict per
host, the drain/resume decisions on `scontrol show node -o` as the lab's real Slurm (22.05.8)
printed it (tests/data/slurm), and the refusals of bad input (one line, exit 2)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from commbench.analysis.check import checkprofile
from commbench.analysis.check.checkverdict import Judge, table
from commbench.core.errors import BadInput
from commbench.integrations import slurmnodes
from commbench.workloads.check import child_argv, doctor_json, link_rates

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


# ---- the profile ----


def test_profile_defaults_and_values():
    p = checkprofile.parse("version: 1\nsteps: [pairs, doctor]\ntime_budget: 60\nlink_rate: 300mbit\n"
                           "pairs: {size: 1M, iters: 3, threshold: 0.7}\n")
    assert p.steps == ("doctor", "pairs")  # setup first, whatever the order written
    assert (p.time_budget_s, p.link_rate_bits, p.pairs_size, p.pairs_iters, p.threshold) == (60, 3e8, 1 << 20, 3, 0.7)
    assert checkprofile.load(None).steps == ("doctor", "pairs")


@pytest.mark.parametrize("text, words", [
    ("steps: [doctor, ping]", "steps: unknown step 'ping': use doctor, pairs, sweep"),
    ("stepz: [doctor]", "unknown key 'stepz': use version, steps, time_budget, link_rate, pairs, sweep, bands"),
    ("pairs: {sise: 1M}", "pairs: unknown key 'sise': use size, iters, threshold"),
    ("steps: [sweep]", "the sweep step is judged by gate bands: add 'bands: FILE'"),
    ("time_budget: -1", "time_budget -1 must be a number from 1 to 86400"),
    ("link_rate: fast", "link_rate 'fast' is not a rate"),
    ("steps: []", "steps is empty"),
    ("version: 2", "version 2 is not one this commbench reads"),
    # what the red team found taken (issue 58): an empty or null document, a list, a float count, an
    # escape in a collective, sizes and rates past any machine
    ("", "p.yaml: the profile is empty: write its keys (at least 'version: 1'"),
    ("null", "p.yaml: the profile is empty"),
    ("~\n", "p.yaml: the profile is empty"),
    ("[]", "p.yaml must be a mapping of version, steps"),
    ("pairs: {iters: 2.5}", "pairs: iters 2.5 must be a whole number from 1 to 10000"),
    ("sweep: {iters: 5.0}", "sweep: iters 5.0 must be a whole number from 1 to 10000"),
    ("sweep: {iters: true}", "sweep: iters True must be a whole number"),
    ('sweep: {collective: "all_reduce\\e[31m"}',
     "p.yaml: sweep: collective 'all_reduce\\x1b[31m' must name one collective: one of all_reduce, reduce_scatter"),
    ("sweep: {collective: [all_reduce]}", "sweep: collective ['all_reduce'] must name one collective"),
    ("sweep: {collective: 'all_reduce,all_gather'}", "must name one collective: one of all_reduce"),
    ("sweep: {collective: all}", "must name one collective"),
    ("pairs: {size: 1e15}", "pairs: size 1e15 is past any machine's: a check's sizes go up to 16 GiB"),
    ("sweep: {sizes: [1M, 17G]}", "sweep: sizes 17G is past any machine's"),
    ("link_rate: 1e30Gbps", "link_rate 1e30Gbps is past any link's: give a rail's rate (at most 100 Tbit/s)"),
])
def test_profile_refusals_name_the_key_and_what_is_allowed(text, words):
    with pytest.raises(BadInput) as exc:
        checkprofile.parse(text, "p.yaml")
    assert words in str(exc.value) and "\n" not in str(exc.value) and "\x1b" not in str(exc.value)


def test_a_profile_takes_a_collective_by_any_of_its_names_and_sizes_up_to_the_bound():
    p = checkprofile.parse("sweep: {collective: allreduce, sizes: [1M, 16G], iters: 3}\n", "p.yaml")
    assert (p.sweep_collective, p.sweep_sizes, p.sweep_iters) == ("all_reduce", (1 << 20, 16 << 30), 3)


def test_profile_bands_inline_and_from_a_file(tmp_path):
    bands = "version: 1\nsystem: lab\nentries:\n- {collective: all_reduce, size: 1M, ranks: 4, busbw_GBps: 0.1}\n"
    (tmp_path / "bands.yaml").write_text(bands)
    p = checkprofile.parse("steps: [sweep]\nbands: bands.yaml\n", "p.yaml", tmp_path)
    assert p.bands is not None and p.bands.entries[0].size_bytes == 1 << 20
    inline = checkprofile.parse("steps: [sweep]\nbands: {version: 1, entries: [{collective: all_reduce, size: 1M, "
                                "ranks: 4, busbw_GBps: 0.1}]}\n", "p.yaml")
    assert inline.bands is not None and inline.bands.entries[0].ranks == 4


# ---- the verdict ----


def _pairs_rows(slow: str, gbps: float = 0.03, fast: float = 0.12) -> pd.DataFrame:
    hosts = ["n1", "n2", "n3", "n4"]
    rows = []
    for i, a in enumerate(hosts):
        for j, b in enumerate(hosts):
            if a != b:
                rows.append({"run_id": "r", "workload": "pairs", "collective": "send_recv", "src_host": a,
                             "dst_host": b, "src_rank": i, "dst_rank": j, "repetition": 0, "status": "ok",
                             "confirm": None, "busbw_GBps": gbps if slow in (a, b) else fast})
    return pd.DataFrame(rows)


def test_a_slow_host_fails_with_its_ratio_and_the_others_pass():
    judge = Judge(["n1", "n2", "n3", "n4"])
    judge.pairs(_pairs_rows("n3"), 0.8)
    judge.steps["pairs"] = "ran"
    result = judge.result()
    assert [(h.host, h.verdict) for h in result.hosts] == [("n3", "FAIL"), ("n1", "PASS"), ("n2", "PASS"),
                                                           ("n4", "PASS")]
    assert result.hosts[0].reason == "its links run at 0.25 of the others (pairs: best link 30 MB/s vs 120 MB/s)"
    assert result.exit_code == 1 and result.drain_list() == [("n3", result.hosts[0].reason)]
    assert any(line.startswith("n3    FAIL     its links run at 0.25") for line in table(result))


def test_a_measured_reason_comes_before_a_doctor_finding_and_notes_do_not_fail():
    judge = Judge(["n1", "n2", "n3", "n4"])
    judge.doctor([{"host": "n3", "message": "n3 rail eth0: 300 Mbit/s", "hint": "tc", "severity": "problem"},
                  {"host": "n1", "message": "a note", "hint": "", "severity": "note"}])
    judge.pairs(_pairs_rows("n3"), 0.8)
    judge.steps["doctor"] = "ran"
    by = {h.host: h for h in judge.result().hosts}
    assert by["n3"].reason.startswith("its links run at 0.25") and by["n3"].reasons[1].startswith("doctor: n3 rail")
    assert by["n1"].verdict == "PASS"


def test_doctor_alone_fails_the_odd_hosts_it_names_and_link_rate_below_profile_fails():
    judge = Judge(["a", "b", "c"])
    judge.doctor([{"host": "b,c", "message": "MTU differs", "hint": "set it", "severity": "problem"}])
    judge.link_rates({"a": 1e9, "b": 1e9, "c": 3e8}, 1e9)
    judge.steps["doctor"] = "ran"
    by = {h.host: h.verdict for h in judge.result().hosts}
    assert by == {"a": "PASS", "b": "FAIL", "c": "FAIL"}
    assert "300 Mbit/s, below the profile's 1 Gbit/s" in " ".join(judge.result().hosts[1].reasons
                                                                    + judge.result().hosts[0].reasons)


def test_equal_links_pass_everyone_and_no_step_is_no_verdict():
    judge = Judge(["n1", "n2", "n3", "n4"])
    judge.pairs(_pairs_rows("none"), 0.8)
    judge.steps["pairs"] = "ran"
    assert judge.result().exit_code == 0 and judge.result().drain_list() == []
    empty = Judge(["n1"])
    empty.steps["pairs"] = "failed: stopped at the time budget (10 s)"
    assert empty.result().exit_code == 3


def test_a_sweep_that_misses_its_bands_warns_every_host_when_none_is_to_blame():
    from commbench.analysis.gate import gate
    from commbench.analysis.gate.bands import parse_bands

    bands = parse_bands("version: 1\nentries:\n- {collective: all_reduce, size: 1M, ranks: 2, busbw_GBps: 10}\n")
    entry = bands.entries[0]
    report = gate.GateReport("lab", "<bands>", [gate.EntryResult(entry, 1.0, 5, 0, 0.1, entry.band(), "FAIL",
                                                                 "1 GB/s is below the band")])
    judge = Judge(["n1", "n2"])
    judge.sweep(report)
    judge.steps["sweep"] = "ran"
    result = judge.result()
    assert {h.verdict for h in result.hosts} == {"WARN"} and result.exit_code == 0
    assert result.job[0].startswith("gate: FAIL")


# ---- drain and resume, on the lab's real scontrol output ----


def test_scontrol_show_node_is_read_with_reasons_that_hold_spaces():
    nodes = {n.name: n for n in slurmnodes.parse_nodes((DATA / "scontrol-show-node-drained.txt").read_text())}
    assert list(nodes) == ["ccknode1", "ccknode2", "ccknode3", "ccknode4"]
    assert nodes["ccknode2"].state == "IDLE+DRAIN" and nodes["ccknode2"].reason == "hand: bad dimm"
    assert nodes["ccknode3"].reason == "commbench: its links run at 0.31 of the others" and nodes["ccknode3"].ours
    assert not nodes["ccknode2"].ours and not nodes["ccknode1"].drained and nodes["ccknode1"].reason == ""


def test_drain_fails_only_and_resume_only_nodes_commbench_drained():
    nodes = slurmnodes.parse_nodes((DATA / "scontrol-show-node-drained.txt").read_text())
    verdicts = {"ccknode1": ("FAIL", "slow"), "ccknode2": ("PASS", "ok"), "ccknode3": ("PASS", "ok"),
                "ccknode4": ("WARN", "w"), "elsewhere": ("FAIL", "x")}
    p = slurmnodes.plan(verdicts, nodes, drain=True, resume=True)
    assert [(n.name, r) for n, r in p.drain] == [("ccknode1", "commbench: slow")]
    assert [n.name for n in p.resume] == ["ccknode3"]  # never ccknode2 (drained by hand)
    assert any("ccknode2: drained by someone else (hand: bad dimm): not resumed" in x for x in p.left)
    assert any(x.startswith("elsewhere: no Slurm node") for x in p.left)
    hand = slurmnodes.plan({"ccknode2": ("FAIL", "slow")}, nodes, drain=True, resume=False)
    assert hand.drain == [] and "their reason kept" in hand.left[0]
    assert slurmnodes.plan(verdicts, nodes, drain=False, resume=False).drain == []


def test_scontrol_argv_has_no_shell_and_a_bounded_one_line_reason():
    node = slurmnodes.parse_nodes((DATA / "scontrol-show-node-idle.txt").read_text())[2]
    reason = slurmnodes.reason_text('slow "x"\n$(rm -rf /)' + "y" * 400)
    argv = slurmnodes.update_argv(node, reason)
    assert argv[:4] == ["scontrol", "update", "NodeName=ccknode3", "State=DRAIN"] and len(argv) == 5
    assert argv[4].startswith("Reason=commbench: slow 'x'") and "\n" not in argv[4]
    assert len(reason) <= 200
    assert slurmnodes.update_argv(node, None) == ["scontrol", "update", "NodeName=ccknode3", "State=RESUME"]


def test_carry_out_runs_each_update_and_says_what_failed():
    nodes = slurmnodes.parse_nodes((DATA / "scontrol-show-node-drained.txt").read_text())
    p = slurmnodes.plan({"ccknode1": ("FAIL", "slow"), "ccknode3": ("PASS", "")}, nodes, True, True)
    calls = []

    def run(argv):
        calls.append(argv)
        code = 1 if "State=RESUME" in argv else 0
        return subprocess.CompletedProcess(argv, code, "", "slurm_update error: Invalid node state" if code else "")

    lines = slurmnodes.carry_out(p, run)
    assert calls[0][-1] == "Reason=commbench: slow" and calls[1][-1] == "State=RESUME"
    assert lines[0] == "drained ccknode1: commbench: slow"
    assert lines[1].startswith("FAILED to resume ccknode3: scontrol exit 1: slurm_update error")


# ---- the steps' plumbing ----


def test_each_launcher_starts_one_rank_a_host(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "4")
    assert child_argv(["pairs"], "srun")[:4] == ["srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1"]
    assert child_argv(["pairs"], "lab")[3:6] == ["lab", "run", "--"]
    assert child_argv(["pairs"], "local", 3)[-2:] == ["--nproc", "3"]
    assert "--nproc" not in child_argv(["doctor"], "local", 3)


def test_doctor_json_and_link_rates_from_its_facts():
    doc = doctor_json('launcher noise\n{"hosts": [{"host": "a", "interfaces": [{"name": "eth0", "addresses": '
                      '["10.0.0.1/24"], "link_layer": "ether", "speed_mbps": 10000, "shaper": {"kind": "tbf", '
                      '"rate_bits": 300000000}}]}], "findings": []}')
    assert doc is not None and link_rates(doc) == {"a": 3e8}
    assert doctor_json("no json here") is None


# ---- bad input: one line, exit 2 ----


def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, monkeypatch):
    for var in ("SLURM_JOB_ID", "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(var, raising=False)
    bad = tmp_path / "p.yaml"
    bad.write_text("steps: [doctor, ping]\n")
    cases = [(["check", "--profile", str(bad)], "unknown step 'ping'"),
             (["check", "--drain", "--launcher", "local"], "outside Slurm (no SLURM_JOB_ID)"),
             (["check", "--launcher", "srun"], "run check inside an sbatch script"),
             (["check", "--mode", "healthcheck", "--drain"], "never calls scontrol"),
             (["check", "--link-rate", "fast"], "--link-rate 'fast' is not a rate"),
             (["check", "--profile", str(tmp_path / "none.yaml")], "does not exist")]
    for argv, words in cases:
        res = cli(*argv)
        assert res.returncode == 2 and words in res.stderr and res.stderr.count("\n") == 1, (argv, res.stderr)
