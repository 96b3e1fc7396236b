"""Whether the broker and the crawl-state Redis a command is about to use answer, and if not,
why, in a few words a person can act on (refused, wrong password, no such vhost, not Redis).
One line each, never a traceback: ``crawler`` prints it and exits 2, or, for the built-in
default broker only, starts a private one (``crawler crawl``)."""

from __future__ import annotations

from ..redaction import redact
from ..settings import Settings
from ..state import connection


def problem(settings: Settings) -> str | None:
    """What is wrong with the state Redis, then with the broker if it is another server."""
    why = connection.redis_problem(settings.state_url)
    if why is not None:
        if not why.startswith(("connection refused", "authentication")):
            why = tls_mismatch(settings.state_url) or why
        return f"broker {redact(settings.state_url)}: {why}"
    if settings.broker_url != settings.state_url and settings.broker_url.startswith("amqp"):
        why = amqp_problem(settings.broker_url)
        if why is not None:
            return f"broker {redact(settings.broker_url)}: {why}"
    return None


def amqp_problem(url: str, timeout: float = 3.0) -> str | None:
    """RabbitMQ's answer to a login, in words (None: it let us in)."""
    import amqp.exceptions
    from kombu import Connection

    conn = Connection(url, connect_timeout=timeout)
    try:
        conn.connect()
        return None
    except amqp.exceptions.AccessRefused:
        return "access refused: wrong user or password"
    except amqp.exceptions.NotAllowed as exc:
        return f"not allowed: {str(exc).split(' - ', 1)[-1]} (create it: rabbitmqctl add_vhost)"
    except ConnectionRefusedError:
        return "connection refused: nothing listens there"
    except OSError as exc:
        return f"unreachable: {exc}"
    except Exception as exc:  # anything else amqp raises: its own words, on one line
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.release()


def tls_mismatch(url: str) -> str | None:
    """A Redis that did not answer in the scheme given but does in the other: ``rediss://``
    to a plain Redis waits for a TLS reply that never comes ("no answer within 2 s")."""
    scheme, sep, rest = url.partition("://")
    if scheme == "rediss" and connection.redis_problem(f"redis{sep}{rest}") is None:
        return "TLS mismatch: it speaks plain Redis, not TLS (use redis://)"
    if scheme == "redis":
        query = "&" if "?" in rest else "?"
        if connection.redis_problem(f"rediss{sep}{rest}{query}ssl_cert_reqs=none") is None:
            return "TLS mismatch: it speaks TLS (use rediss://, and CRAWLER_CA_BUNDLE for its CA)"
    return None
