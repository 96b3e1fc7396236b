"""Secrets kept out of what is shown: a URL's password hidden for logs and terminals.

Secrets (Redis passwords) come only from the environment; they are never written to Redis, to
task arguments, or to logs: every URL a process prints goes through :func:`redact`.
"""

from __future__ import annotations

import re

# The whole userinfo, up to the LAST "@" before the path: a password may hold an unescaped "@"
# (redis-py and urllib split at the last one), and no part of it may show.
# A "/" counts too: an unescaped one in a password ends the host part for URL parsers, and what
# follows must still not show. A query's ``password=`` (redis-py reads it) is hidden as well.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^?#]*)@")
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)[^&#]*", re.I)


def redact(url: str) -> str:
    """``redis://:secret@host`` -> ``redis://:***@host``: safe for logs and terminals. The user
    name stays (``redis://user:***@host``); everything after its first ":" is hidden."""

    def hide(m: re.Match[str]) -> str:
        user, colon, _secret = m["info"].partition(":")
        return f"{m['scheme']}{user}:***@" if colon else f"{m['scheme']}{user}@"

    return _QUERY_PASSWORD.sub(r"\g<key>***", _USERINFO.sub(hide, url))


def unescaped_userinfo(url: str) -> bool:
    """True if the part before the host holds an unescaped "@" or "/" (a password typed as it
    is): parsers disagree on where such a URL's host starts, so it must be percent-encoded."""
    m = _USERINFO.match(url)
    return m is not None and ("@" in m["info"] or "/" in m["info"])
