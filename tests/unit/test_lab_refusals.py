"""The lab's refusals that need no root and create nothing."""

import os

import pytest

from commbench.lab import network as lab
from commbench.cli.app import main
from commbench.core.errors import BadInput


@pytest.mark.parametrize("args", [["lab", "up"], ["lab", "status"], ["lab", "set", "--mtu", "9000"],
                                  ["lab", "down"], ["lab", "run", "--", "true"], ["lab", "exec", "x", "--", "true"]])
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
