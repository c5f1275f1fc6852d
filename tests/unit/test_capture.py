"""`pairs --capture` (issue #37): tcpdump's command line (net/linkcapture.py), the slow hosts'
confirmation links and the capture file names (workloads/paircapture.py), and --capture refused
with --from. Its process, with stand-in binaries and the real one, is in
tests/integration/test_tcpdump.py."""

from __future__ import annotations



from commbench.net import linkcapture
from commbench.net.linkcapture import Capture
from commbench.workloads import paircapture
from commbench.workloads.paircapture import Slow


def test_argv_keeps_headers_only_of_the_peer_bounded_in_packets_and_seconds():
    cmd = linkcapture.argv("eth0", "10.1.0.2", "/r/run-a-b.pcap", [5000, 6000, 5000], 40.5, user="root")
    assert cmd[:3] == ["tcpdump", "-i", "eth0"]
    assert cmd[cmd.index("-s") + 1] == "128" and "--immediate-mode" in cmd and "-n" in cmd
    assert cmd[cmd.index("-c") + 1] == str(linkcapture.MAX_PACKETS)
    assert cmd[cmd.index("-G") + 1] == "41" and cmd[cmd.index("-W") + 1] == "1"
    assert cmd[cmd.index("-Z") + 1] == "root"
    assert cmd[-3:] == ["-w", "/r/run-a-b.pcap", "host 10.1.0.2 and not (port 5000 or port 6000)"]


def test_argv_without_a_user_or_ports_and_a_folder_with_a_percent_sign():
    cmd = linkcapture.argv("ib0", "10.1.0.2", "/r/50%/x.pcap", [], 1.0)
    assert "-Z" not in cmd
    assert cmd[-2:] == ["/r/50%%/x.pcap", "host 10.1.0.2"]  # -G reads the name as a strftime pattern


def test_a_missing_tcpdump_is_said_in_one_line(tmp_path):
    cap = Capture(["no-such-tcpdump-here", "-i", "eth0"], str(tmp_path / "x.pcap"), 5)
    assert not cap.start()
    assert cap.error == "no-such-tcpdump-here is not installed here (apt-get install tcpdump)"


NAMES = {0: "n1", 1: "n2", 2: "n3", 3: "n4"}
HOSTS = ["n1", "n2", "n3", "n4"]


def test_a_slow_host_is_measured_again_against_two_that_are_not_its_slow_direction_first():
    plan = paircapture.slow_plan([Slow("n3", None, sends=True, receives=False)], NAMES, HOSTS, set(), [])
    assert plan == [[2, 0], [2, 1]]
    both = paircapture.slow_plan([Slow("n3", None)], NAMES, HOSTS, set(), [])
    assert both == [[2, 0], [1, 2]]  # slow both ways: one link each way
    receives = paircapture.slow_plan([Slow("n3", None, sends=False, receives=True)], NAMES, HOSTS, set(), [])
    assert receives == [[0, 2], [1, 2]]


def test_slow_partners_are_neither_slow_nor_blamed_and_planned_pairs_are_not_repeated():
    slow = [Slow("n1", None), Slow("n2", None)]
    plan = paircapture.slow_plan(slow, NAMES, HOSTS, {"n3"}, [[0, 3]])
    assert plan == [[1, 3]]  # n1: only n4 is left, and 0-3 is planned already; n2: n4 too
    rails = paircapture.slow_plan([Slow("n2", "eth1")], NAMES, HOSTS, set(), [[0, 1, "eth0"]])
    assert rails == [[1, 0, "eth1"], [2, 1, "eth1"]]


def test_capture_files_are_named_after_the_run_and_the_link():
    folder = paircapture.Path("/r")
    assert str(paircapture.file_name(folder, "20260101-x", "n1", "n3", None)) == "/r/20260101-x-n1-n3.pcap"
    assert str(paircapture.file_name(folder, "R", "h/r3", "a b%", "eth1")) == "/r/R-h_r3-a_b_-eth1.pcap"


def test_capture_with_from_is_refused_in_one_line(cli, tmp_path):
    res = cli("pairs", "--capture", "--from", str(tmp_path))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--capture" in lines[0] and "drop --capture" in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def captures_of(got: list) -> paircapture.LinkCaptures:
    """Rank 0's LinkCaptures with these (label, record) pairs collected."""
    from types import SimpleNamespace

    caps = paircapture.LinkCaptures(SimpleNamespace(plan=SimpleNamespace(run_id="R")))
    caps.got = got
    return caps


def test_the_evidence_names_each_file_and_says_why_one_is_missing():
    summary = {"packets": 3081, "seconds": 0.5, "tcp_segments": 3081, "retransmissions": 506, "dup_acks": 675,
               "connections": 1}
    lines = captures_of([
        ("n2 -> n3, checking slow host n3", {"host": "n2", "iface": "eth0", "file": "/r/R-n2-n3.pcap",
                                             "summary": summary, "dropped": 7}),
        ("n1 -> n3, checking slow host n3", {"host": "n1", "error": "tcpdump is not installed here (apt-get ...)"}),
    ]).lines()
    assert lines[0].startswith("# Packet captures of the confirmation round (--capture: headers only, 128 B a packet")
    assert lines[1] == ("#   n2 -> n3, checking slow host n3: 3,081 packets in 0.5 s (1 TCP connection): 506 "
                        "retransmissions, 675 duplicate ACKs, 0 zero windows, 0 resets (captured at n2 eth0, 7 dropped "
                        "by the kernel): /r/R-n2-n3.pcap")
    assert lines[2] == ("#   n1 -> n3, checking slow host n3: no capture at n1: "
                        "tcpdump is not installed here (apt-get ...)")


def test_no_suspect_link_is_said_in_one_line():
    assert captures_of([]).lines() == ["# Packet captures (--capture): no link was suspect (none failed or was named "
                                       "slow), so none was captured."]
