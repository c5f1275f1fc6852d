"""Replay views (issue #42 part 4, docs/REPLAY.md "Reading a replay"): the one aggregation of replay
rows (analysis/replay/replayrows.py), compare's block per replayed step, the report's Replay section.

The rows are made to the replay row contract (step rows: collective replay_step, trace_op NULL;
op rows: the op's collective and trace_op), on top of synthetic.make_rows' run columns."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from commbench.analysis.compare import compare as cmp
from commbench.analysis.compare import comparetext
from commbench.analysis.replay import replayrows, replayview
from unit import synthetic
from unit.synthetic import make_rows

# Step 0 of a ZeRO-2 job (standing for steps 0-3): 4 all_reduce and an all_gather, each op's time in us.
FAST = [("all_reduce", 33_472, 7_500.0), ("all_reduce", 33_472, 7_500.0), ("all_reduce", 33_472, 7_500.0),
        ("all_reduce", 33_472, 7_500.0), ("all_gather", 16_384, 11_200.0)]
SLOW = [("all_reduce", 33_472, 76_750.0), ("all_reduce", 33_472, 76_750.0), ("all_reduce", 33_472, 76_750.0),
        ("all_reduce", 33_472, 76_750.0), ("all_gather", 16_384, 49_200.0)]


def replay_rows(steps: dict[int, list[tuple[str, int, float]]], repetitions: int = 7,
                run_id: str = "20250101-000000-abcdef", spans: dict[int, str] | None = None,
                recorded: float | None = 0.5, setting: str | None = None) -> list[dict]:
    """A replay run's rows: per step, a step row (the ops' times summed: issued one after another)
    and an op row per op, each repetition wobbling by 0.2% either way; recorded: the recorded times as a
    fraction of the replayed (None: the trace held no times)."""
    base = make_rows(collectives=("all_reduce",), sizes=(8,), placements=(True,), repetitions=1, run_id=run_id)[0]
    rows = []
    for rep in range(repetitions):
        wobble = 1 + 0.002 * (rep % 3 - 1)  # the median repetition has none
        for step, ops in steps.items():
            common = dict(workload="replay", repetition=rep, trace_step=step, trace_file="job.trace",
                          trace_steps=(spans or {}).get(step, str(step)), settings=setting, world_size=2, nnodes=2,
                          ranks_per_node=1, in_place=False, op=None)
            total = sum(t for _, _, t in ops) * wobble
            size = sum(s for _, s, _ in ops)
            counts: dict[str, dict[str, int]] = {}
            for name, s, _ in ops:
                counts.setdefault(name, {"count": 0, "bytes": 0})
                counts[name]["count"] += 1
                counts[name]["bytes"] += s
            rows.append(_row(base, common, "replay_step", size, total, recorded, trace_op=None,
                             n_collectives=len(ops), ops=json.dumps(counts)))
            for i, (name, s, t) in enumerate(ops):
                rows.append(_row(base, common, name, s, t * wobble, recorded, trace_op=i, trace_group="0",
                                 op="sum" if name == "all_reduce" else None))
    return rows


def _row(base: dict, common: dict, collective: str, size: int, t_us: float, recorded: float | None,
         **extra) -> dict:
    algbw = size / (t_us * 1e-6) / 1e9
    return {**base, **common, "collective": collective, "size_bytes": size, "time_us": t_us,
            "time_us_min": t_us * 0.98, "time_us_max": t_us * 1.05, "time_us_p99": t_us * 1.04,
            "algbw_GBps": algbw, "busbw_GBps": algbw, "samples_us": [t_us * 0.99, t_us, t_us * 1.01],
            "recorded_us": None if recorded is None else t_us * recorded, "wrong": None, **extra}


def fast_and_slow(**kwargs):
    before = pd.DataFrame(replay_rows({0: FAST}, spans={0: "0-3"}, **kwargs))
    after = pd.DataFrame(replay_rows({0: SLOW}, spans={0: "0-3"}, run_id="20250102-000000-abcdef", **kwargs))
    return before, after


# ---- the aggregation ----


def test_a_steps_time_by_collective_is_the_sum_of_its_ops_medians_with_calls_bytes_and_recorded():
    (step,) = replayrows.steps(pd.DataFrame(replay_rows({0: FAST}, spans={0: "0-3"})))
    assert step.title() == "step 0 (steps 0-3)"
    assert step.time_us == pytest.approx(41_200)
    assert step.ratio == pytest.approx(2.0)  # recorded at half the replayed time
    ar, ag = step.parts
    assert (ar.collective, ar.calls, ar.size_bytes) == ("all_reduce", 4, 4 * 33_472)
    assert ar.time_us == pytest.approx(4 * 7_500) and ar.recorded_us == pytest.approx(ar.time_us / 2)
    assert (ag.collective, ag.calls) == ("all_gather", 1)
    assert [o.trace_op for o in step.largest(2)] == [4, 0]  # the all_gather is the largest op, then issue order


def test_steps_come_in_step_order_with_the_ops_outside_any_step_last_and_no_recorded_time_stays_unknown():
    df = pd.DataFrame(replay_rows({-1: FAST[:1], 2: FAST[4:], 1: FAST[:2]}, recorded=None, repetitions=2))
    got = replayrows.steps(df)
    assert [s.trace_step for s in got] == [1, 2, -1]
    assert got[-1].title() == "ops outside any step" and got[0].title() == "step 1"
    assert got[0].recorded_us is None and got[0].ratio is None and got[0].parts[0].recorded_us is None


def test_rows_without_a_replay_have_no_steps():
    assert replayrows.steps(pd.DataFrame(make_rows(repetitions=1))) == []


def test_causes_share_the_collectives_summed_change_and_name_one_that_moved_the_other_way():
    before = replayrows.parts_of([replayrows.Op(0, "all_reduce", 8, None, None, 100.0, None),
                              replayrows.Op(1, "broadcast", 8, None, None, 50.0, None)])
    after = replayrows.parts_of([replayrows.Op(0, "all_reduce", 8, None, None, 400.0, None),
                             replayrows.Op(1, "broadcast", 8, None, None, 30.0, None)])
    got = replayrows.causes(before, after)
    assert [(c.collective, round(c.share, 3), c.change_us) for c in got] == [
        ("all_reduce", round(300 / 280, 3), 300.0), ("broadcast", round(-20 / 280, 3), -20.0)]
    assert replayrows.causes(before, before) == []


# ---- compare ----


def test_compare_of_two_replays_says_regression_for_the_step_and_names_the_collectives_behind_it():
    c = cmp.compare_frames(*fast_and_slow())
    assert c.verdict == "regression" and c.exit_code() == 1
    (change,) = c.parts["replay"]
    assert change.verdict == "regression"
    assert ("replay step 0 (steps 0-3): 41.2 ms -> 356 ms, regression; all_reduce 88% of the change "
            "(+277 ms, 4 calls), all_gather 12% (+38.0 ms, 1 call)\n") in comparetext.render_table(c, wide=True)
    text = comparetext.render_table(c)  # 120 columns: the line wraps, indented
    assert "\nreplay step 0 (steps 0-3): 41.2 ms -> 356 ms, regression; all_reduce 88% of the change" in text
    assert "\n    12% (+38.0 ms, 1 call)\n" in text
    assert text.index("replay step 0") < text.index("verdict: regression")  # the block before the verdict
    assert "- replay step 0 (steps 0-3): 41.2 ms -> 356 ms, regression" in comparetext.render_markdown(c)
    got = c.to_dict()["replay"][0]
    assert got["causes"][0]["collective"] == "all_reduce" and got["verdict"] == "regression"


def test_compare_of_a_replay_with_itself_is_unchanged_and_names_no_collective():
    before, _ = fast_and_slow()
    c = cmp.compare_frames(before, before.assign(run_id="20250102-000000-abcdef"))
    (change,) = c.parts["replay"]
    assert change.verdict == "unchanged" and change.causes == []
    assert "replay step 0 (steps 0-3): 41.2 ms -> 41.2 ms, unchanged\n" in comparetext.render_table(c)


def test_compare_of_plain_sweeps_has_no_replay_block():
    c = cmp.compare_frames(pd.DataFrame(make_rows(repetitions=3)),
                           pd.DataFrame(make_rows(repetitions=3, run_id="20250102-000000-abcdef")))
    assert c.parts["replay"] == [] and "replay" not in comparetext.render_table(c)
    assert "Replayed" not in comparetext.render_markdown(c)


def test_compare_of_two_replay_files_from_the_command_line_exits_1_with_the_step_line(tmp_path, cli):
    b = synthetic.write(tmp_path / "fast.parquet", replay_rows({0: FAST}, spans={0: "0-3"}))
    a = synthetic.write(tmp_path / "slow.parquet", replay_rows({0: SLOW}, spans={0: "0-3"},
                                                              run_id="20250102-000000-abcdef"))
    got = cli("compare", str(b), str(a))
    assert got.returncode == 1, got.stderr
    assert "replay step 0 (steps 0-3): 41.2 ms -> 356 ms, regression; all_reduce 88% of the change" in got.stdout


def test_a_hostile_collective_name_in_a_replay_is_inert_in_compare_and_the_report():
    from commbench.analysis.report import report

    evil = "all_reduce\x1b[31m<b>|"
    before, after = (pd.DataFrame(replay_rows({0: [(evil, 64, t)]}, run_id=r))
                     for t, r in ((100.0, "20250101-000000-abcdef"), (900.0, "20250102-000000-abcdef")))
    text = comparetext.render_table(cmp.compare_frames(before, after))
    assert "\x1b" not in text and "all_reduce\\x1b[31m<b>|" in text
    page = report.build_html(after)
    assert "\x1b" not in page and "<b>|" not in page and "all_reduce\\x1b[31m&lt;b&gt;|" in page
    md = replayview.section_markdown(after, _md_table(), _md())
    assert not any("<b>" in line or "\x1b" in line for line in md)


def _md_table():
    from commbench.analysis.points.mdtext import md_table

    return md_table


def _md():
    from commbench.analysis.points.mdtext import md

    return md


# ---- the report ----


def test_the_report_of_a_replay_has_a_replay_section_with_collectives_largest_ops_and_ratio():
    from commbench.analysis.report import report

    df = pd.DataFrame(replay_rows({0: FAST, 1: SLOW}, spans={0: "0-3"}, repetitions=3))
    page = report.build_html(df)
    assert '<a href="#replay">Replay</a>' in page and '<section id="replay"><h2>Replay</h2>' in page
    section = page[page.index('<section id="replay">'):]
    section = section[:section.index("</section>")]
    assert "<h3>step 0 (steps 0-3)</h3>" in section and "<h3>step 1: its ops, largest first</h3>" in section
    assert "5 ops; replayed 41.2 ms, recorded 20.6 ms, replay/recorded 2.00" in section
    assert '<td>all_reduce</td><td class="num">4</td><td class="num">130.8 KiB</td>' in section


def test_the_markdown_report_of_a_replay_has_the_same_tables_and_a_plain_run_has_none(undrawn):
    from commbench.analysis.report import markdown, report

    df = pd.DataFrame(replay_rows({0: FAST}, repetitions=2))
    text = markdown.build_markdown(df, None)
    assert "## Replay" in text and "### step 0: its ops, largest first" in text
    assert "| all_reduce | 4 | 130.8 KiB |" in text
    plain = pd.DataFrame(make_rows(repetitions=1))
    assert "## Replay" not in markdown.build_markdown(plain, None) and 'id="replay"' not in report.build_html(plain)


def test_durations_keep_three_digits_in_the_unit_that_keeps_them_short():
    assert [replayview.duration(x) for x in (812.0, 41_234.0, 356_000.0, 1_250_000.0, None)] == [
        "812 us", "41.2 ms", "356 ms", "1.25 s", "-"]
    assert replayview.signed(-38_100.0) == "-38.1 ms"


def test_a_step_of_many_ops_lists_its_five_largest_and_many_steps_are_bounded():
    ops = [("all_reduce", 1024, float(t)) for t in (10, 70, 20, 60, 30, 50, 40)]
    parts = replayview.section_parts(pd.DataFrame(replay_rows({0: ops}, repetitions=1)))
    title, _, _, rows, _ = parts[2]
    assert title == "step 0: the 5 largest of its 7 ops"
    assert [r[0] for r in rows] == ["1", "3", "5", "6", "4"]  # trace_op, largest time first
    many = pd.DataFrame(replay_rows({s: ops[:1] for s in range(replayview.MAX_STEPS + 3)}, repetitions=1))
    parts = replayview.section_parts(many)
    assert len(parts[0][3]) == replayview.MAX_STEPS + 3  # every step in the overview
    assert parts[-1][1] == "3 more steps: in the Steps table above"
    assert len(parts) == 1 + 2 * replayview.MAX_STEPS + 1


def test_the_reports_comparison_with_a_replay_baseline_lists_the_replayed_steps(undrawn):
    from commbench.analysis.report import report

    before, after = fast_and_slow()
    page = report.build_html(after, baseline_df=before, comparison=cmp.compare_frames(before, after))
    section = page[page.index('<section id="comparison">'):]
    section = section[:section.index("</section>")]
    assert ('<h3>Replayed steps</h3><ul class="replay"><li>replay step 0 (steps 0-3): 41.2 ms -&gt; 356 ms, '
            "regression; all_reduce 88% of the change (+277 ms, 4 calls), all_gather 12% (+38.0 ms, 1 call)</li></ul>"
            ) in section


def test_a_step_that_moved_against_its_collectives_sums_says_so():
    cause = replayrows.Cause("all_reduce", 1.0, 818.0, 4)
    change = replayrows.StepChange(0, "step 0 (steps 0,1)", "", 4_500.0, 4_390.0, "inconclusive", [cause])
    assert replayview.change_text(change) == (
        "replay step 0 (steps 0,1): 4.50 ms -> 4.39 ms, inconclusive; the collectives' summed time moved the other "
        "way (+818 us): all_reduce 100% (+818 us, 4 calls)")


def test_plot_draws_replayed_steps_apart_from_size_curves(tmp_path):
    """A replay's rows have no size curve: `plot` draws them as bars per step, and a sweep beside
    them keeps its curves (two files)."""
    from commbench.analysis.replay.replayplot import build_figure
    from commbench.analysis.report import plot as plotting

    frame = pd.concat(fast_and_slow(), ignore_index=True)
    views = plotting.split_views(frame)
    assert views.curves is None and views.replay is not None and len(views.replay) == len(frame)
    fig = build_figure(views.replay)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(label.endswith(": replayed") for label in labels)
    assert any(label.endswith(": recorded") for label in labels)
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} == {"all_reduce", "all_gather"}
    assert len(labels) == 4  # two runs' step 0, replayed and recorded each
    mixed = plotting.split_views(pd.concat([frame, pd.DataFrame(make_rows(repetitions=1))], ignore_index=True))
    assert mixed.curves is not None and (mixed.curves.workload != "replay").all() and len(mixed.replay) == len(frame)


def test_export_writes_each_replayed_step_and_collective_of_the_latest_run():
    """A replay run every night exported for Prometheus: the latest run's step time, its recorded
    time and each collective's part, per trace and step."""
    from commbench.analysis.export import metrics

    before, after = fast_and_slow()
    after = after.assign(started_at=after["started_at"] + pd.Timedelta(days=1))
    text = metrics.collect(pd.concat([before, after], ignore_index=True)).text().decode()
    step = replayrows.steps(after)[0]
    labels = 'setting="",step="0",trace="job.trace"'
    assert f"commbench_replay_step_seconds{{{labels}}} {step.time_us / 1e6}" in text
    assert f"commbench_replay_step_recorded_seconds{{{labels}}} {step.recorded_us / 1e6}" in text
    for part in step.parts:
        assert (f'commbench_replay_collective_seconds{{collective="{part.collective}",{labels}}} '
                f"{part.time_us / 1e6}") in text
