"""Exception types and the exit codes they map to (docs/ARCHITECTURE.md, "Exit codes").

0 ok; 1 the measured answer is bad (wrong results, a regression); 2 bad input or usage;
3 runtime failure (rank lost, timeout, backend error) with what was measured kept.
"""

EXIT_OK = 0
EXIT_BAD_RESULT = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class CommbenchError(Exception):
    exit_code = EXIT_RUNTIME


class BadInput(CommbenchError):
    """The user asked for something impossible; the message names the problem and the fix."""

    exit_code = EXIT_USAGE


class RuntimeFailure(CommbenchError):
    """A rank, the backend or the network failed while measuring."""

    exit_code = EXIT_RUNTIME


class Inconclusive(CommbenchError):
    """The inputs are sound but hold too little for a verdict (exit 3, as compare's "inconclusive")."""

    exit_code = EXIT_RUNTIME
