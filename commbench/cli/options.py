"""What the commands share: the run options (built from RunOptions' flagged fields, the one
declaration of each: name, flag, range, default, help), and the one check of every number and
free text a command takes.

`Number` is the type of every numeric click option (and `check_number` the check of numbers
written inside other options, such as `--scale` or a fraction): a finite value within the flag's
range, or one line naming the flag, the value and the fix. `Text` is the type of every free-text
option stored in results (`--label`, `--system`, `--iface`): UTF-8, no control characters, not
huge. Both run while click parses, so bad input ends before any rank starts or any file is made.
"""

from __future__ import annotations

import math
import os

import click

from commbench.core.binding import MODES, check_mode
from commbench.core.errors import BadInput
from commbench.core.options import AUTO, WEEK_S as WEEK_S, Flag, resolve_auto, shared_options
from commbench.core.progress import MODES as PROGRESS_MODES

DAY_S = 24 * 3600
MAX_TEXT = 1000  # characters of a free-text option (a label is stored in every row)
MAX_NUMBER_TEXT = 40  # characters of a number as typed: past this it is out of range whatever it is
RANKS_PER_CORE = 4  # local ranks beyond this many per usable core only wait for each other
RANK_BYTES = 256 << 20  # what one local rank holds before its buffers (interpreter, torch, gloo)


class InOrder(click.Group):
    """A command group whose help lists its commands in the order they were added (a user's order:
    measure, then judge, then diagnose; lab up before lab down), not click's alphabetical one."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


def _show(value) -> str:
    """3.0 as 3.0 (as the value reads back), 0.25 and 1e+30 as %g."""
    if isinstance(value, float) and math.isfinite(value) and (value != int(value) or abs(value) >= 1e16):
        return f"{value:g}"
    return str(value)


def _bound(value) -> str:
    """A range's end: 1000000 rather than 1000000.0 or 1e+06."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


class Number(click.ParamType):
    """A numeric option: `kind` (int or float), finite, within [low, high] (an end is open where
    asked, absent where None). `rule` replaces the range's wording in the message; `example` is
    the fix's example value."""

    def __init__(self, kind: type = float, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, rule: str | None = None,
                 example: str | None = None, auto: bool = False) -> None:
        self.kind, self.low, self.high, self.auto = kind, low, high, auto
        self.low_open, self.high_open, self.rule, self.example = low_open, high_open, rule, example
        self.name = "integer" if kind is int else "float"

    def span(self) -> str:
        """The allowed values in words: 'a whole number of at least 1 and at most 1000', 'a number
        above 0 and at most 60'."""
        what = "a whole number" if self.kind is int else "a number"
        low = None if self.low is None else f"{'above' if self.low_open else 'of at least'} {_bound(self.low)}"
        high = None if self.high is None else f"{'below' if self.high_open else 'at most'} {_bound(self.high)}"
        if low is None and high is not None and not self.high_open:
            high = f"of {high}"
        return f"{what} " + " and ".join(filter(None, (low, high)))

    def fix(self, flag: str) -> str:
        return (f"give {self.span()}" + (" or auto" if self.auto else "")
                + (f", e.g. {flag} {self.example}" if self.example else ""))

    def parse(self, value, flag: str):
        """Text as typed -> int or float; a click error (the usage line) when it is no number."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        if self.auto and text.lower() == AUTO:  # resolved per backend once the run's is known (run_fields)
            return AUTO
        if len(text) > MAX_NUMBER_TEXT:
            raise BadInput(f"{flag} {text[:12]}... ({len(text)} characters) is out of range: {self.fix(flag)}")
        try:
            return int(text) if self.kind is int else float(text)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not a valid {self.name}") from None

    def check(self, value, flag: str, typed: str | None = None):
        """The range check of a parsed value: the value back, or BadInput naming flag, value and fix."""
        if value == AUTO and self.auto:
            return value
        shown = typed if typed is not None else _show(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"{flag} {shown} is not a finite number: {self.fix(flag)}")
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if not (too_low or too_high):
            return value
        if self.rule is not None:
            problem = self.rule
        elif too_high:
            problem = f"must be {'below' if self.high_open else 'at most'} {_bound(self.high)}"
        elif self.low_open:
            problem = f"must be more than {_bound(self.low)}"
        else:
            problem = "must be 0 or more" if self.low == 0 else f"must be at least {_bound(self.low)}"
        raise BadInput(f"{flag} {shown} {problem}: {self.fix(flag)}")

    def convert(self, value, param, ctx):
        flag = _flag(param)
        parsed = self.parse(value, flag)
        typed = str(value).strip() if isinstance(parsed, float) and not math.isfinite(parsed) else None
        return self.check(parsed, flag, typed)


def check_number(text, flag: str, number: Number):
    """A number written inside another option (`--scale 0.5`, a fraction): parsed and checked by
    `number`, every failure one line of bad input."""
    try:
        value = number.parse(text, flag)
    except click.BadParameter:
        raise BadInput(f"{flag} {str(text)[:MAX_NUMBER_TEXT]!r} is not a number: {number.fix(flag)}") from None
    return number.check(value, flag, str(text).strip())


class Text(click.ParamType):
    """A free-text option stored in results or the environment: UTF-8 (argv bytes that are not
    arrive as surrogates and would break the parquet writer), no control characters, at most
    `most` characters."""

    name = "text"

    def __init__(self, most: int = MAX_TEXT) -> None:
        self.most = most

    def convert(self, value, param, ctx):
        return check_text(value, _flag(param), self.most)


def check_text(value, flag: str, most: int = MAX_TEXT) -> str:
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{flag} holds bytes that are not UTF-8 text: pass plain UTF-8, e.g. {flag} run-1") from None
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text):
        raise BadInput(f"{flag} holds control characters (a newline, tab or escape): pass one line of "
                       f"printable text, e.g. {flag} run-1")
    if len(text) > most:
        raise BadInput(f"{flag} is {len(text):,} characters long; the most is {most:,}: shorten it")
    return text


class Bind(click.ParamType):
    """--bind: one of core/binding.py MODES, or one line naming them."""

    name = "|".join(MODES)

    def convert(self, value, param, ctx):
        return check_mode(value, _flag(param))


def _flag(param) -> str:
    if param is None:
        return "value"
    longs = [o for o in param.opts if o.startswith("--")]
    return max(longs, key=len) if longs else param.opts[0] if param.opts else param.name


def fraction(text: str, flag: str, low_open: bool = False) -> float:
    """'5%' or '0.05' -> 0.05; anything else is one line of bad input."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadInput(f"{flag} {str(text)[:MAX_NUMBER_TEXT]!r} is not a fraction: write e.g. 5% or 0.05") from None
    if math.isinf(value):  # NaN fails the range below
        raise BadInput(f"{flag} {raw} is not a finite number: write a fraction, e.g. 5% or 0.05")
    if not raw.endswith("%") and value >= 1:
        raise BadInput(f"{flag} {text} is not a fraction below 1: write {raw}% or {value / 100:g}")
    ok = (0 < value < 1) if low_open else (0 <= value < 1)
    if not ok:  # NaN too
        bound = "more than 0" if low_open else "0 or more"
        raise BadInput(f"{flag} {text} must be {bound} and below 100%: e.g. 5% or 0.05")
    return value


LOCAL_RANKS = 100_000  # a first bound; check_nproc holds --nproc to what this machine can run
# --nproc: how many local ranks to spawn, no RunOptions field (no plan stores it); the help lists it
# after --backend.
NPROC = Flag(("--nproc",), "int", low=1, high=LOCAL_RANKS, example="2", show_default=False,
             help="Local ranks to spawn when no launcher started us [default: visible GPUs, or 2].")
NPROC_AFTER = "backend"


def shared_option(name: str, default, how: Flag):
    """The click option of one shared run option (core/options.py Flag)."""
    kind: click.ParamType | None
    if how.kind in ("int", "float"):
        kind = Number(int if how.kind == "int" else float, how.low, how.high, low_open=how.low_open,
                      high_open=how.high_open, rule=how.rule, example=how.example, auto=how.auto)
    else:
        kind = {"choice": click.Choice(how.choices), "bind": Bind(), "progress": click.Choice(PROGRESS_MODES),
                "text": Text(how.most or MAX_TEXT), "switch": None, "path": None}[how.kind]
    kwargs = {"default": default, "help": how.help, "type": kind}
    if how.show_default:
        kwargs["show_default"] = True
    return click.option(name, *how.names, **kwargs)


def run_options(command):
    """The options every measuring command shares (iteration policy, launch, output): RunOptions'
    flagged fields that the command takes (by its name, as click names it: the function's), and
    --nproc."""
    options = []
    for name, default, how in shared_options(command.__name__.replace("_", "-")):
        options.append(shared_option(name, default, how))
        if name == NPROC_AFTER:
            options.append(shared_option("nproc", None, NPROC))
    for option in reversed(options):
        command = option(command)
    return command


def check_nproc(nproc: int, backend: str) -> None:
    """--nproc local ranks must fit this machine: one per GPU with NCCL; at most RANKS_PER_CORE
    per usable core and RANK_BYTES each in the memory that is free."""
    import psutil

    from commbench.core.units import format_size

    if backend == "nccl":
        import torch

        gpus = torch.cuda.device_count()
        if nproc > gpus:
            raise BadInput(f"--nproc {nproc} is more than the {gpus} GPU(s) here: NCCL runs one rank per GPU; "
                           f"use --nproc {gpus} or fewer, or --backend gloo")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    free = psutil.virtual_memory().available
    by_cores, by_memory = RANKS_PER_CORE * cores, max(1, free // RANK_BYTES)
    if nproc > min(by_cores, by_memory):
        raise BadInput(f"--nproc {nproc} is more than this machine can run: {cores} usable core(s) allow "
                       f"{by_cores} ranks ({RANKS_PER_CORE} per core) and {format_size(free)} free memory about "
                       f"{by_memory} ({format_size(RANK_BYTES)} each): use --nproc {min(by_cores, by_memory)} or "
                       "fewer, or start ranks on several hosts (torchrun, srun, mpirun)")


def run_fields(nproc: int | None, workload: str, **run) -> dict:
    """Cross-check the shared options (each was checked alone while parsing; `run` holds them by
    their RunOptions field names); return the RunOptions fields (backend resolved)."""
    from commbench.core import results
    from commbench.harness.backend import choose_backend

    fields = {name: run.pop(name, default) for name, default, _ in shared_options()}
    if run:
        raise TypeError(f"run_fields: no shared option named {', '.join(sorted(run))}")
    if fields["min_iters"] > fields["max_iters"]:
        raise BadInput(f"--min-iters {fields['min_iters']} is larger than --max-iters {fields['max_iters']}: "
                       "lower one of them")
    fields["backend"] = choose_backend(fields["backend"])
    fields = resolve_auto(fields, fields["backend"], workload)
    if nproc is not None:
        check_nproc(nproc, fields["backend"])
    if fields["iface"]:
        check_iface_list(fields["iface"], nproc)
        os.environ["GLOO_SOCKET_IFNAME"] = fields["iface"]
        os.environ["NCCL_SOCKET_IFNAME"] = fields["iface"]
    return dict(fields, run_id=results.make_run_id(), workload=workload)


def refuse_untaken(fields: dict, command: str, workload: str, why: str) -> None:
    """A shared option that `command` takes but its `workload` does not (core/workloadspec.py's
    families of the one it writes, as Flag.commands name them), given a value: refused, `why` after
    its flag (`zero --engine deepspeed --layout ...`: zero takes --layout, the engine ignores it)."""
    for name, default, how in shared_options(command):
        if not how.taken_by(workload) and fields.get(name) not in (None, default):
            flag = how.names[0].split("/")[0]
            raise BadInput(f"{flag} {why}")


def check_iface_list(value: str, nproc: int | None) -> None:
    """An --iface list (core/ifaces.py: local rank i the i-th) against the launcher's local ranks, or
    --nproc's, before the workload loads torch (2 s a rank); each rank sets its own name before its
    process group (cli/launcher.py)."""
    from commbench.core import ifaces, launch

    if "," not in value:
        return
    env = launch.detect(resolve=False)
    if env is not None:
        ifaces.for_rank(value, env.local_rank, env.local_world_size, ifaces.local_ranks_told(os.environ),
                        env.launcher)
    elif nproc is not None:
        ifaces.check(value, nproc, True, f"--nproc {nproc}")


def env_option(command):
    """--env NAME=v1|v2 (repeatable): the settings axes of sweep, buckets and zero."""
    return click.option("--env", "env_axes", multiple=True, metavar="NAME=V1|V2",
                        help="Measure the whole grid once per value of an environment variable and "
                             "repetition, the values in turn within each repetition, on a fresh process group "
                             "each time (e.g. GLOO_SOCKET_IFNAME=eth0|eth1, NCCL_ALGO=Ring|Tree); repeatable, "
                             "the axes multiply; the setting is in every row.")(command)


def settings_axes(specs: tuple[str, ...], backend: str, iface: str | None, mtus: list[int] | None = None) -> list:
    """The --env axes (and --mtu's, last), checked against the backend and this host, as a plan
    stores them."""
    from commbench.core import settings

    axes = settings.parse_env(specs) + settings.mtu_axis(mtus or [])
    settings.check_backend(axes, backend)
    settings.combinations(axes)  # counted before any grid is built
    for axis in axes:
        if iface and axis.name.endswith("_SOCKET_IFNAME"):
            raise BadInput(f"--iface sets {axis.name} for the whole run and --env {axis.name} changes it: "
                           "drop --iface, or the --env axis")
        if axis.name == "GLOO_SOCKET_IFNAME":
            _check_interfaces(axis)
    return settings.as_plan(axes)


def _check_interfaces(axis) -> None:
    """gloo binds to each named interface: one missing here would fail only once ranks connect."""
    import socket

    here = sorted(name for _, name in socket.if_nameindex())
    for value in axis.values:
        missing = [name for name in value.split(",") if name not in here]
        if missing:
            raise BadInput(f"--env {axis.name}={value}: no interface {missing[0]} on {socket.gethostname()} "
                           f"(it has {', '.join(here)}): name interfaces that exist on every host")


def model_shape_options(command):
    """--model or --layers/--hidden/--vocab: the transformer whose step zero and tune schedule."""
    for opt in reversed([
        click.option("--model", default="1.3b", show_default=True, shell_complete=complete_models,
                     help="Model shape: gpt2-125m, 1.3b, 7b."),
        click.option("--layers", type=Number(int, 1, 10_000, example="24"), default=None,
                     help="Custom shape: transformer layers (with --hidden)."),
        click.option("--hidden", type=Number(int, 1, 1_000_000, example="2048"), default=None,
                     help="Custom shape: hidden size."),
        click.option("--vocab", type=Number(int, 1, 10_000_000, example="50257"), default=None,
                     help="Custom shape: vocabulary [default: the model's, 50257 for a custom shape]."),
    ]):
        command = opt(command)
    return command


# ----------------------------------------------------------------------------- shell completion
# click completes commands and flags itself (README, "Shell completion"); these give the values of
# the flags that take a name. A comma list completes its last item.


def _names(names, incomplete: str, lists: bool = False) -> list[str]:
    head, _, last = incomplete.rpartition(",") if lists else ("", "", incomplete)
    prefix = head + "," if head else ""
    return [prefix + n for n in names if n.startswith(last.lower())]


def complete_collectives(ctx, param, incomplete: str) -> list[str]:
    from commbench.core.vocab import ORDER

    return _names((*ORDER, *(("all",) if "," not in incomplete else ())), incomplete, lists=True)


def complete_nccl_tests_collective(ctx, param, incomplete: str) -> list[str]:
    """One collective, measured by commbench or only by nccl-tests (hypercube, ...)."""
    from commbench.core.vocab import NCCL_TESTS_ONLY, ORDER

    return _names((*ORDER, *(c.name for c in NCCL_TESTS_ONLY)), incomplete)


def complete_dtypes(ctx, param, incomplete: str) -> list[str]:
    from commbench.core.vocab import DTYPES

    return _names([d.name for d in DTYPES], incomplete)


def complete_ops(ctx, param, incomplete: str) -> list[str]:
    from commbench.core.vocab import OPS

    return _names(OPS, incomplete)


def complete_bucket_ops(ctx, param, incomplete: str) -> list[str]:
    from commbench.core.vocab import BUCKET_OPS

    return _names(BUCKET_OPS, incomplete)


def complete_models(ctx, param, incomplete: str) -> list[str]:
    from commbench.workloads.zeroschedule import MODELS

    return _names(MODELS, incomplete)


Shape = tuple[int, int, int]  # a transformer's (layers, hidden, vocab)


def model_shape(model: str, layers: int | None, hidden: int | None, vocab: int | None) -> tuple[Shape, str]:
    """(layers, hidden, vocab) and the shape's name, from --model or --layers/--hidden/--vocab."""
    from commbench.workloads.zeroschedule import MODELS

    if (layers is None) != (hidden is None):
        raise BadInput("--layers and --hidden go together: pass both for a custom shape, or --model")
    if layers is not None and hidden is not None:
        return (layers, hidden, vocab or 50257), f"custom-{layers}x{hidden}"
    if model.lower() not in MODELS:
        from commbench.core.vocab import did_you_mean

        hint = did_you_mean(model, [(m, m) for m in MODELS], str.lower)
        raise BadInput(f"unknown --model {model!r}{hint}: use one of {', '.join(MODELS)}, or --layers/--hidden")
    shape = MODELS[model.lower()]
    return (shape[0], shape[1], vocab if vocab is not None else shape[2]), model.lower()
