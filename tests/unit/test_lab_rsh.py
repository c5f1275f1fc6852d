"""`commbench lab rsh` (Open MPI's remote agent into a lab host) reads its arguments as ssh does,
and the lab's nsswitch.conf keeps name lookups inside the lab (no DNS, which a lab host cannot
reach: torch's TCPStore printed "[c10d] The hostname of the client socket cannot be retrieved.
err=-3" for every peer)."""

from __future__ import annotations

import pytest

from commbench.core.errors import BadInput
from commbench.lab.network import lab_nsswitch
from commbench.lab.ranklaunch import rsh_target

# What Open MPI 4.1.4's plm_rsh passed to an agent (recorded with a logging agent on Debian 12):
# the host, then a command line meant for a remote shell.
MPIRUN_ARGS = ["cmpnode2", " orted", "-mca", "ess", '"env"', "-mca", "orte_hnp_uri",
               '"705560576.0;tcp://10.245.0.1:58197"', "--tree-spawn"]


def test_mpiruns_call():
    assert rsh_target(MPIRUN_ARGS) == ("cmpnode2", MPIRUN_ARGS[1:])


@pytest.mark.parametrize("args,host,command", [
    (["-x", "h2", "hostname"], "h2", ["hostname"]),
    (["-o", "BatchMode=yes", "-x", "h2", "echo", "a b"], "h2", ["echo", "a b"]),
    (["-q", "--", "h2", "-v"], "h2", ["-v"]),
    (["-p", "22", "-l", "root", "h2", "ls", "-l"], "h2", ["ls", "-l"]),
])
def test_ssh_options_before_the_host(args, host, command):
    assert rsh_target(args) == (host, command)


def test_no_host_or_no_command():
    with pytest.raises(BadInput, match="needs a host and a command"):
        rsh_target([])
    with pytest.raises(BadInput, match="needs a host and a command"):
        rsh_target(["-x"])
    with pytest.raises(BadInput, match="h2: no command to run there"):
        rsh_target(["h2"])


DEBIAN = """passwd:         files systemd
group:          files systemd

hosts:          files mdns4_minimal [NOTFOUND=return] dns
networks:       files
"""


def test_the_labs_nsswitch_looks_names_up_in_the_hosts_file_only():
    text = lab_nsswitch(DEBIAN)
    assert [line for line in text.splitlines() if line.startswith("hosts:")] == ["hosts: files"]
    assert "passwd:         files systemd" in text and "networks:       files" in text
    assert "dns" not in text
    assert lab_nsswitch(None) == "hosts: files\n"
