"""bench/adaptive.py's site and schedules without workers, Redis or HTTP: a model for trying
interval rules in seconds, and for the bound on what any rule could save from a cold start.
Not a measurement of the crawler (bench/adaptive.py is): it calls the same pure code
(web/change_rate.py's ``Visits.due_at``) on the same simulated site, and matches bench/adaptive.py
to the request (seed 1: 2,488 requests, freshness 0.869, from a cold start).

    .venv/bin/python bench/_adaptive_model.py --seeds 6 --warm-days 30 --prices 0.1,0.15,0.2
    .venv/bin/python bench/_adaptive_model.py --seeds 3 --bound

``--bound``: the best, over a grid, of optimistic policies that know a page's true change rate
as soon as one of its visits has found a change (then the freshness-optimal interval for a price
mu), and revisit the pages not yet seen to change on one schedule (first after ``a``, then
growing ``g`` times), as nothing tells those apart; run every ``--adaptive-hours``. Prints the
grid points whose freshness is at least the daily fixed runs' on every seed, most saved first.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import _util
from adaptive import MIX

from crawler_tasks.web import change_rate
from crawler_tasks.web.change_rate import Visits, optimal_interval
from tests.support.recrawl_site import DAY, HOUR, T0, build_site

NEXT_INTERVAL = change_rate.next_interval
#: (state, the page's true rate, now) -> visit now?
Policy = Callable[[dict[str, Any], float, float], bool]


def rates(pages: int) -> list[float]:
    """Each page's true rate, in build_site's order."""
    return [r for r, share in MIX for _ in range(round(pages * share))]


def simulate(args: Any, seed: int, period: float, policy: Policy | None, warm: float) -> tuple:
    """(requests, freshness) over the ``args.days`` after ``warm`` seconds; None: every page
    every run."""
    span = args.days * DAY
    site = build_site(args.pages, warm + span, seed, MIX)
    true = rates(args.pages)
    states: list[dict[str, Any]] = [{} for _ in true]
    held: dict[int, int] = {}
    runs = [T0 + k * period for k in range(int((warm + span) / period))]
    requests, fresh, samples, next_run = 0, 0.0, 0, 0
    for hour in range(int((warm + span) / HOUR)):
        at = T0 + hour * HOUR
        while next_run < len(runs) and runs[next_run] <= at:
            now = runs[next_run]
            for i, state in enumerate(states):
                if state and policy is not None and not policy(state, true[i], now):
                    continue
                version = site.version(i, now)
                changed = i in held and held[i] != version
                held[i] = version
                state["visits"] = state.get("visits", Visits()).observed(now, changed)
                state["seen_change"] = state.get("seen_change", False) or changed
                requests += now >= T0 + warm
            next_run += 1
        if at >= T0 + warm:
            samples += 1
            fresh += sum(held.get(i) == site.version(i, at) for i in range(len(true)))
    return requests, fresh / samples / len(true)


def crawler_rule(args: Any, price: float) -> Policy:
    """web/change_rate.py's own rule, with ``PRICE`` = ``price``."""
    bounds = (args.adaptive_hours * HOUR, args.max_days * DAY)

    rule = functools.partial(NEXT_INTERVAL, price=price)

    def due(state: dict[str, Any], _rate: float, now: float) -> bool:
        change_rate.next_interval = rule  # what Visits.due_at calls, with this price
        return now >= state["visits"].due_at(*bounds)

    return due


def oracle(args: Any, first: float, growth: float, mu: float) -> Policy:
    low, high = args.adaptive_hours * HOUR, args.max_days * DAY

    def due(state: dict[str, Any], rate: float, now: float) -> bool:
        v = state["visits"]
        if state["seen_change"]:
            interval = min(high, max(low, optimal_interval(rate, mu)))
        elif not v.visits:
            interval = first
        else:
            interval = min(high, max(low, growth * (v.last - v.before_last)))
        return now >= v.last + interval * (1 - change_rate.SLACK)

    return due


def main() -> int:
    ap = _util.parser(__doc__)
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--days", type=float, default=10)
    ap.add_argument("--warm-days", type=float, default=0)
    ap.add_argument("--fixed-hours", type=float, default=24)
    ap.add_argument("--adaptive-hours", type=float, default=12)
    ap.add_argument("--max-days", type=float, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--prices", default="0.15", help="PRICE values to try, comma-separated")
    ap.add_argument("--bound", action="store_true", help="the optimistic bound (cold start)")
    args = ap.parse_args()
    seeds, warm, period = range(1, args.seeds + 1), args.warm_days * DAY, args.adaptive_hours * HOUR
    fixed = [simulate(args, s, args.fixed_hours * HOUR, None, warm) for s in seeds]
    if args.bound:
        grid = itertools.product([12, 24, 36, 48], [1.0, 1.25, 1.5, 2.0], [0.5, 1, 2, 3])
        policies = {
            f"a={a}h g={g} mu={m}h": oracle(args, a * HOUR, g, m * HOUR) for a, g, m in grid
        }
    else:
        policies = {f"PRICE={p}": crawler_rule(args, float(p)) for p in args.prices.split(",")}
    rows = []
    for name, policy in policies.items():
        got = [simulate(args, s, period, policy, warm) for s in seeds]
        fewer = [1 - g[0] / f[0] for g, f in zip(got, fixed, strict=True)]
        gain = [g[1] - f[1] for g, f in zip(got, fixed, strict=True)]
        rows.append(
            {
                "policy": name,
                "fewer_min": min(fewer),
                "fewer_max": max(fewer),
                "gain_min": min(gain),
                "gain_mean": sum(gain) / len(gain),
                "gain_max": max(gain),
            }
        )
    if args.bound:
        rows = sorted((r for r in rows if r["gain_min"] >= 0), key=lambda r: -r["fewer_min"])[:5]
    _util.emit(args, {"rows": rows}, [_util.table("Against daily fixed runs", rows)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
