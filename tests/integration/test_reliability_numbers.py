"""Issue #23, numbers and sizes: every numeric option of every command goes through one validator
(cli/options.py `Number`), free text stored in results through `Text`, and resource-sized input
(--nproc, a size grid, a model shape, buckets) is counted before anything is built or started.

Bad input ends with exit 2, exactly one stderr line naming the flag, no traceback, no file made,
well within 60 s. The option matrix is discovered from the click commands (so a new numeric
option is covered, or fails the structural test) and runs in-process; a cross-section of every
command, the resource cases and raw non-UTF-8 argv bytes run as real `python -m commbench`
subprocesses.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import pytest

from commbench.cli import app
from commbench.cli.options import Number, Text, check_nproc, check_number, check_text, fraction
from commbench.core import units
from commbench.core.errors import BadInput
from commbench.harness import plan as planning
from commbench.workloads import zero as zeroing
from commbench.workloads import zeroschedule
from commbench.workloads.buckets import BucketPlan, BucketWorkload
from unit.synthetic import make_rows, write  # tests/ is on sys.path (rootdir-relative imports)

pytestmark = pytest.mark.integration  # the CLI in subprocesses (README, Development: the tiers)

DATA = Path(__file__).resolve().parents[1] / "data"
NCCL_LOG = DATA / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt"
HUGE = str(10**30)
DS = str(DATA / "ds_config" / "zero2_bucket5e8_fp16.json")
NON_FINITE = ["inf", "-inf", "nan", "1e400", "-1e400"]
# lab run --port is checked by its own change (lab/ranklaunch.py check_port), not by this validator
NOT_HERE = {("lab", "run", "--port")}
FREE_TEXT = {"--label", "--system", "--iface"}


def _commands(cmd: click.Command = app.cli, path: tuple = ()):
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _commands(sub, (*path, name))
    else:
        yield path, cmd


def _long(param: click.Parameter) -> str:
    return max((o for o in param.opts if o.startswith("--")), key=len)


def _numeric_options():
    for path, cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and isinstance(p.type, Number):
                yield path, _long(p), p.type


def _bad_values(number: Number) -> list[str]:
    """Values every numeric option must refuse: not finite, 10**30, and just below its range."""
    values = [*NON_FINITE, HUGE]
    if number.low is not None:  # (-f has no lower end here: its rule depends on -i, see size_grid)
        values.append("-" + HUGE)
        below = number.low if number.low_open else number.low - (1 if number.kind is int else 0.5)
        values.append(str(below))
    return values


def _argv(path: tuple, flag: str, value, out: Path) -> list:
    """A command line that is valid but for `flag value` (which comes first, so it is parsed first)."""
    argv = [*path, flag, value]
    if path[0] in ("sweep", "buckets", "pairs", "zero") or path == ("nccl-tests", "run"):
        argv += ["--out", str(out / "results")]
    if path == ("nccl-tests", "run"):
        argv += ["/bin/true"]
    if path == ("lab", "slurm", "submit"):
        argv += ["job.sbatch"]
    return argv


MATRIX = [pytest.param(path, flag, value, id=f"{'-'.join(path)}{flag}={value[:12]}")
          for path, flag, number in _numeric_options() for value in _bad_values(number)]


@pytest.mark.failure(row="inf-inf-nan-1e400-10")
def test_every_numeric_option_uses_the_one_validator():
    """No click option of any command is a bare int/float (or click's ranges): each is a Number,
    and every free-text option stored in results is Text."""
    numeric = (click.types.IntParamType, click.types.FloatParamType)
    bare = [(path, _long(p)) for path, cmd in _commands() for p in cmd.params
            if isinstance(p, click.Option) and isinstance(p.type, numeric) and (*path, _long(p)) not in NOT_HERE]
    assert bare == []
    untyped = [(path, _long(p)) for path, cmd in _commands() for p in cmd.params
               if isinstance(p, click.Option) and _long(p) in FREE_TEXT and not isinstance(p.type, Text)]
    assert untyped == []
    found = {(path, flag) for path, flag, _ in _numeric_options()}
    assert len(found) >= 45  # sweep, buckets, pairs, zero, doctor, nccl-tests run, lab up/set/slurm
    assert {p[0] for p, _ in found} >= {"sweep", "buckets", "pairs", "zero", "doctor", "nccl-tests", "lab"}


@pytest.fixture
def nothing_runs(monkeypatch, tmp_path):
    """No process may start and no lab may be touched: every case must end while parsing."""
    def forbidden(*args, **kwargs):
        raise AssertionError(f"bad input started {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", forbidden)
    monkeypatch.setattr(subprocess, "run", forbidden)
    monkeypatch.setenv("COMMBENCH_LAB_PREFIX", "zq")
    monkeypatch.setenv("COMMBENCH_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("path, flag, value", MATRIX)
@pytest.mark.failure(
    row="inf-inf-nan-1e400-10",
    section="Numbers, sizes and resource-sized input",
    failure="`inf`, `-inf`, `nan`, `1e400`, `10**30`, or a value just below the range, on any numeric option of any "
            "command (sweep, buckets, pairs, zero, doctor, nccl-tests run, lab up/set/slurm)",
    does="exit 2, one line naming the flag, the value and the allowed range (`--timeout inf is not a finite number: "
         "give a number above 0 and at most 604800, e.g. --timeout 300`); nothing started, no results folder, no "
         "0-row file; the options are discovered from the click commands, and a bare `type=int`/`type=float` option "
         "fails the structural test",
)
def test_every_numeric_option_refuses_out_of_range(path, flag, value, nothing_runs, capsys):
    start = time.monotonic()
    with pytest.raises(SystemExit) as info:
        app.main(_argv(path, flag, value, nothing_runs))
    out, err = capsys.readouterr()
    assert info.value.code == 2, (info.value.code, err)
    assert "Traceback" not in err + out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: "), err
    assert flag in lines[0], lines[0]
    assert list(nothing_runs.iterdir()) == []  # no results folder, no file
    assert time.monotonic() - start < 5


# --------------------------------------------------------------------------- the real CLI

@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    write(d / "good.parquet", make_rows(repetitions=1))
    (d / "tiny.json").write_text('{"zero_optimization": {"stage": 2, "reduce_bucket_size": 1}}')
    return d


BAD_UTF8 = b"run-\xff\xfe"
# (id, argv (str or bytes items; {d} = the inputs folder), substrings of the one line)
CLI_CASES = [
    # non-finite and huge numbers, every command
    ("sweep-timeout-inf", ["sweep", "--timeout", "inf"], ["--timeout inf", "finite"]),
    ("sweep-time-budget-inf", ["sweep", "--time-budget", "inf"], ["--time-budget inf"]),
    ("sweep-step-factor-nan", ["sweep", "-f", "nan"], ["--step-factor nan"]),
    ("sweep-step-factor-1e400", ["sweep", "-f", "1e400"], ["--step-factor 1e400"]),
    ("sweep-iters-huge", ["sweep", "--iters", HUGE], ["--iters", "at most"]),
    ("sweep-max-bytes-inf", ["sweep", "-e", "inf"], ["--max-bytes 'inf' is not a size"]),
    ("sweep-max-bytes-negative", ["sweep", "-e", "-1"], ["--max-bytes '-1' is not a size"]),
    ("sweep-max-bytes-1e400", ["sweep", "-e", "1e400"], ["--max-bytes '1e400' is too large"]),
    ("sweep-step-bytes-inf", ["sweep", "-f", "1", "-i", "inf"], ["--step-bytes 'inf' is not a size"]),
    ("sweep-sizes-nan", ["sweep", "--sizes", "1K,nan"], ["--sizes 'nan' is not a size"]),
    ("buckets-timeout-nan", ["buckets", "--timeout", "nan"], ["--timeout nan"]),
    ("buckets-overlap-huge", ["buckets", "--overlap", HUGE], ["--overlap"]),
    ("buckets-grad-bytes-inf", ["buckets", "--grad-bytes", "inf"], ["--grad-bytes 'inf' is not a size"]),
    ("buckets-params-nan", ["buckets", "--params", "nan"], ["--params 'nan' is not a count"]),
    ("buckets-bucket-size-inf", ["buckets", "--bucket-size", "1e6,inf"], ["--bucket-size 'inf' is not a count"]),
    ("pairs-size-nan", ["pairs", "--size", "nan"], ["--size 'nan' is not a size"]),
    ("pairs-slow-below-nan", ["pairs", "--slow-below", "nan"], ["--slow-below nan must be more than 0"]),
    ("zero-timeout-1e400", ["zero", "--timeout", "1e400"], ["--timeout 1e400"]),
    ("zero-scale-inf", ["zero", "--scale", "inf"], ["--scale inf is not a finite number"]),
    ("zero-scale-nan", ["zero", "--scale", "nan"], ["--scale nan is not a finite number"]),
    ("tune-top-huge", ["tune", "--ds-config", DS, "--top", HUGE], ["--top", "at most 100"]),
    ("tune-scale-nan", ["tune", "--ds-config", DS, "--scale", "nan"], ["--scale nan is not a finite number"]),
    ("zero-scale-negative", ["zero", "--scale", "-1"], ["--scale -1 must be in (0, 1]"]),
    ("zero-layers-huge", ["zero", "--layers", HUGE, "--hidden", "64"], ["--layers", "at most"]),
    ("zero-bucket-size-1e400", ["zero", "--bucket-size", "1e400"], ["--bucket-size '1e400' is out of range"]),
    ("compare-threshold-inf", ["compare", "{d}/good.parquet", "{d}/good.parquet", "--threshold", "inf"],
     ["--threshold inf is not a finite number"]),
    ("compare-threshold-1e400-percent", ["compare", "{d}/good.parquet", "{d}/good.parquet", "--threshold", "1e400%"],
     ["--threshold 1e400% is not a finite number"]),
    ("compare-alpha-nan", ["compare", "{d}/good.parquet", "{d}/good.parquet", "--alpha", "nan"], ["--alpha nan"]),
    ("gate-lower-nan", ["gate", "{d}/good.parquet", "--suggest", "--lower", "nan"], ["--lower nan"]),
    ("gate-upper-inf", ["gate", "{d}/good.parquet", "--suggest", "--upper", "-inf"], ["--upper -inf"]),
    ("gate-min-size-inf", ["gate", "{d}/good.parquet", "--suggest", "--min-size", "inf"],
     ["--min-size 'inf' is not a size"]),
    ("plot-line-rate-inf", ["plot", "{d}/good.parquet", "--line-rate", "1e400Gbps"], ["--line-rate '1e400Gbps'"]),
    ("plot-line-rate-nan", ["plot", "{d}/good.parquet", "--line-rate", "nanGbps"], ["--line-rate 'nanGbps'"]),
    ("report-line-rate-inf", ["report", "{d}/good.parquet", "--line-rate", "infGbps"], ["--line-rate 'infGbps'"]),
    ("trend-alpha-nan", ["trend", "{d}/good.parquet", "--alpha", "nan"], ["--alpha nan"]),
    ("trend-threshold-1e400-percent", ["trend", "{d}/good.parquet", "--threshold", "1e400%"],
     ["--threshold 1e400% is not a finite number"]),
    ("check-time-budget-inf", ["check", "--time-budget", "inf"], ["--time-budget inf is not a finite number"]),
    ("check-nproc-huge", ["check", "--nproc", "99999999999999999999"],
     ["--nproc 99999999999999999999 must be at most"]),
    ("check-link-rate-1e400", ["check", "--link-rate", "1e400gbit"], ["--link-rate '1e400gbit'", "finite"]),
    ("export-no-results", ["export", "{d}/nope.parquet", "--openmetrics", "{d}/m.prom"],
     ["nope.parquet does not exist"]),
    ("capture-no-command", ["capture", "--out", "{d}/job.trace"], ["capture needs a command after --"]),
    ("replay-world-size-huge", ["replay", str(DATA / "traces" / "ds_zero2.trace"), "--world-size", HUGE],
     ["--world-size", "must be at most"]),
    ("doctor-timeout-inf", ["doctor", "--timeout", "inf"], ["--timeout inf"]),
    ("doctor-watch-nan", ["doctor", "--watch", "nan"], ["--watch nan"]),
    ("nccl-run-timeout-inf", ["nccl-tests", "run", "--timeout", "inf", "--out", "results", "/bin/true"],
     ["--timeout inf"]),
    ("nccl-run-np-huge", ["nccl-tests", "run", "--np", HUGE, "--out", "results", "/bin/true"], ["--np"]),
    ("lab-up-nodes-huge", ["lab", "up", "--nodes", HUGE], ["--nodes", "is outside 2..64"]),
    ("lab-set-mtu-1e400", ["lab", "set", "--mtu", "1e400"], ["'--mtu'", "'1e400' is not a valid integer"]),
    ("lab-set-queue-huge", ["lab", "set", "--queue", HUGE], ["--queue"]),
    ("lab-slurm-up-timeout-inf", ["lab", "slurm", "up", "--timeout", "inf"], ["--timeout inf"]),
    ("lab-slurm-submit-timeout-nan", ["lab", "slurm", "submit", "--timeout", "nan", "job.sbatch"],
     ["--timeout nan"]),
    # resource-sized input
    ("sweep-nproc-1000", ["sweep", "--nproc", "1000"], ["--nproc 1000 is more than this machine can run",
                                                        "usable core", "free memory", "use --nproc"]),
    ("pairs-nproc-1000", ["pairs", "--nproc", "1000"], ["--nproc 1000 is more than this machine can run"]),
    ("sweep-billion-point-grid", ["sweep", "-b", "8", "-e", "1G", "-i", "1", "-f", "1"],
     ["size grid has 1,073,741,817 sizes", "the most is 10,000", "raise -i or -f"]),
    ("sweep-creeping-factor", ["sweep", "-b", "1", "-e", "1T", "-f", "1.0000001"],
     ["size grid has more than 10,000 sizes"]),
    ("sweep-sizes-list-too-long", ["sweep", "--sizes", ",".join(["4K"] * 20_000)],
     ["--sizes lists 20,000 items; the most is 10,000"]),
    ("sweep-too-many-points", ["sweep", "--collective", "all", "-R", "1000"],
     ["points", "the most is 100,000", "--repetitions"]),
    ("buckets-too-many-buckets", ["buckets", "--grad-bytes", "1T", "--bucket-size", "1"],
     ["buckets per step; the most is 100,000", "raise --bucket-size or lower --grad-bytes"]),
    ("buckets-gradients-beyond-memory", ["buckets", "--grad-bytes", "64T", "--bucket-size", "5e8"],
     ["gradients needs about", "but only", "lower --grad-bytes"]),
    ("zero-huge-model", ["zero", "--layers", "10000", "--hidden", "1000000"],
     ["collectives per step; the most is 100,000", "--layers/--hidden/--vocab"]),
    ("zero-bucket-of-one-element", ["zero", "--bucket-size", "1"], ["collectives per step", "--bucket-size"]),
    ("zero-ds-config-bucket-of-one", ["zero", "--ds-config", "{d}/tiny.json"],
     ["ZeRO-2", "collectives per step", "reduce_bucket_size in --ds-config"]),
    ("zero-preset-beyond-memory", ["zero", "--model", "7b", "--scale", "1"], ["needs about", "lower --scale"]),
    ("zero-engine-model-beyond-memory", ["zero", "--engine", "deepspeed", "--layers", "1000", "--hidden", "100000"],
     ["DeepSpeed engine's 1000x100000 model", "needs about", "--layers/--hidden/--vocab"]),
    # free text that is not UTF-8 (raw argv bytes) or not one line
    ("sweep-label-not-utf8", ["sweep", "--label", BAD_UTF8], ["--label holds bytes that are not UTF-8"]),
    ("buckets-label-not-utf8", ["buckets", "--label", BAD_UTF8], ["--label holds bytes that are not UTF-8"]),
    ("pairs-label-not-utf8", ["pairs", "--label", BAD_UTF8], ["--label holds bytes that are not UTF-8"]),
    ("zero-label-not-utf8", ["zero", "--label", BAD_UTF8], ["--label holds bytes that are not UTF-8"]),
    ("sweep-iface-not-utf8", ["sweep", "--iface", BAD_UTF8], ["--iface holds bytes that are not UTF-8"]),
    ("sweep-label-newline", ["sweep", "--label", "one\ntwo"], ["--label holds control characters"]),
    ("sweep-label-huge", ["sweep", "--label", "x" * 5000], ["--label is 5,000 characters long"]),
    ("nccl-import-label-not-utf8", ["nccl-tests", "import", str(NCCL_LOG), "--out", "results", "--label", BAD_UTF8],
     ["--label holds bytes that are not UTF-8"]),
    ("nccl-run-label-not-utf8", ["nccl-tests", "run", "--label", BAD_UTF8, "--out", "results", "/bin/true"],
     ["--label holds bytes that are not UTF-8"]),
    ("gate-system-not-utf8", ["gate", "{d}/good.parquet", "--suggest", "--system", BAD_UTF8],
     ["--system holds bytes that are not UTF-8"]),
]
MEASURING = ("sweep", "buckets", "pairs", "zero")


def _run(argv: list, inputs: Path, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    args = [a.replace("{d}", str(inputs)) if isinstance(a, str) else a for a in argv]
    if args[0] in MEASURING:
        args += ["--out", str(cwd / "results")]
    env = {**os.environ, "COMMBENCH_LAB_PREFIX": "zq", "COMMBENCH_LAB_DIR": str(cwd / "lab")}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "commbench", *args], cwd=cwd, capture_output=True, env=env,
                          timeout=120)
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def refusals(inputs, tmp_path_factory) -> dict:
    """Every CLI case once, a few at a time (each is its own interpreter)."""
    base = tmp_path_factory.mktemp("cli")
    before = sorted(p.name for p in inputs.rglob("*"))
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {}
        for case_id, argv, _ in CLI_CASES:
            (base / case_id).mkdir()
            futures[case_id] = pool.submit(_run, argv, inputs, base / case_id)
        done = {case_id: (*f.result(), base / case_id) for case_id, f in futures.items()}
    assert sorted(p.name for p in inputs.rglob("*")) == before  # no figure or report beside the inputs
    return done


@pytest.mark.parametrize("case_id, needles", [pytest.param(c, n, id=c) for c, _, n in CLI_CASES])
@pytest.mark.failure(
    row="same-through-real-cli-every",
    section="Numbers, sizes and resource-sized input",
    failure="the same through the real CLI on every command (`--timeout inf`, `--time-budget inf`, `-f nan`, "
            "`--scale nan`, `--threshold 1e400%`, `--alpha nan`, `--lower nan`, `--line-rate nanGbps`, `--np "
            "10**30`, `--nodes 10**30`, ...)",
    does="exit 2, one line, no traceback, no file in the working folder, in --out or beside the inputs, well within "
         "60 s",
)
@pytest.mark.failure(row="sizes-counts-inf-nan-1", cases="sweep-max-bytes-inf")
@pytest.mark.failure(row="nproc-1000-small-machine", cases="sweep-nproc-1000")
@pytest.mark.failure(
    row="sweep-more-than-100000-points",
    section="Numbers, sizes and resource-sized input",
    failure="a sweep of more than 100000 points (sizes x collectives x placements x MTUs x `-R`)",
    does="refused before any rank: `this sweep is 216,000 points ...: fewer --repetitions, sizes or collectives`",
    cases="sweep-too-many-points",
)
@pytest.mark.failure(
    row="model-larger-than-memory-zero",
    section="Numbers, sizes and resource-sized input",
    failure="a model larger than memory: `zero --model 7b --scale 1`, `zero --engine deepspeed --layers 1000 "
            "--hidden 100000`",
    does="the same estimate as a sweep's largest point (`check_need`): `the DeepSpeed engine's 1000x100000 model "
         "(1.2e+14 parameters) needs about 3492.8 TiB on this host (2 rank(s)) but only 22.3 GiB is free: pass a "
         "smaller --layers/--hidden/--vocab`",
    cases="zero-engine-model-beyond-memory",
)
@pytest.mark.failure(row="gradients-too-many-buckets-beyond", cases="buckets-gradients-beyond-memory")
@pytest.mark.failure(row="label-system-iface-bytes-are", cases="sweep-label-not-utf8")
def test_the_cli_refuses_with_one_line(refusals, case_id, needles):
    proc, elapsed, cwd = refusals[case_id]
    err = proc.stderr.decode("utf-8", "backslashreplace")
    assert proc.returncode == 2, (proc.returncode, err)
    assert b"Traceback" not in proc.stderr + proc.stdout
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: "), err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert list(cwd.iterdir()) == []  # no results folder, no 0-row file, no lab state
    assert elapsed < 60, elapsed


@pytest.mark.failure(row="same-through-real-cli-every")
def test_the_table_covers_every_command():
    firsts = {argv[0] for _, argv, _ in CLI_CASES}
    assert set(app.cli.commands) <= firsts, set(app.cli.commands) - firsts


# --------------------------------------------------------------------------- the pieces, in-process

@pytest.mark.parametrize("text", [*NON_FINITE, HUGE, "0", "-1"])
@pytest.mark.failure(
    row="numbers-inside-text-options-fractions",
    section="Numbers, sizes and resource-sized input",
    failure="numbers inside text options and fractions (`--scale inf`, `--scale nan`, `--threshold 1e400%`, "
            "`--alpha nan`)",
    does="the shared check: `--scale inf is not a finite number`, `--threshold 1e400% is not a finite number`; a "
         "NaN fraction fails its range (`--alpha nan must be more than 0 and below 100%`)",
)
def test_check_number_refuses_what_is_out_of_range(text):
    with pytest.raises(BadInput, match=r"^--x "):
        check_number(text, "--x", Number(float, 0, 60, low_open=True))


def test_check_number_keeps_what_is_in_range():
    assert check_number("0.5", "--x", Number(float, 0, 1, low_open=True)) == 0.5
    assert check_number("7", "--x", Number(int, 1, 10)) == 7
    with pytest.raises(BadInput, match="--x 'many' is not a number"):
        check_number("many", "--x", Number(int, 1, 10))
    with pytest.raises(BadInput, match=r"\(50 characters\) is out of range"):
        check_number("9" * 50, "--x", Number(int, 1, 10))


@pytest.mark.parametrize("text, needle", [("inf", "is not a finite number"), ("-inf", "is not a finite number"),
                                          ("1e400", "is not a finite number"), ("1e400%", "is not a finite number"),
                                          ("nan", "must be 0 or more and below 100%"), ("nan%", "must be 0 or more")])
@pytest.mark.failure(row="numbers-inside-text-options-fractions")
def test_fractions_refuse_non_finite(text, needle):
    with pytest.raises(BadInput, match=f"^--t {re.escape(text)} {needle}"):
        fraction(text, "--t")


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "-1", "1e400", HUGE, "1e19", "-0", "0x10", "1e-400"])
@pytest.mark.failure(
    row="sizes-counts-inf-nan-1",
    section="Numbers, sizes and resource-sized input",
    failure="sizes and counts: `inf`, `nan`, `-1`, `1e400`, `10**30`, `1e19`, `0x10` (`-e`, `-b`, `-i`, `--sizes`, "
            "`--grad-bytes`, `--params`, `--bucket-size`, `--size`, `--min-size`)",
    does="one line: not a size / too large / out of range",
)
def test_sizes_and_counts_refuse_non_finite_negative_and_huge(text):
    with pytest.raises(BadInput):
        units.parse_size(text, "--size")
    with pytest.raises(BadInput):
        units.parse_count(text, "--count")


@pytest.mark.failure(row="size-grid-billion-points-b")
def test_lists_are_counted_before_their_items_are_parsed():
    start = time.monotonic()
    with pytest.raises(BadInput, match="--sizes lists 1,000,000 items; the most is 10,000"):
        units.parse_size_list(",".join(["junk"] * 1_000_000), most=10_000)
    with pytest.raises(BadInput, match="--bucket-size lists 101 items; the most is 100"):
        units.parse_count_list(",".join(["1e6"] * 101), "--bucket-size", most=100)
    assert time.monotonic() - start < 5
    assert units.parse_count_list("1e6, 5e7", "--bucket-size") == [10**6, 5 * 10**7]


@pytest.mark.parametrize("lo, hi, factor, step", [(8, 1 << 26, 2.0, None), (1, 1 << 20, 1.5, None),
                                                  (1, 5000, 1.0000001, None), (1024, 1 << 20, 1.0, 4096),
                                                  (8, 9, 1.0, 1), (5, 5, 3.0, None), (1, 10**18, 16.0, None)])
@pytest.mark.failure(row="size-grid-billion-points-b")
def test_the_grid_is_counted_exactly_before_it_is_built(lo, hi, factor, step):
    assert planning.grid_length(lo, hi, factor, step) == len(planning.size_grid(lo, hi, factor, step))


@pytest.mark.failure(
    row="size-grid-billion-points-b",
    section="Numbers, sizes and resource-sized input",
    failure="a size grid of a billion points (`-b 8 -e 1G -i 1 -f 1`), a factor that creeps (`-f 1.0000001`), a "
            "`--sizes` list of 20000 items",
    does="counted before the list is built (arithmetic for `-i`, a walk that stops at 10001 for `-f`, commas before "
         "parsing): `the size grid has 1,073,741,817 sizes; the most is 10,000: raise -i or -f, or narrow -b/-e`, "
         "at once",
)
def test_a_billion_point_grid_is_refused_at_once():
    start = time.monotonic()
    with pytest.raises(BadInput, match="the size grid has 1,073,741,817 sizes"):
        planning.size_grid(8, 1 << 30, 1.0, 1)
    with pytest.raises(BadInput, match="more than 10,000 sizes"):
        planning.size_grid(1, 1 << 40, 1.000000001, None)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(BadInput, match="--step-factor"):
            planning.size_grid(8, 1024, bad, None)
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("layers, hidden, vocab", [(2, 64, 256), (3, 40, 1000), (12, 768, 50257)])
@pytest.mark.failure(row="zero-shape-bucket-makes-billions")
def test_zero_counts_match_the_schedule_it_would_build(layers, hidden, vocab):
    modules = zeroschedule.module_sizes(layers, hidden, vocab)
    params = zeroschedule.param_count(layers, hidden, vocab)
    assert params == sum(modules)
    for stage in (0, 1, 2, 3):
        for bucket, g in ((10**4, 1), (3 * 10**5, 3)):
            built = len(zeroschedule.step_schedule(stage, modules, bucket, 5 * 10**4, micro_batches=g))
            counted = zeroschedule.step_collectives(stage, layers, params, bucket, g)
            assert counted == built if stage < 3 else counted >= built


@pytest.mark.failure(
    row="zero-shape-bucket-makes-billions",
    section="Numbers, sizes and resource-sized input",
    failure="a ZeRO shape or bucket that makes billions of collectives (`--layers 10000 --hidden 1000000`, "
            "`--bucket-size 1`, `reduce_bucket_size: 1` in a ds_config)",
    does="counted by arithmetic before any schedule list exists: `ZeRO-1 of 1.3b (1.41e+09 parameters) with buckets "
         "of 1 elements is 1,414,352,897 collectives per step; the most is 100,000: use a larger --bucket-size (or "
         "reduce_bucket_size in --ds-config) ...`",
)
def test_a_zero_shape_with_billions_of_collectives_is_refused_before_any_list():
    plan = zeroing.ZeroPlan(layers=10_000, hidden=1_000_000, vocab=10_000_000, model="custom", stages=[0, 3])
    start = time.monotonic()
    with pytest.raises(BadInput, match="ZeRO-0 of custom .* collectives per step; the most is 100,000"):
        zeroing.ZeroWorkload(plan).validate(2)
    assert time.monotonic() - start < 1
    assert zeroschedule.engine_bytes_per_rank(2, 64, 256, [0]) == 16 * zeroschedule.param_count(2, 64, 256)
    assert zeroschedule.engine_bytes_per_rank(2, 64, 256, [3]) == 4 * zeroschedule.param_count(2, 64, 256)


@pytest.mark.failure(
    row="gradients-too-many-buckets-beyond",
    section="Numbers, sizes and resource-sized input",
    failure="gradients in too many buckets or beyond memory (`buckets --grad-bytes 1T --bucket-size 1`, "
            "`--grad-bytes 64T`)",
    does="buckets counted before the layout tuple is built; memory by `check_need`; a gradient smaller than one "
         "element is refused, not a `range()` error",
)
def test_buckets_are_counted_before_the_layout_is_built():
    plan = BucketPlan(grad_bytes=1 << 40, dtype="bfloat16", bucket_elems=[1])
    start = time.monotonic()
    with pytest.raises(BadInput, match="buckets per step; the most is 100,000"):
        BucketWorkload(plan).validate(2)
    assert time.monotonic() - start < 1
    # a gradient smaller than one element holds no bucket: refused, not a ZeroDivision / range() error
    with pytest.raises(BadInput, match="holds no whole bucket"):
        BucketWorkload(BucketPlan(grad_bytes=1, dtype="bfloat16", bucket_elems=[10])).validate(2)


@pytest.mark.failure(
    row="nproc-1000-small-machine",
    section="Numbers, sizes and resource-sized input",
    failure="`--nproc 1000` on a small machine",
    does="refused before any process starts: `--nproc 1000 is more than this machine can run: 2 usable core(s) "
         "allow 8 ranks (4 per core) and 22 GiB free memory about 89 (256 MiB each): use --nproc 8 or fewer, or "
         "start ranks on several hosts`; with NCCL, more ranks than GPUs is refused too",
)
def test_nproc_is_held_to_what_this_machine_can_run():
    cores = len(os.sched_getaffinity(0))
    check_nproc(min(2, 4 * cores), "gloo")
    with pytest.raises(BadInput, match=rf"--nproc {8 * cores + 1} is more than this machine can run: {cores} usable"):
        check_nproc(8 * cores + 1, "gloo")


@pytest.mark.parametrize("text, needle", [("a\udcffb", "not UTF-8"), ("a\nb", "control characters"),
                                          ("a\x1b[31m", "control characters"), ("x" * 1001, "1,001 characters")])
@pytest.mark.failure(
    row="label-system-iface-bytes-are",
    section="Numbers, sizes and resource-sized input",
    failure="`--label` (or `--system`, `--iface`) with bytes that are not UTF-8 in argv, a newline or escape, or "
            "5000 characters",
    does="one line, exit 2, before rank 0 (pyarrow would have failed there and the run blamed a lost rank 0): "
         "`--label holds bytes that are not UTF-8 text: pass plain UTF-8, e.g. --label run-1`; the message never "
         "echoes the bytes",
)
def test_free_text_must_be_one_line_of_utf8(text, needle):
    with pytest.raises(BadInput, match=needle) as info:
        check_text(text, "--label")
    assert "\n" not in str(info.value) and "\udcff" not in str(info.value)
    assert check_text("mtu9000-after ✓", "--label") == "mtu9000-after ✓"
