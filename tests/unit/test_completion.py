"""Shell completion (README, "Shell completion"): click completes commands and flags; commbench
adds the values of the flags that take a name, and a comma list completes its last item."""

from __future__ import annotations


import pytest
from click.shell_completion import BashComplete

from commbench.cli.app import cli
from commbench.core.vocab import DTYPES, ORDER


def complete(*words: str) -> list[str]:
    *args, incomplete = words
    completer = BashComplete(cli, {}, "commbench", "_COMMBENCH_COMPLETE")
    return [c.value for c in completer.get_completions(args, incomplete)]


@pytest.mark.parametrize("words, expected", [
    (("sweep", "--collective", ""), [*ORDER, "all"]),
    (("sweep", "--collective", "all_"), ["all_reduce", "all_gather", "all_to_all"]),
    (("sweep", "--collective", "all_reduce,re"), ["all_reduce,reduce_scatter", "all_reduce,reduce"]),
    (("sweep", "--collective", "all_reduce,al"), ["all_reduce,all_reduce", "all_reduce,all_gather",
                                                   "all_reduce,all_to_all"]),  # 'all' only alone
    (("sweep", "-d", ""), [d.name for d in DTYPES]),
    (("sweep", "-d", "bf"), ["bfloat16"]),
    (("sweep", "--op", "m"), ["max", "min"]),
    (("buckets", "--op", ""), ["all_reduce", "reduce_scatter"]),
    (("zero", "--model", ""), ["gpt2-125m", "1.3b", "7b"]),
    (("tune", "--model", "7"), ["7b"]),
    (("zero", "-d", "float1"), ["float16"]),
    (("sweep", "--collective", "nope"), []),
    (("nccl-tests", "import", "--collective", "h"), ["hypercube"]),  # nccl-tests' own names too
    (("nccl-tests", "run", "--collective", "all_"), ["all_reduce", "all_gather", "all_to_all"]),
    (("nccl-tests", "run", "--collective", "all_reduce,"), []),  # one collective, not a list
])
def test_flag_values_complete(words, expected):
    assert complete(*words) == expected


def test_commands_and_flags_complete_as_click_does():
    assert complete("sw") == ["sweep"]
    assert "--collective" in complete("sweep", "--coll")
