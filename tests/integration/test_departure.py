"""A fetch process leaving the holders of hosts in a warm shutdown (worker/dispatch/departure.py): while
it drains it is routed nothing new and its queue is kept; then it hands back what is still in
its queue, without a retry or a take-back. The real dispatcher's router and a real Celery
publish to a real Redis broker; the leaving process is this test's (the process-level test is
test_dead_process_cleanup.py's)."""

from __future__ import annotations

from crawler_tasks import start_crawl
from crawler_tasks.state import workers
from crawler_tasks.state.formats import Inflight
from crawler_tasks.worker.dispatch.departure import Departure
from crawler_tasks.worker.dispatch.routing import HostRouter
from crawler_tasks.worker.process.app import direct_queue, make_app
from crawler_tasks.worker.process.queues import BrokerView

GONE = "host-gone"


def beat(ctx, worker: str, age: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    """``worker``'s heartbeat, ``age`` seconds old on Redis's clock."""
    ctx.client.hset(ctx.keys.workers, worker, workers.redis_now(ctx.client) - age)


def test_a_leaving_process_is_routed_nothing_and_keeps_its_queue(settings, driver):  # type: ignore[no-untyped-def]
    ctx = driver.ctx
    for worker in ("host-a", "host-b"):
        workers.join(ctx.client, ctx.keys, worker)
        beat(ctx, worker)
        ctx.client.rpush(direct_queue(worker), b"a message")
    router = HostRouter(BrokerView(settings), settings.worker_dead_seconds)
    router.refresh(ctx)
    assert router.holders() == ["host-a", "host-b"]
    workers.depart(ctx.client, ctx.keys, "host-a")
    router.refresh(ctx)
    assert router.holders() == ["host-b"]
    assert ctx.client.llen(direct_queue("host-a")) == 1, "its own to hand back"
    assert not router.lengths({}, {"host-a", "host-b"}), "not taken for a process joining"
    beat(ctx, "host-a", age=settings.worker_dead_seconds + 1)  # killed while leaving
    router.refresh(ctx)
    assert not ctx.client.exists(direct_queue("host-a"))
    assert ctx.client.smembers(ctx.keys.fetchers) == {b"host-b"}
    assert not ctx.client.smembers(ctx.keys.leaving)


def test_a_leaving_process_hands_its_queue_back(settings, driver):  # type: ignore[no-untyped-def]
    urls = [f"http://127.0.1.{i}/" for i in range(1, 7)]
    crawl = start_crawl(urls, settings=settings, allow_private_networks=True, obey_robots=False)
    frontier, ledger = crawl.store.frontier, crawl.store.ledger
    released = frontier.release_all(100, 180, worker="me", holders=(GONE,)).entries
    assert sorted(u for _d, _z, u in released) == urls
    begun = urls[-1]  # its message was taken by another process, which began it
    assert ledger.start(begun, "host-other") == 1
    app = make_app(settings)
    with app.connection_for_write() as conn:
        queue = direct_queue(GONE)
        app.send_task("crawl.fetch", args=(crawl.id, urls[0], 0), queue=queue, connection=conn)
        items = [[u, 0] for u in urls[1:]]
        app.send_task("crawl.fetch_many", args=(crawl.id, items), queue=queue, connection=conn)
    client = crawl.client
    assert client.llen(direct_queue(GONE)) == 2
    workers.join(client, driver.ctx.keys, GONE)

    assert Departure(BrokerView(settings), GONE).end(driver.ctx) == len(urls) - 1

    assert not client.exists(direct_queue(GONE))
    assert not client.sismember(driver.ctx.keys.fetchers, GONE)
    inflight = {
        k.decode(): v.decode() for k, v in client.hgetall(crawl.ck.parts[0].inflight).items()
    }
    assert inflight.keys() == {begun}, "the begun one is left to its process"
    # Back in the frontier at once, their leases refunded: released again now, by anyone.
    again = frontier.release_all(100, 180, worker="me").entries
    assert sorted(u for _d, _z, u in again) == urls[:-1]
    for _d, _z, url in again:
        entry = Inflight.parse(client.hget(crawl.ck.for_url(url).inflight, url).decode())
        assert (entry.stage, entry.worker) == ("r", "me")
        # Counted now for the first time: neither an attempt nor a take-back was spent on it.
        assert (ledger.count_attempt(url), ledger.count_takeback(url)) == (1, 1)
    crawl.cancel()
