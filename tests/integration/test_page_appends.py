"""A page record's commit rides with the next page's finish (worker/output/page_appends.py): one
round trip a page instead of two, and the copy asked about is still the last in the file
when its answer comes, so a copy taken over meanwhile is truncated at the file's end."""

from __future__ import annotations

import time

from crawler_tasks import start_crawl
from crawler_tasks.state.formats import Unwritten
from crawler_tasks.worker.output.page_appends import HANDOFF_WAIT
from crawler_tasks.worker.output.read import read_pages
from crawler_tasks.worker.visit.outcome import Final
from crawler_tasks.worker.visit.recorder import _finish_and_append
from crawler_tasks.worker.visit.trip import Visit


def _released(settings, driver, n):  # type: ignore[no-untyped-def]
    seeds = [f"http://127.0.0.{90 + i}/p" for i in range(n)]
    crawl = start_crawl(seeds, settings=settings, allow_private_networks=True)
    store = driver.ctx.store(crawl.id)
    entries = store.frontier.release_all(10, 180).entries
    assert sorted(url for _d, _depth, url in entries) == sorted(seeds)
    return crawl, store, sorted(seeds)


def _finish(driver, store, url):  # type: ignore[no-untyped-def]
    """finish.lua and the append of ``url``'s record, as the recorder does them: finish's
    answer and the append's pending commit (page_appends.PendingPage; None: not appended)."""
    visit = Visit.at(driver.ctx, store, url, 0)
    left, kept = _finish_and_append(visit, Final(url, 0, status=200).record(), {}, None)
    return left, None if kept is None else kept.args[0]  # partial(out.pages.wait, mine)


def test_a_page_commit_rides_with_the_next_finish(settings, driver):  # type: ignore[no-untyped-def]
    crawl, store, (a, b) = _released(settings, driver, 2)
    left, mine_a = _finish(driver, store, a)
    assert left == 1 and mine_a is not None
    assert not mine_a.done.is_set() and store.unwritten.get(a) is not None  # not asked yet
    left, mine_b = _finish(driver, store, b)
    # b's finish carried a's commit: answered without a's writer asking it.
    assert left == 0 and mine_a.done.is_set() and mine_a.answer() is True
    assert store.unwritten.get(a) is None and store.unwritten.get(b) is not None
    out = driver.ctx.crawl_runtime(store).output()
    started = time.monotonic()
    assert out.pages.wait(mine_b) is True  # nobody carries it: asked alone, after a wait
    assert time.monotonic() - started >= HANDOFF_WAIT * 0.9
    assert store.unwritten.get(b) is None
    assert [r["url"] for r in read_pages(out.dir)] == [a, b]


def test_a_carried_commit_undoes_a_copy_taken_over(settings, driver):  # type: ignore[no-untyped-def]
    """a's writer froze after its append; a sweep claimed a's record meanwhile (its fence
    names another file). The next writer's finish carries a's commit: MOVED, so a's copy is
    cut at the file's end and b's record goes where a's began."""
    crawl, store, (a, b) = _released(settings, driver, 2)
    _left, mine_a = _finish(driver, store, a)
    assert mine_a is not None
    ea = store.unwritten.get(a)
    out = driver.ctx.crawl_runtime(store).output()
    claimed = Unwritten(ea.rid, "/elsewhere/pages-other-1.jsonl", time.time(), ea.record)
    assert store.unwritten.claim(a, ea, claimed)
    _left, mine_b = _finish(driver, store, b)
    assert mine_b is not None
    assert mine_a.done.is_set() and mine_a.answer() is False
    assert out.pages.wait(mine_b) is True
    assert [r["url"] for r in read_pages(out.dir)] == [b]
    assert store.unwritten.get(a) is not None  # the claimer writes it
