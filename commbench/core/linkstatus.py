"""A pairs link's statuses: the `status` column's values (docs/RESULTS.md), declared once; the
workload that writes them, the control plane that judges a silent peer, and the analysis that
ranks and explains failed links all name them from here (tests/unit/test_statuses_once.py fails on
one written out elsewhere). Null (None) is a link measured with every byte right."""

from __future__ import annotations

WRONG = "wrong"  # measured, but data arrived wrong (the `wrong` column counts the bytes)
UNREACHABLE = "unreachable"  # the peer's host did not answer: a link down, a blackhole route, a dead host
TIMEOUT = "timeout"  # the peer's process exists but did not answer within --timeout: hung, stopped
ERROR = "error"  # the transfer failed: the peer's process is gone, or the backend raised
UNOBSERVED = "unobserved"  # rank 0, cut off from both its ends, never learnt its outcome
NEVER_JOINED = "never joined"  # one end's rank never joined the run (the others went on)

# A link that could not be measured, in the order a roll call judges its silent end.
FAILED = (UNREACHABLE, TIMEOUT, ERROR, UNOBSERVED, NEVER_JOINED)
STATUSES = (WRONG, *FAILED)
