"""A crawl's render limits as the render worker uses them, built once from the crawl's options
(as scrapy-playwright's ``Config.from_settings`` builds its own): every render worker reads
the crawl's, so two workers started with different environments render a page alike.
``CRAWLER_RENDER_*`` settings are only the defaults of the process that starts a crawl."""

from __future__ import annotations

from dataclasses import dataclass

from .option_checks import render_blocked
from .options import CrawlOptions


@dataclass(frozen=True)
class RenderConfig:
    #: Seconds a page's render may take: load, settle, subrequests and their token waits.
    deadline: float
    #: Subrequests and their bytes per page; past either, the next ones are refused.
    max_subrequests: int
    max_bytes: int
    #: Resource types aborted unrequested (Playwright's names).
    blocked: frozenset[str]

    @classmethod
    def from_options(cls, opts: CrawlOptions) -> RenderConfig:
        return cls(
            deadline=float(opts.render_deadline),
            max_subrequests=opts.render_max_subrequests,
            max_bytes=opts.render_max_bytes,
            blocked=render_blocked(opts.render_block),
        )
