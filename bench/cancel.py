"""What a big cancel costs (issue 50 item 8): a crawl of ``--seeds`` pages of one host (default
100,000, at ``--rate`` req/s: nearly all of them pending) is cancelled while a neighbour
crawl of a ``--pages`` site of its own host runs at ``--neighbour-rate`` req/s on the same
workers (the README's layout: two fetch processes, one parse process).

Printed: the seconds from ``cancel()`` to the crawl's final status (``settled_s``), the
statuses read every 50 ms meanwhile, whether its counts are exact (every admitted URL once a
record or once counted cancelled), and the neighbour's pages/s over the ``--window`` seconds
before the cancel and the ``--window`` seconds from it (``during``: a cancel that holds the
dispatchers up shows as a drop here), with their ratio."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import _util

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers, private_redis
from tests.support.big_cancel import cancel_and_watch, done_at, pace, page, start_big
from tests.support.sitegen import SiteServer, running_sites
from tests.support.waiting import wait_until


def run(args, broker: str, out: Path) -> dict:  # type: ignore[no-untyped-def, type-arg]
    settings = load(env={}, broker_url=broker, output_dir=str(out))
    with (
        SiteServer(address="127.0.0.95", extra_routes={"/p": page}) as site,
        running_sites(["127.0.0.96"], args.pages, 4) as (_graph, (small,)),
        local_workers(
            broker,
            broker,
            fetchers=2,
            fetch_threads=8,
            parsers=1,
            extra_env={"CRAWLER_OUTPUT_DIR": str(out)},
        ),  # fmt: skip
    ):
        t0 = time.monotonic()
        big = start_big(settings, site.base_url, args.seeds, rate=args.rate)
        admitted_s = time.monotonic() - t0
        wait_until(lambda: big.progress()["done"] >= 20, timeout=120)
        neighbour = start_crawl(
            [small.base_url + "/"], settings=settings, allow_private_networks=True,
            rate=args.neighbour_rate,
        )  # fmt: skip
        wait_until(lambda: neighbour.progress()["done"] >= 5, timeout=60)
        start = done_at(neighbour)
        time.sleep(args.window)
        at_cancel = done_at(neighbour)
        _util.log(args, f"cancelling a crawl of {args.seeds} seeds")
        cancelled = cancel_and_watch(big, timeout=args.timeout)
        time.sleep(max(0.0, args.window - (time.monotonic() - at_cancel[0])))
        after = done_at(neighbour)
        neighbour.wait(timeout=args.timeout)
    c = cancelled.summary["counters"]
    before_s, during_s = pace(start, at_cancel), pace(at_cancel, after)
    return {
        "seeds": args.seeds,
        "admit_s": round(admitted_s, 2),
        "settled_s": round(cancelled.settled_s, 2),
        "statuses": " > ".join(dict.fromkeys(cancelled.statuses)),
        "first_pace": cancelled.first["pace"],
        "first_eta": cancelled.first.get("eta_s"),
        "cancelled": c.get("cancelled", 0),
        "records": len(cancelled.records),
        "exact": not cancelled.accounting(),
        "neighbour_before": round(before_s, 2),
        "neighbour_during": round(during_s, 2),
        "during_vs_before": round(during_s / before_s, 2) if before_s else None,
    }


def main() -> None:
    p = _util.parser(__doc__)
    p.add_argument("--seeds", type=int, default=100_000)
    p.add_argument("--rate", type=float, default=20.0, help="the big crawl's req/s")
    p.add_argument("--pages", type=int, default=400, help="the neighbour's site")
    p.add_argument("--neighbour-rate", type=float, default=20.0)
    p.add_argument("--window", type=float, default=5.0, help="seconds of each pace reading")
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()
    if args.seeds < 1 or args.pages < 10 or args.window <= 0 or args.timeout <= 0:
        p.error("--seeds >= 1, --pages >= 10, --window and --timeout > 0")
    with private_redis() as broker, tempfile.TemporaryDirectory(prefix="crawler-cancel-") as out:
        result = run(args, broker, Path(out))
    _util.emit(args, result, [_util.table("a big cancel beside a neighbour crawl", [result])])


if __name__ == "__main__":
    main()
