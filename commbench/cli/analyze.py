"""The analysis commands (compare, gate, plot, report): they read results files and never start
ranks or import torch."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from commbench.cli.options import Text, fraction
from commbench.cli.tables import wide_option
from commbench.core import outputs, streams
from commbench.core.errors import BadInput
from commbench.core.outtext import LINE_LIMIT, SUMMARY_LIMIT, terminal


MIN_ALPHA = 1e-9  # a one-sided Mann-Whitney test needs 17 repetitions a side for 1e-9 (m = 1)

@click.command()
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option("--threshold", default="3%", show_default=True,
              help="Minimum effect for bandwidth-bound points (5% or 0.05).")
@click.option("--latency-threshold", default="10%", show_default=True,
              help="Minimum effect for the other (latency-bound) points.")
@click.option("--alpha", default="0.05", show_default=True, help="Significance level, Holm-corrected over points.")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True)
@click.option("--allow-within-run", is_flag=True,
              help="Let per-iteration samples decide points with too few repetitions (they are not independent).")
@click.option("--out", default=None, help="Write the report to this file instead of stdout.")
@click.option("--plot", "plot_path", default=None, help="Also draw the comparison into this image file.")
@click.option("--force", is_flag=True, help="Replace an existing --out or --plot file (never one of the inputs).")
@click.option("--before-setting", type=Text(), default=None, metavar="SETTING",
              help="Compare only the before rows of this setting (e.g. 'GLOO_SOCKET_IFNAME=eth0'), paired "
                   "with --after-setting's: two settings of one run side by side.")
@click.option("--after-setting", type=Text(), default=None, metavar="SETTING",
              help="Compare only the after rows of this setting.")
@wide_option
def compare(before, after, threshold, latency_threshold, alpha, fmt, allow_within_run, out, plot_path, force,
            before_setting, after_setting, wide) -> int:
    """Compare two sets of results (files or folders): a verdict per point and overall.

    Exit 0: no regression; 1: a regression; 3: inconclusive or nothing comparable. See docs/COMPARE.md.
    """
    from commbench.analysis.compare import compare as comparing
    from commbench.analysis.compare import comparetext
    from commbench.core import results

    thr = fraction(threshold, "--threshold")
    lat = fraction(latency_threshold, "--latency-threshold")
    a = fraction(alpha, "--alpha", low_open=True)
    if a < MIN_ALPHA:
        raise BadInput(f"--alpha {alpha} is below {MIN_ALPHA:g}: no run has the repetitions such a level needs; "
                       "use e.g. --alpha 0.05 or 0.01")
    inputs = [before, after]
    if out is not None and (os.path.isdir(out) or out.lower().endswith(".parquet")):
        raise BadInput(f"--out {out} is a folder or a results file: pass a report file name, e.g. compare.md")
    if out is not None:
        outputs.check_new(out, "compare", "--out", inputs, force)  # before anything is read
    # Read only what the comparison (and its figure) use: per-rank lists and plan stay on disk.
    read: dict = {"columns": comparing.READ_COLUMNS}
    if plot_path is not None:
        try:
            from commbench.analysis.report import plot as plotting
        except ImportError:
            raise BadInput("--plot needs commbench.analysis.report.plot") from None
        plotting.check_figure(plot_path, "compare", "--plot", inputs, force)
        if out is not None and os.path.abspath(out) == os.path.abspath(plot_path):
            raise BadInput(f"--out and --plot both name {out}: pass two different file names")
        read = {"skip": [c for c in plotting.UNUSED_COLUMNS if c not in comparing.READ_COLUMNS]}
    comparison = None
    if plot_path is None and before_setting is None and after_setting is None:
        comparison = comparing.compare_paths([before], [after], threshold=thr, latency_threshold=lat, alpha=a,
                                             allow_within_run=allow_within_run)
    files = []
    if comparison is None:
        before_df = results.read_results([before], **read)
        after_df = results.read_results([after], **read)
        before_df, after_df, chosen = _chosen_settings(before_df, after_df, before_setting, after_setting)
        comparison = comparing.compare_frames(before_df, after_df, threshold=thr, latency_threshold=lat, alpha=a,
                                              allow_within_run=allow_within_run)
        if chosen:
            comparison.differences.insert(0, chosen)
        files = [] if plot_path is None else [plotting.comparison_output(before_df, after_df, plot_path)]
    _warn_same_file(comparison, before, after)
    for line in comparison.warnings:
        print(f"commbench: warning: {terminal(line, LINE_LIMIT)}", file=sys.stderr)
    text = _render(fmt, comparison, comparetext.render_markdown, lambda c: comparetext.render_table(c, wide=wide))
    if out is not None:
        files.append(outputs.Output(Path(out), text.encode("utf-8"), "--out"))
    outputs.write_files(files, "compare", inputs, force)  # the report and its figure: both or neither
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        if streams.reader_gone():  # `| true`: the verdict stays visible in a CI log
            print(f"commbench: compare: verdict: {comparison.verdict} (exit {comparison.exit_code()}); stdout "
                  "was closed before the report was read", file=sys.stderr)
    else:
        print(f"{comparison.verdict}: report written to {out}")
    return comparison.exit_code()


def _chosen_settings(before_df, after_df, before_setting, after_setting):
    """Each side narrowed to its chosen setting; the line that says which were paired."""
    if before_setting is None and after_setting is None:
        return before_df, after_df, None
    from commbench.analysis.points import settingsview

    if before_setting is not None:
        before_df = settingsview.select(before_df, before_setting, "before", "--before-setting")
    if after_setting is not None:
        after_df = settingsview.select(after_df, after_setting, "after", "--after-setting")
    return before_df, after_df, f"settings: before {before_setting or '(all)'}, after {after_setting or '(all)'}"


def _warn_same_file(comparison, before: str, after: str) -> None:
    """Both sides one file: say so first, unless a same-run warning already does."""
    from commbench.analysis.points import runsdiffer

    same_file = os.path.realpath(before) == os.path.realpath(after)
    if same_file and not any(w.startswith(runsdiffer.SAME_RUN) for w in comparison.warnings):
        warning = runsdiffer.same_run_warning(set(), set(), before)  # a file given: always a warning
        if warning is not None:
            comparison.warnings.insert(0, warning)


def _render(fmt: str, result, markdown, table) -> str:
    """A verdict object (compare's, gate's) as json (its to_dict), markdown or a table."""
    if fmt == "json":
        import json

        return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"
    return markdown(result) if fmt == "markdown" else table(result)


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--expect", "expect", default=None, metavar="FILE.yaml", help="Reference bands to judge RESULTS against.")
@click.option("--suggest", is_flag=True, help="Write starting bands from RESULTS (a good run) instead of judging.")
@click.option("--lower", default=None, help="With --suggest: the narrowest band (3% or 0.03) [default: 3%; each band "
              "covers how much its point's median varies across runs or repetitions].")
@click.option("--max-band", default=None, help="With --suggest: leave out points whose band would be wider than "
              "this, with a warning naming them and the fix [default: 15%].")
@click.option("--allow-wide", is_flag=True, help="With --suggest: write bands wider than --max-band anyway.")
@click.option("--upper", default=None, help="With --suggest: upper tolerance (10% or 0.1) [default: none].")
@click.option("--min-size", default=None, help="With --suggest: smallest size to band [default: 1M].")
@click.option("--system", type=Text(200), default=None,
              help="With --suggest: the system's name in the file [default: the hosts].")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True)
@click.option("--out", default=None, help="Write the report (or, with --suggest, the bands) to this file.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (never RESULTS or the --expect file).")
@click.option("--allow-empty", is_flag=True, help="Pass a gate that judged no entry (every entry optional and "
              "unmatched); without it such a gate fails, as a CI gate that checked nothing.")
def gate(results, expect, suggest, lower, upper, max_band, allow_wide, min_size, system, fmt, out, force,
         allow_empty) -> int:
    """Judge RESULTS against reference bands (--expect FILE.yaml), or suggest bands (--suggest).

    Exit 0: every entry within its band; 1: an entry missed (named in the summary), or no entry
    judged (unless --allow-empty); 2: bad input.
    See docs/GATE.md.
    """
    from commbench.analysis.gate import gate as gating
    from commbench.analysis.gate.bands import load_bands
    from commbench.analysis.gate import bandsuggest
    from commbench.analysis.gate import gateview
    from commbench.analysis.gate import tolerance
    from commbench.core import results as store
    from commbench.core.units import parse_size

    if suggest == (expect is not None):
        raise BadInput("gate needs exactly one of --expect FILE.yaml (judge a run) and --suggest (write bands)")
    if out is not None and (os.path.isdir(out) or out.lower().endswith(".parquet")):
        raise BadInput(f"--out {out} is a folder or a results file: pass a file name, e.g. bands.yaml")
    inputs, who = [*results, expect], "gate --suggest" if suggest else "gate"
    if suggest:
        if fmt != "table":
            raise BadInput("--format is for judging; --suggest always writes YAML: remove --format")
        if allow_empty:
            raise BadInput("--allow-empty is for judging (--expect); --suggest writes bands: remove --allow-empty")
        low = tolerance.DEFAULT_FLOOR if lower is None else fraction(lower, "--lower")
        widest = tolerance.DEFAULT_MAX_BAND if max_band is None else fraction(max_band, "--max-band")
        up = None if upper is None else fraction(upper, "--upper")
        if out is not None:  # before reading anything: never overwrite
            outputs.check_new(out, who, "--out", inputs, force)
        smallest = bandsuggest.DEFAULT_MIN_SIZE if min_size is None else parse_size(min_size, "--min-size")
        made = bandsuggest.suggest(store.read_results(list(results)), sources=results, lower=low, upper=up,
                              min_size=smallest, system=system, max_band=widest, allow_wide=allow_wide)
        for note in made.notes:
            print(f"commbench: note: {terminal(note, LINE_LIMIT)}", file=sys.stderr)
        for warning in made.warnings:  # points left out as too wide: the bands of the others are written
            print(f"commbench: warning: {terminal(warning, LINE_LIMIT)}", file=sys.stderr)
        if out is None:
            sys.stdout.write(made.text)
        else:
            outputs.write_file(out, made.text.encode("utf-8"), who, "--out", inputs, force)
            print(f"{made.entries} bands written to {out}")
        return 0
    stray = [flag for flag, v in (("--lower", lower), ("--upper", upper), ("--min-size", min_size),
                                  ("--system", system), ("--max-band", max_band), ("--allow-wide", allow_wide or None))
             if v is not None]
    if stray:
        raise BadInput(f"{stray[0]} is for --suggest; tolerances of --expect live in the bands file")
    if out is not None:  # the bands file or a result is never the report's target
        outputs.check_new(out, who, "--out", inputs, force)
    bands = load_bands(expect)
    report = gating.gate_paths(bands, list(results))
    report.allow_empty = allow_empty
    text = _render(fmt, report, gateview.render_markdown, gateview.render_table)
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        outputs.write_file(out, text.encode("utf-8"), who, "--out", inputs, force)
    if out is not None or fmt != "table" or streams.reader_gone():
        print(terminal(report.summary(), SUMMARY_LIMIT), file=sys.stderr)  # the verdict stays visible in a CI log
    return report.exit_code()


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--metric", type=click.Choice(["busbw", "algbw", "time"]), default="busbw", show_default=True,
              help="What the top panel shows against message size.")
@click.option("--out", default=None,
              help="Image file (.png or .svg) [default: next to the first result, as <name>.png].")
@click.option("--line-rate", default=None,
              help="Draw the link's rate as a reference line, e.g. 400Gbps, 1gbit (as lab --rate), 50GB/s.")
@click.option("--force", is_flag=True, help="Replace existing image files (never one of RESULTS).")
def plot(results, metric, out, line_rate, force) -> int:
    """Draw bandwidth (or time) against message size, one line per collective, dtype, placement and run;
    `zero --bucket-size` grids and `pairs` runs as heat maps (beside the curves when both are there)."""
    from commbench.analysis.report import plot as plotting

    written = plotting.plot_results(list(results), metric=metric, out=out, line_rate=line_rate, force=force)
    print(f"plot written to {written[0]}" + (f" (also: {', '.join(map(str, written[1:]))})" if written[1:] else ""))
    return 0


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--baseline", multiple=True, type=click.Path(),
              help="Results to compare against (before); repeat for several files.")
@click.option("--out", default=None, help="Report file [default: next to the first result, as <name>.html or .md].")
@click.option("--format", "fmt", type=click.Choice(["html", "markdown"]), default=None,
              help="html (one self-contained page) or markdown (figure saved as a PNG beside it) "
                   "[default: from --out's suffix, else html].")
@click.option("--line-rate", default=None, help="Reference line on the curves, e.g. 400Gbps, 1gbit or 50GB/s.")
@click.option("--force", is_flag=True, help="Replace an existing report and its figures (never an input).")
def report(results, baseline, out, fmt, line_rate, force) -> int:
    """Write one report of results: curves, peak busbw, run metadata, and the comparison with --baseline."""
    from commbench.analysis.report import report as reporting

    written = reporting.write_report(list(results), list(baseline) or None, out=out, fmt=fmt, line_rate=line_rate,
                                     force=force)
    figures = f" (figures: {', '.join(map(str, written[1:]))})" if written[1:] else ""
    print(f"report written to {written[0]}{figures}")
    return 0
