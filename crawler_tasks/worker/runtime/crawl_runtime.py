"""What one crawl needs of this worker process beside its store: its request profile, the
fetcher as the crawl asks for it (each request announced: ``request_started``), its robots.txt
cache, its output files and WARC writing.
Built next to the crawl's :class:`~crawler_tasks.state.store.CrawlStore` and cached with it
(worker/runtime/context.py), so nothing that runs a crawl passes its options around again."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...state.options import CrawlOptions
from ...state.output_places import Written
from ...state.robots_cache import RobotsCache
from ...state.validators import Recrawl
from ...web.fetcher import Fetcher, Response
from ...web.profile import RequestProfile
from ..output.archive_fence import ArchiveFence
from ..output.files import CrawlOutput
from ..output.outputs import Outputs
from ..output.revisits import write_capture
from ..output.warc import truncation
from ..process.outage import REDIS_UNAVAILABLE

log = logging.getLogger(__name__)

#: Content types whose responses every crawl writes to its WARC (``warc_non_html`` adds others).
WARC_HTML = ("text/html", "application/xhtml+xml")


class CrawlRuntime:
    def __init__(
        self,
        opts: CrawlOptions,
        profile: RequestProfile,
        fetcher: Fetcher,
        robots: RobotsCache,
        outputs: Outputs,
        place: tuple[str, str, dict[str, str] | None, str, Callable[[Written], None] | None],
        announce: Callable[..., None],
    ) -> None:
        self.opts = opts
        #: How the crawl requests (also the key of its robots.txt cache).
        self.profile = profile
        self.fetcher = fetcher
        self.robots = robots
        #: This process's open outputs, and the crawl's place among them (Outputs.get's
        #: crawl id, root, warcinfo fields, s3:// store, where it is noted): asked at each write, since the
        #: outputs close the least recent crawl's files past their bound and open them again.
        self._outputs, self._place = outputs, place
        #: ``request_started`` for a URL (``announce(url=...)``): the event and signal.
        self._announce = announce
        #: A write of this crawl's output failed in this process and none succeeded since
        #: (recorder.write_record clears the crawl's output problem on the next success).
        self.output_failing = False

    def fetch(self, url: str, follow: Callable[[str], str | None], extra: dict) -> Response:
        """GET ``url`` as the crawl asks: its user agent, request settings, limits and
        address policy; ``extra``: more headers (a recrawl's validators). Announced first
        (``request_started``): the event says when the request began, so it goes with the
        request, not with what is written of it once the lease is back."""
        self._announce(url=url)
        return self.fetcher.get(url, follow=follow, **self.profile.fetch_args(extra))

    def output(self) -> CrawlOutput:
        """The crawl's output files in this process."""
        return self._outputs.get(*self._place)

    def write_warc(
        self,
        response: Response,
        recrawl: Recrawl | None = None,
        counters: dict[str, int] | None = None,
        fence: ArchiveFence | None = None,
    ) -> str | None:
        """The response's WARC records; the response (or revisit) record's id (None: not
        written). In a schedule's run (``recrawl``), an unchanged page is a revisit record,
        added to ``counters`` (the URL's final counters: counted once, with its record).
        ``fence``: the URL's place in the archive (one response record per URL and crawl)."""
        if not self.opts.warc_non_html and response.content_type not in WARC_HTML:
            return None
        if recrawl is not None:
            headers = self.profile.recorded_headers()
            written = write_capture(self.output(), recrawl.captures, response, headers, fence)
            if counters is not None:
                counters.update(written.counters())
            return written.record_id
        return self.output().warc(
            response.final_url,
            response.status,
            "",
            response.raw_headers,
            response.archived,
            self.profile.recorded_headers(),
            http_version=response.http_version,
            ip=response.ip,
            warc_headers=truncation(response.truncated),
            fence=fence,
            coded=response.coded,
        )


def robots_getter(
    fetcher: Fetcher, profile: RequestProfile
) -> Callable[[str], tuple[int | None, str | None, bytes]]:
    """How a robots.txt cache of ``profile`` requests: (status, redirect target, body), or
    (None, None, b"") when robots.txt could not be had."""

    def get(url: str) -> tuple[int | None, str | None, bytes]:
        try:
            resp = fetcher.get(url, **profile.robots_args())
        except REDIS_UNAVAILABLE:  # the send gate could not be asked: Redis's, not the host's
            raise
        except Exception as exc:  # any failure to get robots.txt means "unreachable"
            log.info("robots.txt %s unreachable: %s", url, exc)
            reason = getattr(exc, "reason", type(exc).__name__)
            return None, f"{reason}: {exc}"[:300], b""
        location = resp.redirects[-1][1] if resp.redirects else None
        return resp.status, location, resp.body

    return get
