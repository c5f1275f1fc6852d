"""`commbench doctor`'s human report (issue #40): the findings first with their hints, one line per
host by default, the per-host facts only with --verbose, and "no problem found" when clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.cli.app import main

DATA = Path(__file__).resolve().parent.parent / "data" / "netinfo"
FOUR = ("ib_hdr_3port", "ib_hdr_port_down", "roce_v2_gids", "roce_mtu1500_cx6dx")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith(("NCCL_", "GLOO_")):
            monkeypatch.delenv(name)


def doctor_lines(capsys, *args: str) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exc:
        main(["doctor", *args])
    return exc.value.code, capsys.readouterr().out.splitlines()


def roots(*names: str) -> list[str]:
    return [arg for n in names for arg in ("--root", str(DATA / n))]


def test_four_hosts_print_the_findings_first_and_one_line_per_host(capsys):
    code, lines = doctor_lines(capsys, *roots(*FOUR))
    assert code == 1
    assert lines[0].startswith("PROBLEM [")  # before: 36 lines of facts came first
    assert lines[1].startswith("    hint: ")
    assert not any(line.startswith(("interface ", "RDMA port ", "ibv_devinfo:", "GPUs:")) for line in lines)
    names = ["ib_hdr_3port", "ib_hdr_port_down", "roce_v2_gids", "node75"]  # roce_mtu1500_cx6dx's hostname
    host_lines = [line for line in lines if line.split("  ")[0] in names]
    assert [line.split("  ")[0] for line in host_lines] == names  # one line each, in order
    assert "ib_hdr_port_down  recorded " in "\n".join(host_lines) and "RDMA 1/2 ports ACTIVE" in "\n".join(host_lines)
    assert lines[-2].startswith("doctor: ") and "problem(s) on" in lines[-2]
    assert lines[-1] == "(each host's interfaces, RDMA ports, GPUs and NCCL/GLOO settings in full: --verbose)"
    last_finding = max(i for i, line in enumerate(lines) if line.startswith(("PROBLEM", "note")))
    assert last_finding < lines.index(host_lines[0])


def test_verbose_adds_each_hosts_facts_after_the_findings(capsys):
    code, lines = doctor_lines(capsys, "--verbose", *roots("ib_hdr_port_down"))
    assert code == 1 and lines[0].startswith("PROBLEM [port-state] mlx5_1:1")
    table = next(i for i, line in enumerate(lines) if line.startswith("RDMA port "))
    assert table > max(i for i, line in enumerate(lines) if line.startswith(("PROBLEM", "note")))
    assert any(line.startswith("mlx5_1:1") and "DOWN" in line for line in lines[table:])
    assert "ibv_devinfo: not recorded" in lines or any(line.startswith("ibv_devinfo:") for line in lines)
    assert "--verbose)" not in lines[-1]


def test_a_clean_host_says_no_problem_found(capsys):
    code, lines = doctor_lines(capsys, *roots("roce_v2_gids"))
    assert code == 0
    assert lines[0].startswith("roce_v2_gids  recorded ")  # no finding: the host line is first
    assert lines[1] == "doctor: healthy (1 host(s) checked): no problem found"
