"""One place settles a URL (worker/visit/settle.py): whatever branch a fetch takes, its host's lease
comes back exactly once, so the host's next URL is released without waiting for the lease's
expiry. In-process against the real Redis and the real pipeline; the fetcher is replaced by
a failure nobody wrote a branch for."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.errors import PermanentError, RetryableError, Unreachable
from crawler_tasks.state.formats import LeaseEnd
from crawler_tasks.state.politeness import Lease
from crawler_tasks.web.fetcher import Response
from crawler_tasks.worker.runtime.context import Context
from crawler_tasks.worker.runtime.handoff import Publisher
from crawler_tasks.worker.visit import fetch_step, pipeline, settle
from crawler_tasks.worker.visit.outcome import Decision, Next

HOST = "127.0.0.48"
#: Longer than any test: a lease that comes back came back because it was returned.
LEASE_SECONDS = 600


# Failures that no branch of the fetch step names: each is a class written for this test.
class NovelBug(Exception):
    """Not a CrawlerError at all: a bug."""


class NovelRetryable(RetryableError):
    reason = "novel_retryable"


class NovelPermanent(PermanentError):
    reason = "novel_permanent"


class NovelUnreachable(Unreachable):
    reason = "novel_unreachable"


@pytest.fixture
def context(settings) -> Iterator[Context]:  # type: ignore[no-untyped-def]
    ctx = Context(settings, Publisher(), lambda *a: None)
    yield ctx
    ctx.close()


def two_urls(settings):  # type: ignore[no-untyped-def]
    """A crawl of two URLs of one host, one request at a time; the first released."""
    seeds = [f"http://{HOST}:9/a", f"http://{HOST}:9/b"]
    crawl = start_crawl(
        seeds,
        settings=settings,
        allow_private_networks=True,
        obey_robots=False,
        concurrency=1,
        rate=math.inf,
    )
    ((_, depth, url),) = crawl.store.frontier.release_all(10, LEASE_SECONDS).entries
    assert crawl.client.zcard(crawl.ck.lease(HOST)) == 1
    return crawl, url, depth


def assert_lease_back(crawl, slow: float) -> None:  # type: ignore[no-untyped-def]
    """The lease zset is empty, the host's next URL is released at once (concurrency 1), and
    the lease was returned once: done.lua's slow-down moved once (an error twice: 2.25)."""
    assert crawl.client.zcard(crawl.ck.lease(HOST)) == 0
    assert float(crawl.client.hget(crawl.ck.domain(HOST), "slow")) == slow
    assert len(crawl.store.frontier.release_all(10, LEASE_SECONDS).entries) == 1


def raising(exc: BaseException) -> Callable[..., Response]:
    def get(*args: object, **kwargs: object) -> Response:
        raise exc

    return get


@pytest.mark.parametrize(
    ("failure", "result", "slow"),
    [
        (NovelBug("a bug"), "internal_error", 1.5),
        (NovelRetryable("new"), "retry", 1.5),
        (NovelPermanent("new"), "novel_permanent", 1.0),
        (NovelUnreachable("new"), "retry", 1.0),  # "down": the circuit counts it, no slow-down
    ],
)
def test_a_failure_nobody_wrote_a_branch_for_returns_the_lease(  # type: ignore[no-untyped-def]
    settings, context, monkeypatch, failure, result, slow
):
    crawl, url, depth = two_urls(settings)
    monkeypatch.setattr(context.fetcher, "get", raising(failure))
    assert pipeline.fetch_url(context, crawl.id, url, depth) == result
    assert_lease_back(crawl, slow)


def test_a_new_decision_is_settled_by_the_one_settle_step(settings, context, monkeypatch):  # type: ignore[no-untyped-def]
    """A new outcome of the fetch step (here: a requeue of every URL, the lease ending as a
    throttle) needs no release of its own."""
    crawl, url, depth = two_urls(settings)

    def new_outcome(*args: object) -> Decision:
        return Decision(Next.REQUEUE, LeaseEnd.THROTTLE)

    monkeypatch.setattr(fetch_step, "_request", new_outcome)
    assert pipeline.fetch_url(context, crawl.id, url, depth) == "retry"
    assert_lease_back(crawl, 2.0)
    assert crawl.stats.outstanding() == 2  # requeued, not final


def test_a_bug_after_the_lease_came_back_does_not_return_it_again(settings, context, monkeypatch):  # type: ignore[no-untyped-def]
    """The response's lease ends "ok" before what the response becomes; a bug there gives the
    URL its final state and leaves the lease alone (no second done.lua: no slow-down)."""
    crawl, url, depth = two_urls(settings)
    ok = Response(url, url, 200, {}, "text/plain", b"x", False, [], 0.0, HOST, [], "HTTP/1.1")
    monkeypatch.setattr(context.fetcher, "get", lambda *a, **k: ok)
    monkeypatch.setattr(settle, "respond", raising(NovelBug("late")))
    assert pipeline.fetch_url(context, crawl.id, url, depth) == "internal_error"
    assert_lease_back(crawl, 1.0)


def test_lease_is_returned_once(settings, context):  # type: ignore[no-untyped-def]
    crawl, url, _depth = two_urls(settings)
    polite = crawl.store.politeness
    lease = polite.lease(url, HOST)
    lease.release(LeaseEnd.ERROR)
    assert lease.release(LeaseEnd.ERROR).slow == 1.0  # a no-op: the neutral reply
    assert float(crawl.client.hget(crawl.ck.domain(HOST), "slow")) == 1.5

    # Leaving the block unreturned returns it as an error, also on an exception; an
    # exception of keep_on (Redis away: the task's rerun returns it) keeps it.
    [url] = [u for _, _, u in crawl.store.frontier.release_all(10, LEASE_SECONDS).entries]
    with pytest.raises(KeyError), polite.lease(url, HOST, keep_on=(KeyError,)) as kept:
        raise KeyError("redis away")
    assert kept.held and crawl.client.zcard(crawl.ck.lease(HOST)) == 1
    with pytest.raises(NovelBug), polite.lease(url, HOST) as lease:
        raise NovelBug("in the block")
    assert lease.ended is LeaseEnd.ERROR and crawl.client.zcard(crawl.ck.lease(HOST)) == 0
    assert isinstance(lease, Lease)


def test_a_crawl_runtime_is_built_with_its_store(settings, context):  # type: ignore[no-untyped-def]
    """One frontier per store, admission's writes through the client that waits for room;
    the crawl's runtime beside it, whose request profile keys the robots.txt cache."""
    from crawler_tasks.worker.runtime.room import PatientClient

    same = {"settings": settings, "allow_private_networks": True, "user_agent": "a/1"}
    one = start_crawl([f"http://{HOST}:9/"], **same)
    two = start_crawl([f"http://{HOST}:9/"], **same)
    other = start_crawl([f"http://{HOST}:9/"], **{**same, "user_agent": "b/1"})
    store = context.store(one.id)
    assert store is not None and store.admission.frontier is store.frontier
    assert isinstance(store.admission.client, PatientClient)
    assert store.frontier.admit_client is store.admission.client
    assert store.frontier.client is context.client  # the release fails at once, never waits
    runtimes = [context.crawl_runtime(context.store(c.id)) for c in (one, two, other)]  # type: ignore[arg-type]
    assert runtimes[0] is context.crawl_runtime(store)
    assert runtimes[0].profile == runtimes[1].profile != runtimes[2].profile
    assert runtimes[0].robots is runtimes[1].robots is not runtimes[2].robots
    assert runtimes[0].profile.request_headers({})["User-Agent"] == "a/1"
