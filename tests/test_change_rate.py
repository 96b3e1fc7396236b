"""The change-rate estimator of Cho & Garcia-Molina (ACM TOIT 2003) and the next interval."""

from __future__ import annotations

import math
import random

import pytest

from crawler_tasks.web.change_rate import change_rate, next_interval

DAY = 86400.0


@pytest.mark.parametrize(
    ("visits", "changes", "interval", "expected"),
    [
        (10, 0, DAY, 0.0),  # never seen to change
        (10, 5, DAY, -math.log(5.5 / 10.5) / DAY),  # 0.6466 a day, not the naive 0.5
        (10, 10, DAY, math.log(21) / DAY),  # every visit: finite, log(2n + 1)
        (1, 1, 3600.0, math.log(3) / 3600),
        (100, 50, 3600.0, -math.log(50.5 / 100.5) / 3600),
        (4, 1, 7 * DAY, -math.log(3.5 / 4.5) / (7 * DAY)),
    ],
)
def test_estimator_table(visits: int, changes: int, interval: float, expected: float) -> None:
    assert change_rate(visits, changes, interval) == pytest.approx(expected, rel=1e-12)


def test_estimator_is_nearly_unbiased_where_the_naive_one_is_not() -> None:
    """Poisson changes at 1/day, a visit a day for 50 days, 2,000 simulated pages: the mean
    estimate is within 5 % of the true rate, the naive X/(nI) about 37 % below it."""
    rng, rate, n = random.Random(7), 1 / DAY, 50
    estimates, naive = [], []
    for _ in range(2000):
        # A change was found on a visit if at least one happened in the day before it.
        x = sum(rng.random() < 1 - math.exp(-rate * DAY) for _ in range(n))
        estimates.append(change_rate(n, x, DAY))
        naive.append(x / (n * DAY))
    assert sum(estimates) / len(estimates) == pytest.approx(rate, rel=0.05)
    assert sum(naive) / len(naive) == pytest.approx(rate * (1 - math.exp(-1)), rel=0.05)


@pytest.mark.parametrize(
    ("visits", "changes", "expected"),
    [
        (0, 0, 3600.0),  # nothing known yet: the schedule's pace
        (10, 0, 30 * DAY),  # never changed: the longest
        # Changed on each of 10 daily visits: log(21) changes a day at least, ~2.8 h.
        (10, 10, -math.log(0.7) / (math.log(21) / DAY)),
        (10, 1, -math.log(0.7) / (-math.log(9.5 / 10.5) / DAY)),  # ~3.6 days
        (10, 5, -math.log(0.7) / (-math.log(5.5 / 10.5) / DAY)),  # ~0.55 days
    ],
)
def test_next_interval_table(visits: int, changes: int, expected: float) -> None:
    got = next_interval(visits, changes, DAY, min_interval=3600.0, max_interval=30 * DAY)
    assert got == pytest.approx(expected, rel=1e-9)


def test_next_interval_stays_within_the_bounds() -> None:
    # Changed on each of 10 hourly visits: ~14 min by the estimate, never below min_interval.
    assert next_interval(10, 10, 3600.0, min_interval=3600.0, max_interval=DAY) == 3600.0
    assert next_interval(3, 0, 3600.0, min_interval=60.0, max_interval=DAY) == DAY


def test_bad_observations_are_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and visits"):
        change_rate(3, 4, DAY)
    with pytest.raises(ValueError, match="positive interval"):
        change_rate(0, 0, DAY)
