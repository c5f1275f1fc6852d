"""The lab's refusals that need no root and create nothing."""

import os

import pytest

from commbench.lab import network as lab
from commbench.cli.app import main
from commbench.core.errors import BadInput


@pytest.mark.parametrize("args", [["lab", "up"], ["lab", "status"], ["lab", "set", "--mtu", "9000"],
                                  ["lab", "down"], ["lab", "run", "--", "true"], ["lab", "exec", "x", "--", "true"]])
@pytest.mark.failure(
    row="lab-command-without-root",
    section="Bad input",
    failure="a lab command without root",
    does="one line saying it needs root",
)
def test_every_lab_command_refuses_without_root(monkeypatch, capsys, args):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs root" in err[0] and "sudo" in err[0]


@pytest.mark.parametrize("text, bits", [("1gbit", 1e9), ("800mbit", 8e8), ("1.5gbit", 1.5e9), ("100kbit", 1e5)])
def test_parse_rate(text, bits):
    assert lab.parse_rate(text) == bits


@pytest.mark.parametrize("text", ["fast", "1gb", "0mbit", "-1gbit", ""])
def test_parse_rate_rejects(text):
    with pytest.raises(BadInput, match="not a tc rate"):
        lab.parse_rate(text)


# ---------------------------------------------------------------------------------------------
# Rails: `lab up --rails K`, `lab set --rail R`, and the state file of a multi-rail lab
# ---------------------------------------------------------------------------------------------

import json  # noqa: E402

from commbench.lab import state as labstate  # noqa: E402


@pytest.fixture
def no_lab_tools(tmp_path, monkeypatch):
    """A private lab (prefix zq, state under tmp_path), root as far as the lab can tell, and ip/tc
    that fail the test if called: a refusal must come before anything is made or changed."""
    def forbidden(*args, **kw):
        raise AssertionError(f"the lab ran {args} on bad input")

    monkeypatch.setattr(labstate.os, "geteuid", lambda: 0)
    monkeypatch.setattr(labstate, "PREFIX", "zq")
    monkeypatch.setattr(labstate, "BRIDGE", "zqbr0")
    monkeypatch.setattr(labstate, "STATE_DIR", tmp_path / "lab")
    monkeypatch.setattr(lab, "_ip", forbidden)
    monkeypatch.setattr(lab, "_tc", forbidden)
    monkeypatch.setattr(lab, "_netns_exists", lambda name: False)
    monkeypatch.setattr(lab, "_link_exists", lambda name: False)


def two_rail_state() -> dict:
    """What `lab up --nodes 2 --rails 2 --subnet 10.239.0.0/24` writes for prefix zq."""
    def node(i):
        return {"name": f"zqnode{i}", "addr": f"10.239.0.{i}", "port": f"zqveth{i}", "mtu": 1500, "rate": "1gbit",
                "queue": None, "frames": False,
                "rails": [{"iface": "eth1", "addr": f"10.239.1.{i}", "port": f"zqveth{i}r1", "mtu": 1500,
                           "rate": "1gbit", "queue": None, "frames": False}]}
    return {"subnet": "10.239.0.0/24", "bridge": "zqbr0", "nodes": [node(1), node(2)],
            "created": [["bridge", "zqbr0"], ["bridge", "zqbr1"], ["netns", "zqnode1"], ["link", "zqveth1"],
                        ["link", "zqveth1r1"], ["netns", "zqnode2"], ["link", "zqveth2"], ["link", "zqveth2r1"]],
            "daemons": [], "files": [], "rails": 2}


def write(doc: dict) -> None:
    labstate.STATE_DIR.mkdir(parents=True, exist_ok=True)
    labstate.state_path().write_text(json.dumps(doc))


def cli(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("argv, text", [
    (["lab", "up", "--rails", "0"], "--rails 0 is outside 1..8"),
    (["lab", "up", "--rails", "9"], "--rails 9 is outside 1..8"),
    (["lab", "up", "--rails", "two"], "'two' is not a valid integer"),
    (["lab", "up", "--rails", "2", "--subnet", "10.255.255.0/24"],
     "--subnet 10.255.255.0/24 with --rails 2: rail 1 would be on 11.0.0.0/24, not a private range"),
    (["lab", "up", "--rails", "3", "--subnet", "172.31.255.0/25"],
     "rail 2 would be on 172.32.0.0/25, not a private range"),
    (["lab", "up", "--rails", "2", "--subnet", "255.255.255.0/24"], "rail 1 would be past the last address"),
])
def test_lab_up_refuses_bad_rails_before_making_anything(no_lab_tools, capsys, argv, text):
    code, err = cli(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and text in err, err
    assert not labstate.state_path().exists()


def test_rail_subnets_shift_the_subnet_by_whole_network_sizes():
    assert [str(n) for n in lab.rail_subnets("10.242.0.0/24", 3, 2)] == ["10.242.0.0/24", "10.242.1.0/24",
                                                                         "10.242.2.0/24"]
    assert [str(n) for n in lab.rail_subnets("10.9.0.64/26", 2, 4)] == ["10.9.0.64/26", "10.9.0.128/26"]
    assert [str(n) for n in lab.rail_subnets("fd00::ff00/120", 2, 2)] == ["fd00::ff00/120", "fd00::1:0/120"]


@pytest.mark.parametrize("rail, rails, text", [
    ("eth5", 2, "--rail 'eth5' is not a rail of this lab: its hosts have eth0..eth1 (--rails 2)"),
    ("2", 2, "--rail '2' is not a rail of this lab"),
    ("eth01", 2, "--rail 'eth01' is not a rail"),
    ("eth-1", 2, "--rail 'eth-1' is not a rail"),
    ("ib0", 2, "--rail 'ib0' is not a rail"),
    ("eth1", 1, "--rail 'eth1' is not a rail of this lab: its hosts have eth0 (--rails 1)"),
])
def test_lab_set_refuses_a_rail_the_hosts_do_not_have(no_lab_tools, capsys, rail, rails, text):
    doc = two_rail_state()
    if rails == 1:
        doc = {**doc, "rails": 1, "nodes": [{k: v for k, v in n.items() if k != "rails"} for n in doc["nodes"]]}
    write(doc)
    code, err = cli(["lab", "set", "--rail", rail, "--rate", "200mbit"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and text in err, err
    assert json.loads(labstate.state_path().read_text()) == doc  # nothing changed


def test_a_two_rail_state_file_round_trips_and_a_one_rail_file_keeps_its_old_shape(no_lab_tools):
    write(two_rail_state())
    state = labstate.load_state()
    assert state.rails == 2 and [[r.iface for r in n.links()] for n in state.nodes] == [["eth0", "eth1"]] * 2
    assert state.nodes[1].rails[0].addr == "10.239.1.2" and labstate.load_for_down()[1] == []
    labstate.save_state(state)
    assert json.loads(labstate.state_path().read_text()) == two_rail_state()
    old = {k: v for k, v in two_rail_state().items() if k != "rails"}
    old["nodes"] = [{k: v for k, v in n.items() if k != "rails"} for n in old["nodes"]]
    old["created"] = [["bridge", "zqbr0"], ["netns", "zqnode1"], ["link", "zqveth1"], ["netns", "zqnode2"],
                      ["link", "zqveth2"]]
    write(old)  # a file from before rails
    state = labstate.load_state()
    assert state.rails == 1 and state.nodes[0].rails == []
    labstate.save_state(state)
    assert json.loads(labstate.state_path().read_text()) == old


def _edited(path: str, value):
    doc = two_rail_state()
    target = doc
    keys = path.split(".")
    for k in keys[:-1]:
        target = target[int(k)] if k.isdigit() else target[k]
    last = int(keys[-1]) if keys[-1].isdigit() else keys[-1]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize("path, value, text", [
    ("rails", 9, "rails 9 is outside 1..8"),
    ("rails", 0, "rails 0 is outside 1..8"),
    ("rails", "2", "'rails' is not a whole number"),
    ("rails", True, "'rails' is not a whole number"),
    ("rails", 3, "host 1 has 2 rails, the lab 3"),
    ("rails", KeyError, "host 1 has 2 rails, the lab 1"),
    ("nodes.0.rails", "eth1", "host 1's 'rails' is not a list"),
    ("nodes.1.rails", [], "host 2 has 1 rails, the lab 2"),
    ("nodes.0.rails.0", "eth1", "host 1 rail 1 is not an object"),
    ("nodes.0.rails.0.iface", "eth7", "host 1 rail 1 is 'eth7', not eth1"),
    ("nodes.0.rails.0.addr", "$(reboot)", "host 1 rail 1's address '$(reboot)' is not an IP address"),
    ("nodes.0.rails.0.mtu", "big", "host 1 rail 1's 'mtu' is not a whole number"),
    ("nodes.0.rails.0.owner", "x", "host 1 rail 1 has an unknown field 'owner'"),
    ("nodes.0.rails.0.port", KeyError, "host 1 rail 1 has no 'port'"),
])
def test_a_damaged_rails_field_is_refused(no_lab_tools, capsys, path, value, text):
    write(_edited(path, value))
    code, err = cli(["lab", "status"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "damaged" in err and text in err, err


@pytest.mark.parametrize("port, text", [("eth1", "link 'eth1'"), ("zqveth1r8", "link 'zqveth1r8'"),
                                        ("zqveth1r0", "link 'zqveth1r0'"), ("docker0", "link 'docker0'")])
def test_a_rail_port_that_is_not_the_lab_s_is_refused(no_lab_tools, capsys, port, text):
    write(_edited("nodes.0.rails.0.port", port))
    code, err = cli(["lab", "set", "--rate", "1gbit"], capsys)
    assert code == 2 and text in err and "does not make" in err, err


@pytest.mark.parametrize("kind, name, ours", [
    ("bridge", "zqbr0", True), ("bridge", "zqbr1", True), ("bridge", "zqbr7", True), ("bridge", "zqbr8", False),
    ("bridge", "zqbr10", False), ("bridge", "zqbr", False), ("bridge", "docker0", False), ("bridge", "xzqbr1", False),
    ("link", "zqveth1", True), ("link", "zqveth12r3", True), ("link", "zqveth1r7", True), ("link", "zqveth1r0", False),
    ("link", "zqveth1r8", False), ("link", "zqveth1r", False), ("link", "zqvethr1", False), ("link", "zqbr1", False),
    ("netns", "zqnode1r1", False),
])
def test_owns_resource_accepts_the_rail_names_and_nothing_else(no_lab_tools, kind, name, ours):
    assert labstate.owns_resource(kind, name) is ours


# ---------------------------------------------------------------------------------------------
# `lab set --node 3` as `--rail 1` is taken (issue #40): the host's number or its name
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["2", "zqnode2", " 2"])
def test_a_host_is_found_by_its_number_or_its_name(no_lab_tools, given):
    write(two_rail_state())
    assert labstate.load_state().node(given).name == "zqnode2"


@pytest.mark.parametrize("node", ["3", "0", "02", "node2", "cbnode2", "-1"])
def test_lab_set_refuses_a_host_the_lab_does_not_have_naming_the_hosts(no_lab_tools, capsys, node):
    write(two_rail_state())
    code, err = cli(["lab", "set", "--node", node, "--rate", "200mbit"], capsys)
    assert code == 2 and err.strip().splitlines() == [
        f"commbench: no lab host '{node}': the hosts are zqnode1, zqnode2 (or their numbers, 1..2)"], err
    assert json.loads(labstate.state_path().read_text()) == two_rail_state()  # nothing changed
