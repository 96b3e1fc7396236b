"""The change-rate estimator of Cho & Garcia-Molina (ACM TOIT 2003) and the next interval, their
freshness-optimal revisit rule (ACM TODS 2003)."""

from __future__ import annotations

import math
import random

import pytest

from crawler_tasks.web.change_rate import change_rate, next_interval, optimal_interval

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
    ("target", "x"),
    [
        # Solutions of 1 - (1 + x) e^-x = target (Newton's method at 40 digits, offline).
        (0.01, 0.14855474025326595),
        (0.1, 0.53181160838961202),
        (0.5, 1.67834699001666065),
        (0.9, 3.88972016986742906),
    ],
)
def test_optimal_interval_table(target: float, x: float) -> None:
    """Cho & Garcia-Molina (TODS 2003): the interval where one more revisit a second buys
    ``price`` of freshness, 1 - (1 + x) e^-x = price * rate, x = rate * interval."""
    assert optimal_interval(rate=1.0, price=target) == pytest.approx(x, rel=1e-9)
    assert optimal_interval(rate=1 / DAY, price=target * DAY) == pytest.approx(x * DAY, rel=1e-9)


def test_optimal_interval_leaves_pages_no_revisit_pays_for() -> None:
    assert optimal_interval(rate=0.0, price=600.0) == math.inf  # never changes
    assert optimal_interval(rate=1 / 600, price=600.0) == math.inf  # price * rate = 1
    # Slow pages: the interval grows as the inverse square root of the rate, sqrt(2 mu / rate).
    slow = optimal_interval(rate=1 / (365 * DAY), price=600.0)
    assert slow == pytest.approx(math.sqrt(2 * 600 * 365 * DAY), rel=0.01)
    # The shortest interval is for a rate in between (~80 a day here, for 144 a day at most):
    # pages changing faster wait longer, as do slower ones.
    by_rate = [optimal_interval(rate=k / DAY, price=600.0) for k in (1, 10, 80, 120, 143)]
    assert by_rate[0] > by_rate[1] > by_rate[2] < by_rate[3] < by_rate[4]


@pytest.mark.parametrize(
    ("visits", "changes", "interval", "expected"),
    [
        (0, 0, DAY, 3600.0),  # nothing known yet: the schedule's pace
        (10, 0, DAY, 30 * DAY),  # never changed: the longest
        # Daily visits, min_interval 1 h: the price of a request is 0.15 h (540 s).
        (10, 10, DAY, 5932.0308),  # changed every visit: log(21) a day at least, ~1.6 h
        (10, 5, DAY, 12388.2979),  # 0.65 changes a day: ~3.4 h
        (10, 1, DAY, 30900.2197),  # 0.1 a day: ~8.6 h
        # Changed on each of 10 visits 10 min apart: > 5 changes an hour, no hourly revisit
        # pays for itself (price * rate >= 1): left at the longest.
        (10, 10, 600.0, 30 * DAY),
    ],
)
def test_next_interval_table(visits: int, changes: int, interval: float, expected: float) -> None:
    got = next_interval(visits, changes, interval, min_interval=3600.0, max_interval=30 * DAY)
    assert got == pytest.approx(expected, rel=1e-8)


def test_next_interval_stays_within_the_bounds() -> None:
    # Changed on each of 10 hourly visits: ~31 min by the rule, never below min_interval.
    assert next_interval(10, 10, 3600.0, min_interval=3600.0, max_interval=DAY) == 3600.0
    assert next_interval(3, 0, 3600.0, min_interval=60.0, max_interval=DAY) == DAY


def test_bad_observations_are_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and visits"):
        change_rate(3, 4, DAY)
    with pytest.raises(ValueError, match="positive interval"):
        change_rate(0, 0, DAY)
