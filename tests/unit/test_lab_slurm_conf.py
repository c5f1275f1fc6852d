"""The lab's slurm.conf (render_conf) and `lab slurm up --health-check`'s refusals: no root, no Slurm."""

import pytest

from commbench.cli.app import main
from commbench.core.errors import BadInput
from commbench.lab import slurm as labslurm
from commbench.lab.state import LabNode, LabState

HW = {"CPUs": 2, "Sockets": 1, "CoresPerSocket": 2, "ThreadsPerCore": 1}


def _state() -> LabState:
    nodes = [LabNode(f"cbnode{i}", f"10.0.0.{i}", f"cbveth{i}", 1500, "1gbit") for i in (1, 2)]
    return LabState(subnet="10.0.0.0/24", bridge="cbbr0", nodes=nodes)


def _conf_lines(**kw) -> list[str]:
    return labslurm.render_conf(_state(), HW, **kw).splitlines()


def test_health_check_is_rendered_with_its_interval_for_nodes_in_any_state():
    lines = _conf_lines(health_check="/opt/hc.sh", health_check_interval=60)
    assert [line for line in lines if line.startswith("HealthCheck")] == [
        "HealthCheckProgram=/opt/hc.sh", "HealthCheckInterval=60", "HealthCheckNodeState=ANY"]
    first_node = next(i for i, line in enumerate(lines) if line.startswith("NodeName="))
    assert lines.index("HealthCheckProgram=/opt/hc.sh") < first_node  # a global setting, before the nodes


def test_no_health_check_unless_asked():
    assert not [line for line in _conf_lines() if line.startswith("HealthCheck")]


def test_health_check_program_must_be_an_executable_file(tmp_path):
    script = tmp_path / "hc.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    for bad in (str(script), str(tmp_path / "absent.sh"), f"{script} --arg"):
        with pytest.raises(BadInput, match="is not an executable file: give a script"):
            labslurm.check_program(bad)
    script.chmod(0o755)
    assert labslurm.check_program(str(script)) == str(script.resolve())


def test_health_check_interval_below_one_second_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["lab", "slurm", "up", "--health-check", "/bin/true", "--health-check-interval", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--health-check-interval" in err[0] and "1..86400" in err[0], err
