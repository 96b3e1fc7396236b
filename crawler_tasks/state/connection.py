"""Clients of the crawl-state Redis: a standalone server or a Redis Cluster, told apart by
asking the server (``INFO cluster``), so ``CRAWLER_REDIS_URL`` may name any node of a cluster.

A cluster's URL may name several startup nodes, comma-separated in the host part:
``redis://[user:password@]host:port,host:port,...[/0][?options]`` (the credentials, database
and options apply to every node). redis-py's ``RedisCluster`` is then given them all as
``startup_nodes``: it connects through the first that answers and from then on follows the
cluster's own topology, so a client outlives the loss of any one node it was told of.

Every crawl's keys share one hash tag (keys.py), so each Lua script and each transaction of
the crawler touches one slot, which is what a cluster requires. The Celery broker is never a
cluster (Celery cannot use one: celery/celery#2852): it stays a standalone Redis or RabbitMQ.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterError, SlotNotCoveredError, TryAgainError

from ..errors import ConfigError
from ..redaction import redact, unescaped_userinfo
from . import sockets

T = TypeVar("T")

#: Seconds a client's call waits for an answer when its caller sets none (the settings'
#: ``redis_timeout`` default; workers pass theirs).
DEFAULT_TIMEOUT = 10.0

#: The state Redis is away for a while: restarting, frozen, cut off, or a cluster's master
#: down or being failed over (CLUSTERDOWN, TRYAGAIN, a slot no node serves yet).
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterError,
    TryAgainError,
    SlotNotCoveredError,
)


def wait_out(
    call: Callable[[], T],
    patience: float,
    errors: tuple[type[Exception], ...] = UNAVAILABLE,
    failed: Callable[[Exception], None] | None = None,
    stop: threading.Event | None = None,
    max_delay: float = 2.0,
) -> T:
    """``call()``, again and again while it raises one of ``errors``, for up to ``patience``
    seconds (then the last error is raised; at once once ``stop`` is set). Waits 0.1 s,
    doubling up to ``max_delay``; ``failed`` is told of each failure."""
    deadline = time.monotonic() + patience
    delay = 0.1
    while True:
        try:
            return call()
        except errors as exc:
            if time.monotonic() + delay > deadline or (stop is not None and stop.is_set()):
                raise
            if failed is not None:
                failed(exc)
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)
            delay = min(delay * 2, max_delay)


def node_urls(url: str) -> list[str]:
    """One URL per node that ``url`` names: several for ``redis://a:7000,b:7001/0`` (each
    with the credentials, path and query of ``url``), else ``[url]``."""
    parts = urlsplit(url)
    info, at, hosts = parts.netloc.rpartition("@")
    if parts.scheme not in ("redis", "rediss") or "," not in hosts:
        return [url]
    netlocs = [f"{info}{at}{host.strip()}" for host in hosts.split(",")]
    return [urlunsplit(parts._replace(netloc=netloc)) for netloc in netlocs]


def is_cluster(url: str, timeout: float = 2.0) -> bool:
    """True if the server at ``url`` runs in cluster mode; always for several nodes (they can
    only be a cluster's). An unreachable server counts as standalone: the caller's first
    command then fails with the usual connection error."""
    if len(node_urls(url)) > 1:
        return True
    probe = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        return bool(probe.info("cluster").get("cluster_enabled"))
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    except redis.ResponseError:  # e.g. INFO not allowed by an ACL: assume standalone
        return False
    finally:
        probe.close()


def connect(url: str, pool_size: int | None = None, **options: Any) -> redis.Redis:
    """A client of the crawl-state Redis at ``url``. ``pool_size``: connections per server at
    most, threads beyond it wait for a free one (None: redis-py's default pool). A call waits
    ``DEFAULT_TIMEOUT`` s for an answer unless told otherwise (``socket_timeout``): a link
    that stops answering fails, it never blocks a thread for ever.

    A cluster client is returned as ``redis.Redis`` for typing: the crawler uses only commands
    that ``RedisCluster`` routes by key (and pipelines and scripts whose keys share a slot).

    Its connections (a cluster's too) are sockets.py's: two GIL-releasing system calls a
    round trip, not five, and the kernel enforces the timeout."""
    options.setdefault("socket_timeout", DEFAULT_TIMEOUT)
    options.setdefault("socket_connect_timeout", DEFAULT_TIMEOUT)
    quiet = sockets.connection_class(url)
    if quiet is not None:
        options.setdefault("connection_class", quiet)
    if is_cluster(url):
        if pool_size is not None:
            options.update(
                connection_pool_class=redis.BlockingConnectionPool, max_connections=pool_size
            )
        first, *others = node_urls(url)
        more = [ClusterNode(urlsplit(u).hostname, urlsplit(u).port or 6379) for u in others]
        return cast(redis.Redis, RedisCluster.from_url(first, startup_nodes=more, **options))
    if pool_size is None:
        return redis.Redis.from_url(url, **options)
    pool = redis.BlockingConnectionPool.from_url(
        url, max_connections=pool_size, timeout=20, **options
    )
    return redis.Redis(connection_pool=pool)


def node_clients(client: redis.Redis, replicas: bool = False) -> list[redis.Redis]:
    """One client per primary (and replica) of a cluster, for what each node answers only for
    itself (INFO, PUBSUB NUMSUB); the client itself for a standalone Redis."""
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes() if replicas else client.get_primaries()
        return [cast(redis.Redis, _NodeClient(client, node)) for node in nodes]
    return [client]


class _NodeClient:
    """One node's client that tells its cluster client when the node stops answering: a
    node's own client never does, and a process that asks only per-node questions (INFO on
    every master, before each release) would otherwise ask a dead master for ever, never
    learning that its replica took over."""

    def __init__(self, cluster: RedisCluster, node: ClusterNode) -> None:
        self._cluster, self._node = cluster, node
        self._client = cluster.get_redis_connection(node)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except (redis.ConnectionError, redis.TimeoutError):
                self._cluster.nodes_manager.initialize(last_failed_node_name=self._node.name)
                raise

        return call


def subscribers(client: redis.Redis, channel: str) -> int:
    """Clients subscribed to ``channel``: a cluster node counts only its own subscribers, while
    a message published anywhere reaches them all."""
    return sum(int(c.pubsub_numsub(channel)[0][1]) for c in node_clients(client, replicas=True))


def placed_tags(client: redis.Redis, crawl_id: str, partitions: int) -> tuple[str, ...]:
    """Hash tags for the partitions of a new crawl (keys.py), chosen so that partition n's
    slot is on master n mod M today: a crawl spreads evenly over a cluster's masters, not by
    the luck of its id. () on a standalone Redis (the tags are then "0", "1", ...). A cluster
    resharded later keeps the crawl working; only the balance may drift."""
    if not isinstance(client, RedisCluster):
        return ()
    masters = sorted(node.name for node in client.get_primaries())
    tags = []
    for n in range(partitions):
        want = masters[n % len(masters)]
        for attempt in range(10_000):
            tag = f"{n}.{attempt}"
            slot = key_slot(f"{crawl_id}/{tag}".encode())
            if client.nodes_manager.get_node_from_slot(slot).name == want:
                break
        tags.append(tag)
    return tuple(tags)


def default_partitions(client: redis.Redis) -> int:
    """Partitions of a new crawl when none are asked for: one on a standalone Redis; four per
    master on a cluster, so that a crawl's partitions spread over every master."""
    return 4 * len(client.get_primaries()) if isinstance(client, RedisCluster) else 1


def check_broker(broker_url: str, state: redis.Redis | None = None) -> None:
    """ConfigError if the broker is a Redis Cluster (Celery cannot use one: celery/celery#2852).
    Given the crawl-state client, the broker is probed only when the state is a cluster."""
    if state is not None and not isinstance(state, RedisCluster):
        return
    if broker_url.startswith("redis") and is_cluster(broker_url):
        raise ConfigError(
            f"broker {redact(broker_url)} is a Redis Cluster, which Celery cannot use as its "
            "broker: set CRAWLER_BROKER_URL to a standalone Redis or to RabbitMQ (amqp://) and "
            "CRAWLER_REDIS_URL to the cluster"
        )


def check_redis_url(url: str) -> None:
    """ConfigError for a URL redis-py could not connect with, naming it (password masked)."""
    for node in node_urls(url):
        _check_one_url(node, url)


def _check_one_url(url: str, named: str) -> None:
    parts = urlsplit(url)
    why = ""
    if parts.scheme not in ("redis", "rediss", "unix"):
        why = "scheme must be redis://, rediss:// or unix://"
    elif unescaped_userinfo(url):
        why = "the password holds '@' or '/': percent-encode it ('@' is %40, '/' is %2F)"
    elif parts.scheme != "unix" and not parts.hostname:
        why = "no host"
    else:
        try:
            parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
        except ValueError:
            why = "the port is not a number"
    if why:
        raise ConfigError(f"malformed Redis URL {redact(named)!r}: {why}")


def redis_problem(url: str, timeout: float = 2.0) -> str | None:
    """Why the Redis at ``url`` cannot be used, in a few words (None: it answers PING). Of
    several nodes, one that answers (in cluster mode) is enough: the others may be down."""
    nodes = node_urls(url)
    if len(nodes) == 1:
        return _node_problem(url, timeout)
    problems = []
    for node in nodes:
        why = _node_problem(node, timeout)
        if why is None and not is_cluster(node, timeout):
            why = "it is not in cluster mode (several nodes name one Redis Cluster)"
        if why is None:
            return None
        problems.append(f"{urlsplit(node).netloc.rpartition('@')[2]}: {why}")
    return "no node answers (" + "; ".join(problems) + ")"


def _node_problem(url: str, timeout: float) -> str | None:
    """Asked once, without redis-py's retries, so that a wrong port or password says so at
    once."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis.from_url(
        url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )
    try:
        client.ping()
        return None
    except redis.AuthenticationError:
        return "authentication failed: its password is missing or wrong"
    except redis.TimeoutError:
        return f"no answer within {timeout:g} s"
    except redis.ConnectionError as exc:
        if isinstance(exc.__cause__, ConnectionRefusedError) or "refused" in str(exc).lower():
            return "connection refused: nothing listens there"
        return _not_redis(url, timeout) or f"unreachable: {exc}"
    except redis.ResponseError as exc:
        if str(exc).startswith(("NOAUTH", "WRONGPASS")):
            return "authentication failed: its password is missing or wrong"
        return f"refused us: {exc}"
    except redis.RedisError as exc:  # a protocol error: something else speaks there
        # What it said, whichever reply parser failed on it (hiredis names only the first
        # byte; redis-py's own parser, the line).
        named = _not_redis(url, timeout)
        return named or f"it answered, but it is not Redis ({type(exc).__name__}: {exc})"
    finally:
        client.close()


def _not_redis(url: str, timeout: float) -> str | None:
    """The reason "it answered, but it is not Redis (it said ...)" when what answers PING at
    ``url`` does not speak RESP; None when it does, or says nothing."""
    said = _greeting(url, timeout)
    if said is not None and not said.startswith(("+", "-", "$", "*", ":", "%", ">")):
        return f"it answered, but it is not Redis (it said {said!r})"
    return None


def _greeting(url: str, timeout: float) -> str | None:
    """The first bytes a TCP server at ``url`` sends back to PING (None if not told)."""
    import socket

    parts = urlsplit(url)
    if parts.scheme != "redis" or not parts.hostname:
        return None  # TLS or a socket file: redis-py's own message is the best there is
    try:
        with socket.create_connection((parts.hostname, parts.port or 6379), timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(40).decode("latin-1").split("\r\n")[0]
    except OSError:
        return None
