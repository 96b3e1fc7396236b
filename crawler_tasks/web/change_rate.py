"""How often a page changes, estimated from "changed or not" observations, and when to visit
it next (adaptive recrawls, issue 35).

The estimator is the bias-reduced one of J. Cho and H. Garcia-Molina, "Estimating frequency of
change", ACM Transactions on Internet Technology 3(3), 2003, section 4 (regular accesses): a
page visited ``n`` times at a regular interval ``I``, a change detected on ``X`` of them, changes
as a Poisson process of rate lambda; then

    r = -log((n - X + 0.5) / (n + 0.5)),   lambda = r / I

The naive X / (n I) underestimates lambda, as a visit sees at most one change however many
happened since the last one; the +0.5 terms keep the estimate finite when every visit found a
change (X = n) and make it nearly unbiased. Recrawls are not exactly regular (a run takes time,
a run may skip a page that is not due), so ``I`` is the mean interval between the visits.

The next interval is the freshness-optimal one of J. Cho and H. Garcia-Molina, "Effective page
refresh policies for Web crawlers", ACM Transactions on Database Systems 28(4), 2003, section 5:
a page revisited every ``I`` is fresh (its copy equals the live page) a share
F = (1 - e^-x) / x of the time, x = lambda I; the revisit frequencies that give the most
freshness for the requests spent are those where one more revisit a second buys the same
freshness on every page, dF/df = mu, which for a page of rate lambda is

    1 - (1 + x) e^-x = mu lambda,   I = x / lambda

``mu`` (seconds) is the price of a request: here ``PRICE`` times the schedule's
``min_interval``, so the rule depends only on lambda * min_interval and a schedule run every
hour behaves as one run every day, scaled. Unlike a fixed chance of a change per visit (the
previous rule, which spent most requests on the pages changing fastest), the interval grows
with lambda's inverse square root for slow pages (I ~ sqrt(2 mu / lambda)), and a page that
changes so often that no revisit pays (mu lambda >= 1) is left at ``max_interval``.
``PRICE`` = 0.15 was chosen on bench/adaptive.py's simulated site (0.1 .. 0.2 tried, six seeds;
see bench/README.md): the largest that stays fresher than daily fixed runs on every seed from a
cold start (a higher one saves more requests and costs freshness).
Intervals are kept within the schedule's ``[min_interval, max_interval]``; a page never seen
to change drifts to ``max_interval``. An estimate from few observations is noisy (no change
seen in one visit gives lambda = 0), so an interval grows by at most ``GROWTH`` times the last
one, as Nutch's and StormCrawler's adaptive schedules grow theirs step by step; it shrinks at
once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The price of a request, as a share of ``min_interval`` (see the module's docstring).
PRICE = 0.15
#: At most this many times the last interval between two visits (see the module's docstring).
GROWTH = 2.0
#: A page is due this share of its interval early: runs of a schedule start a little before
#: or after their period (beat's tick, a queue), and a page due at 24 h must not wait for the
#: next run because this one started at 23 h 59 min.
SLACK = 0.1


def change_rate(visits: int, changes: int, interval: float) -> float:
    """Changes per second of a page ``visits`` times observed (each observation a visit after
    the first) ``interval`` seconds apart on average, a change found on ``changes`` of them."""
    if visits <= 0 or interval <= 0:
        raise ValueError("change_rate needs at least one observation over a positive interval")
    if not 0 <= changes <= visits:
        raise ValueError(f"changes ({changes}) must be between 0 and visits ({visits})")
    r = -math.log((visits - changes + 0.5) / (visits + 0.5))
    return r / interval


def optimal_interval(rate: float, price: float) -> float:
    """The freshness-optimal revisit interval of a page changing ``rate`` times a second when
    a request costs ``price`` seconds of freshness (see the module's docstring); ``math.inf``
    for a page that never changes or changes too often for a revisit to pay."""
    target = price * rate
    if rate <= 0 or target >= 1:
        return math.inf
    # 1 - (1 + x) e^-x rises from 0 to 1 as x goes from 0 to infinity: bisect for x.
    lo, hi = 0.0, 1.0
    while 1 - (1 + hi) * math.exp(-hi) < target:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 - (1 + mid) * math.exp(-mid) < target else (lo, mid)
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2 / rate


def next_interval(
    visits: int,
    changes: int,
    interval: float,
    min_interval: float,
    max_interval: float,
    price: float = PRICE,
) -> float:
    """Seconds until a page should be visited again (see the module's docstring); before any
    observation, ``min_interval`` (nothing is known: visit at the schedule's pace)."""
    if visits <= 0 or interval <= 0:
        return min_interval
    best = optimal_interval(change_rate(visits, changes, interval), price * min_interval)
    return min(max_interval, max(min_interval, best))


@dataclass(frozen=True)
class Visits:
    """What a URL's visits tell the estimator: observations (visits after the first), those
    that found a change, and the times (seconds) of the first and last visits and of the one
    before the last (0: none)."""

    visits: int = 0
    changes: int = 0
    first: float = 0.0
    last: float = 0.0
    before_last: float = 0.0

    def observed(self, now: float, changed: bool) -> Visits:
        """After a visit at ``now`` (a run's time) that found the page ``changed`` or not; a
        second visit in the same run (a retry) is not a new observation."""
        if not self.last:
            return Visits(0, 0, now, now, 0.0)
        if now <= self.last:
            return self
        return Visits(self.visits + 1, self.changes + changed, self.first, now, self.last)

    def due_at(self, min_interval: float, max_interval: float) -> float:
        """When the page is due again (0: no visit yet, due now)."""
        if not self.last:
            return 0.0
        if not self.visits:
            return self.last + min_interval
        mean = (self.last - self.first) / self.visits
        interval = next_interval(self.visits, self.changes, mean, min_interval, max_interval)
        last_gap = self.last - self.before_last
        interval = max(min_interval, min(interval, GROWTH * last_gap))
        return self.last + interval * (1.0 - SLACK)


#: A host's sitemap ``lastmod`` is trusted once this many visits checked it ...
LASTMOD_CHECKS = 20
#: ... and at least this share of them agreed with what the visit found.
LASTMOD_ACCURACY = 0.95


def lastmod_agrees(lastmod: float, previous_visit: float, changed: bool) -> bool:
    """Whether a sitemap's lastmod told a visit's outcome: a lastmod after the previous visit
    says the page changed since, one before it that it did not."""
    return (lastmod > previous_visit) == changed


def lastmod_trusted(checks: int, agreed: int) -> bool:
    """A host's lastmods are used for due-ness once proven accurate (see the constants)."""
    return checks >= LASTMOD_CHECKS and agreed >= LASTMOD_ACCURACY * checks
