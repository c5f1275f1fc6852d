"""The time_ci column of a row (harness/session.py): the median's CI half-width, or None where it is unknown.
A pairs link that failed has non-finite samples; its row must still be written (it crashed rank 0 once)."""

from __future__ import annotations

import math

import numpy as np

from commbench.harness.session import time_ci


def test_a_finite_sample_gives_its_half_width():
    got = time_ci(np.array([100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 100.1, 99.9, 100.3, 100.0]))
    assert got is not None and 0 < got < 0.02


def test_too_few_or_non_finite_samples_give_none():
    assert time_ci(np.array([])) is None
    assert time_ci(np.array([1.0, 2.0, 3.0])) is None  # under 6: no interval
    assert time_ci(np.array([100.0] * 9 + [math.nan])) is None
    assert time_ci(np.array([100.0] * 9 + [math.inf])) is None
