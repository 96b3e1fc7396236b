"""The crawler's exceptions. Every failure of a URL is one of these, and its ``reason`` is the
string recorded in ``pages*.jsonl`` and the dead-letter list::

    CrawlerError
    ├── OutputUnavailable            the crawl's output directory cannot be written (disk full,
    │   │                            read-only, permission, I/O error): an environment fault,
    │   │                            never a URL's failure; nothing half-written stays
    │   └── StoreUnavailable         the object store named by ``output`` (s3://) refuses or
    │       │                        cannot be reached: no bucket, bad credentials, down
    │       └── ObjectMissing        no object of that name in the store
    ├── OutputUnreadable             a reader (export, ``Crawl.pages()``) cannot read some
    │                                of the directories a crawl's processes wrote (another
    │                                host's, or gone): no partial answer unless asked for
    ├── ConfigError                  bad settings or crawl options (raised to the caller)
    │   ├── InvalidSeed              a seed URL that cannot be crawled; names the seed
    │   ├── UnknownCrawl             a crawl id Redis does not know (never started, expired)
    │   ├── ScheduleExists           a schedule added under a name already stored
    │   ├── BrokerUnreachable        the broker/state Redis named cannot be used (refused...)
    │   └── RedisFull                Redis at maxmemory cannot hold a new crawl
    ├── RetryableError               worth trying again later: back into the frontier with
    │   │                            back-off and jitter, at most ``max_retries`` times
    │   ├── FetchTimeout             read timeout or total deadline exceeded
    │   │   └── ConnectTimeout       (and Unreachable) timed out connecting to the host
    │   ├── ConnectionFailed         reset, TLS handshake error after connecting
    │   │   └── ConnectFailed        (and Unreachable) refused, no route: no connection
    │   ├── ServerError              5xx, 408 or 429 (carries ``retry_after`` seconds)
    │   ├── WorkerLost               the worker handling the URL died (heartbeat stopped)
    │   ├── RenderFailed             its browser crashed, hung or ran past ``render_deadline``
    │   └── AdmissionPaused          Redis had no room for a page's links for too long: the
    │                                URL goes back to the frontier, no retry spent
    └── PermanentError               final for this URL: recorded, never retried
        ├── HostDown                 the host was down longer than ``max_host_outage``
        ├── BlockedAddress           resolves to a private/loopback/link-local/reserved address
        ├── MissingSecret            an ``env:NAME`` the crawl names is not set on this worker
        ├── UnsupportedScheme        not http(s)
        ├── TooManyRedirects         redirect loop or more hops than ``max_redirects``
        ├── TLSError                 the TLS handshake failed: a certificate that does not
        │                            verify (unknown CA: ``CRAWLER_CA_BUNDLE``; expired;
        │                            another name), or no TLS spoken on that port
        ├── TooLarge                 ``Content-Length`` above ``max_body_bytes``
        ├── BadEncoding              a body its ``Content-Encoding`` cannot decode (bad gzip)
        ├── InvalidURL               not a URL we can normalise
        ├── RenderRefused            its page opened a dialog, a download, a pop-up or left
        │                            for another document while rendering
        └── InternalError            a bug met this URL; recorded so the crawl still finishes

``Unreachable`` marks the failures to connect at all (what a host outage looks like: the host's
circuit breaker counts them, politeness.py); their ``reason`` is their parent's.

``NoWorkers`` is a warning (``warnings.warn``), outside the tree: the call went through, but
nothing will serve what it stored yet. ``PartialOutput`` is one too: a reader asked for what
it can read (``partial=True``) and left out the directories it names.

``details`` (keyword arguments) add context; the fetcher adds ``redirects`` (the hops followed
before the failure) and ``final_url`` (the URL it failed on) to every error it raises.
"""

from __future__ import annotations

#: Characters of a user's input that an error message echoes: enough to recognise it, and a
#: 100,000-character crawl id or seed no longer fills a terminal (100 KB on stderr a line).
SHOWN_INPUT = 100


def shown(value: object, limit: int = SHOWN_INPUT) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with how many were
    left out: every message that echoes user input goes through this."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text) - limit:,} more characters)"


class CrawlerError(Exception):
    reason = "error"

    def __init__(self, message: str = "", **details: object) -> None:
        super().__init__(message or self.reason)
        self.details = details


class ConfigError(CrawlerError, ValueError):
    reason = "config"


class InvalidSeed(ConfigError):
    reason = "invalid_seed"

    def __init__(self, seed: str, why: str) -> None:
        super().__init__(f"invalid seed {shown(seed)}: {why}")
        self.seed = seed
        self.why = why


class UnknownCrawl(ConfigError, KeyError):
    reason = "unknown_crawl"

    def __init__(self, crawl_id: str) -> None:
        super().__init__(f"no crawl {shown(crawl_id)} (never started, or expired)")
        self.crawl_id = crawl_id

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class ScheduleExists(ConfigError):
    """A schedule added under a name already stored: replacing it must be asked for."""

    reason = "schedule_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {shown(name)} exists (--replace to replace it)")
        self.name = name


class BrokerUnreachable(ConfigError):
    """``start_crawl``'s broker does not answer (nothing listening, wrong password, TLS
    mismatch): said in words, as the CLI says it, not as redis-py's ConnectionError."""

    reason = "broker_unreachable"


class NoWorkers(UserWarning):
    """A warning, not an error: ``start_crawl`` stored a crawl while no worker process beats
    on its Redis. Starting workers later is a real way to run (they pick the crawl up), so the
    crawl is kept; but a newcomer's crawl that nobody serves looked ``running`` without a word
    (issue 50). The CLI starts local workers, or refuses ``--no-wait``, in this case."""


class RedisFull(ConfigError):
    """Redis refuses writes (``maxmemory`` reached) when a crawl is started: nothing stored."""

    reason = "redis_full"


class OutputUnavailable(CrawlerError):
    """Writing the crawl's files failed for a reason of the disk, not of the URL (ENOSPC,
    EDQUOT, EROFS, EACCES, EIO...). The writer has put each file back as it was before the
    failed record (worker/output/files.py); the record waits in Redis until it can be written."""

    reason = "output_unavailable"

    def __init__(self, directory: str, why: str) -> None:
        super().__init__(f"{why} at {directory}")
        self.directory = directory
        self.why = why


class StoreUnavailable(OutputUnavailable):
    """The object store an ``output`` of ``s3://BUCKET/PREFIX`` names cannot be used now:
    ``directory`` is its URL, ``why`` one line that never holds a secret (state/objects/)."""

    reason = "store_unavailable"


class ObjectMissing(StoreUnavailable):
    """No object of that name (a reader asked for one that is not there, or not yet)."""

    reason = "object_missing"


class OutputUnreadable(CrawlerError):
    """Some of the directories where a crawl's processes wrote its files (each process notes
    its own: state/output_places.py) cannot be read here: another host's, or no longer there.
    ``unread``: one line each ("DIR on HOST: why"). A reader never answers with part of the
    crawl without saying so; ``partial=True`` (``--partial``) reads the rest."""

    reason = "output_unreadable"

    def __init__(self, crawl_id: str, unread: list[str]) -> None:
        super().__init__(
            f"crawl {crawl_id}: {len(unread)} of its output directories cannot be read here: "
            + "; ".join(unread)
        )
        self.unread = unread


class PartialOutput(UserWarning):
    """A reader asked for what it can read (``partial=True``) left out the directories named."""


class RetryableError(CrawlerError):
    reason = "retryable"
    retry_after: float | None = None


class FetchTimeout(RetryableError):
    reason = "timeout"


class ConnectionFailed(RetryableError):
    reason = "connection_error"


class Unreachable(RetryableError):
    """Not one byte exchanged: the host could not be connected to (refused, no such name,
    connect timeout). A mixin of :class:`ConnectTimeout` and :class:`ConnectFailed`."""


class ConnectTimeout(Unreachable, FetchTimeout):
    reason = "timeout"


class ConnectFailed(Unreachable, ConnectionFailed):
    reason = "connection_error"


class ServerError(RetryableError):
    reason = "server_error"

    def __init__(self, status: int, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


class WorkerLost(RetryableError):
    reason = "worker_lost"


class RenderFailed(RetryableError):
    reason = "render_failed"


class AdmissionPaused(RetryableError):
    """Redis stayed too full to admit a page's links (``admission_wait``): the page's URL is
    handed back to the frontier (fetched again once there is room), never failed for it."""

    reason = "admission_paused"


class PermanentError(CrawlerError):
    reason = "failed"


class HostDown(PermanentError):
    reason = "host_down"


class BlockedAddress(PermanentError):
    reason = "blocked_address"


class MissingSecret(PermanentError):
    """A crawl names an environment variable (``env:NAME``) this worker does not have."""

    reason = "missing_secret"


class UnsupportedScheme(PermanentError):
    reason = "unsupported_scheme"


class TooManyRedirects(PermanentError):
    reason = "too_many_redirects"


class TLSError(PermanentError):
    """The same handshake would fail the same way: recorded, not retried (and not a host
    outage: the host answered). The message is OpenSSL's, without its codes:
    ``certificate verify failed: unable to get local issuer certificate``."""

    reason = "tls_error"


class TooLarge(PermanentError):
    reason = "too_large"


class BadEncoding(PermanentError):
    reason = "bad_encoding"


class InvalidURL(PermanentError, ValueError):
    """Not an absolute http(s) URL we can normalise (raised by ``urls.normalize``)."""

    reason = "invalid_url"


class RenderRefused(PermanentError):
    reason = "render_refused"


class InternalError(PermanentError):
    """An unexpected exception while handling a URL (a bug): the URL still gets a final state."""

    reason = "internal_error"
