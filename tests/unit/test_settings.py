"""The settings axes (core/settings.py) and their refusals on the command line: `--env NAME=v1|v2`
on sweep, buckets and zero, `--mtu` as one axis of the same kind."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from commbench.core import settings
from commbench.core.errors import BadInput
from commbench.harness import settingpasses as passes
from commbench.harness.settingpasses import axis_interfaces, run_each


def test_axes_multiply_first_axis_slowest_and_label_in_axis_order():
    axes = settings.parse_env(["NCCL_ALGO=Ring|Tree", "NCCL_PROTO=LL|Simple"])
    combos = settings.combinations(axes)
    assert [s.label for s in combos] == ["NCCL_ALGO=Ring NCCL_PROTO=LL", "NCCL_ALGO=Ring NCCL_PROTO=Simple",
                                         "NCCL_ALGO=Tree NCCL_PROTO=LL", "NCCL_ALGO=Tree NCCL_PROTO=Simple"]
    assert combos[1].env == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"} and combos[1].mtu is None


def test_mtu_is_one_axis_of_the_same_kind():
    axes = settings.parse_env(["GLOO_SOCKET_IFNAME=eth0|eth1"]) + settings.mtu_axis([1500, 9000])
    combos = settings.combinations(axes)
    assert [s.label for s in combos][:2] == ["GLOO_SOCKET_IFNAME=eth0 MTU=1500", "GLOO_SOCKET_IFNAME=eth0 MTU=9000"]
    assert combos[1].mtu == 9000 and combos[1].env == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert settings.from_plan(settings.as_plan(axes)) == axes  # a plan stores them as JSON lists
    assert settings.combinations([]) == []


def test_a_comma_list_is_one_value():
    (axis,) = settings.parse_env(["GLOO_SOCKET_IFNAME=eth0,eth1|eth0"])
    assert axis.values == ("eth0,eth1", "eth0")


def test_the_interfaces_an_axis_sends_over_are_read_for_the_wire():
    class Plan:
        axes = settings.as_plan(settings.parse_env(["GLOO_SOCKET_IFNAME=eth0,eth1|eth2", "NCCL_ALGO=Ring"]))
    assert axis_interfaces(Plan()) == ["eth0", "eth1", "eth2"]


class FakeGroups:
    """torch.distributed's group calls, counted: run_each's passes need no process group here."""

    def __init__(self, monkeypatch) -> None:
        self.made = self.destroyed = 0
        monkeypatch.setattr(passes.dist, "new_group", self.new_group)
        monkeypatch.setattr(passes.dist, "destroy_process_group", self.destroy)
        monkeypatch.setattr(passes.dist, "barrier", lambda *a, **k: None)

    def new_group(self, ranks, timeout=None):
        self.made += 1
        return f"group {self.made}"

    def destroy(self, group=None) -> None:
        self.destroyed += 1


def fake_session(specs: list[str], repetitions: int, mtus: list[int] | None = None):
    axes = settings.parse_env(specs) + settings.mtu_axis(mtus or [])
    plan = SimpleNamespace(axes=settings.as_plan(axes), repetitions=repetitions, timeout=30.0, iface="eth9")
    lines: list[str] = []
    return SimpleNamespace(ctx=SimpleNamespace(plan=plan, env=SimpleNamespace(local_rank=0)), world=2, group=None,
                           setting=None, reporter=SimpleNamespace(line=lines.append), lines=lines,
                           sum_over_ranks=lambda value: value)


def passes_of(session) -> tuple[list[tuple], bool]:
    """run_each's calls as (repetitions, setting label, GLOO_LOG_LEVEL, group) and its result."""
    calls: list[tuple] = []

    def run(s, repetitions: range) -> bool:
        calls.append((list(repetitions), s.setting.label if s.setting else None, os.environ.get("GLOO_LOG_LEVEL"),
                      s.group))
        return len(calls) == 3  # one pass found a wrong output: the run's answer must say so

    return calls, run_each(session, run)


def test_settings_alternate_within_each_repetition_each_pass_on_a_fresh_group(monkeypatch):
    monkeypatch.delenv("GLOO_LOG_LEVEL", raising=False)
    groups = FakeGroups(monkeypatch)
    session = fake_session(["GLOO_LOG_LEVEL=ERROR|WARNING"], repetitions=2)
    calls, wrong = passes_of(session)
    a, b = "GLOO_LOG_LEVEL=ERROR", "GLOO_LOG_LEVEL=WARNING"
    assert calls == [([0], a, "ERROR", "group 1"), ([0], b, "WARNING", "group 2"),
                     ([1], b, "WARNING", "group 3"), ([1], a, "ERROR", "group 4")]
    assert wrong is True and groups.made == groups.destroyed == 4
    assert session.lines == [f"# Settings: {a}  (repetition 1/2)", f"# Settings: {b}  (repetition 1/2)",
                             f"# Settings: {b}  (repetition 2/2)", f"# Settings: {a}  (repetition 2/2)"]
    assert "GLOO_LOG_LEVEL" not in os.environ and session.group is None and session.setting is None


def test_without_axes_the_workload_runs_every_repetition_itself_as_before(monkeypatch):
    groups = FakeGroups(monkeypatch)
    session = fake_session([], repetitions=3)
    calls, wrong = passes_of(session)
    assert calls == [([0, 1, 2], None, os.environ.get("GLOO_LOG_LEVEL"), None)] and wrong is False
    assert groups.made == 0 and session.lines == []


def test_one_repetition_says_no_repetition_and_an_mtu_axis_is_set_each_pass_and_put_back(monkeypatch):
    FakeGroups(monkeypatch)
    mtu = {"eth9": 1500}
    monkeypatch.setattr(passes.netctl, "get_mtu", lambda iface: mtu[iface])
    monkeypatch.setattr(passes.netctl, "set_mtu", lambda iface, value: mtu.__setitem__(iface, value))
    seen: list[int] = []
    changes: list[int] = []
    monkeypatch.setattr(passes.netctl, "set_mtu", lambda iface, value: (mtu[iface] != value and changes.append(value),
                                                                        mtu.__setitem__(iface, value)))
    session = fake_session([], repetitions=3, mtus=[9000, 4000])
    run_each(session, lambda s, repetitions: seen.append(mtu["eth9"]) or False)
    assert seen == [9000, 4000, 4000, 9000, 9000, 4000] and mtu["eth9"] == 1500
    assert changes == [9000, 4000, 9000, 4000, 1500]  # R + 1 changes, then back: not one a pass
    assert session.lines[:2] == ["# MTU 9000 on eth9 of every host", "# Settings: MTU=9000  (repetition 1/3)"]
    once = fake_session(["GLOO_LOG_LEVEL=ERROR|WARNING"], repetitions=1)
    run_each(once, lambda s, repetitions: False)
    assert once.lines == ["# Settings: GLOO_LOG_LEVEL=ERROR", "# Settings: GLOO_LOG_LEVEL=WARNING"]


@pytest.mark.parametrize("specs, says", [
    (["NOEQUALS"], "--env 'NOEQUALS' has no '=': write NAME=value1|value2"),
    (["NCCL_ALGO="], "--env NCCL_ALGO= has an empty value"),
    (["NCCL_ALGO=Ring|"], "--env NCCL_ALGO= has an empty value"),
    (["NCCL_ALGO=Ring", "NCCL_ALGO=Tree"], "--env NCCL_ALGO is given twice: give each name once, its values "
                                           "joined by |, e.g. --env NCCL_ALGO=Ring|Tree"),
    (["NCCL_ALGO=Ring|Ring"], "value 'Ring' is given twice"),
    (["1BAD=x"], "is not an environment variable name"),
    (["MASTER_PORT=1|2"], "the launcher or commbench sets MASTER_PORT"),
    (["RANK=0"], "the launcher or commbench sets RANK"),
    (["MTU=1500|9000"], "use --mtu 1500,9000"),
    (["X=a b"], "must be printable ASCII without spaces"),
])
@pytest.mark.failure(
    row="env-noequals-env-nccl-algo",
    section="Bad input",
    failure="`--env NOEQUALS`, `--env NCCL_ALGO=` (empty), the same name or value twice, `--env RANK=...` (a "
            "launcher's), `--env NCCL_IB_HCA=a|b` under NCCL (read once per process), an NCCL axis under gloo, "
            "`--iface` with a *_SOCKET_IFNAME axis, a GLOO_SOCKET_IFNAME naming no interface here, `zero --engine "
            "deepspeed --env`",
    does="one line naming the problem and the fix, exit 2, before any rank starts, no results file",
)
def test_bad_axes_are_one_line(specs, says):
    with pytest.raises(BadInput) as exc:
        settings.parse_env(specs)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_too_many_settings_are_refused_before_any_grid():
    axes = settings.parse_env(["A=" + "|".join(map(str, range(16))), "B=" + "|".join(map(str, range(5)))])
    with pytest.raises(BadInput, match="make 80 settings, each a whole grid; the most is 64"):
        settings.combinations(axes)
    with pytest.raises(BadInput, match="has 17 values; the most is 16"):
        settings.parse_env(["A=" + "|".join(map(str, range(17)))])


@pytest.mark.failure(row="env-noequals-env-nccl-algo")
def test_the_backend_must_see_the_setting_change():
    with pytest.raises(BadInput, match="NCCL reads it once per process, so one run measures only its first value"):
        settings.check_backend(settings.parse_env(["NCCL_IB_HCA=mlx5_0|mlx5_1"]), "nccl")
    with pytest.raises(BadInput, match="does nothing with --backend gloo"):
        settings.check_backend(settings.parse_env(["NCCL_ALGO=Ring|Tree"]), "gloo")
    settings.check_backend(settings.parse_env(["NCCL_ALGO=Ring|Tree", "NCCL_PROTO=LL"]), "nccl")
    settings.check_backend(settings.parse_env(["GLOO_SOCKET_IFNAME=lo"]), "gloo")
