"""Seeds as a user gives them (start_crawl, ``crawler crawl``, a seeds file, a schedule):
checked, normalised, deduplicated, before anything is written."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from ..errors import InvalidSeed, InvalidURL
from .netguard import is_public_address
from .urls import host_of, normalize


def check_seeds(seeds: Iterable[str] | str, allow_private: bool) -> list[str]:
    """Normalised seeds, or InvalidSeed naming the first one that cannot be crawled. One URL
    given as a string is that one seed (not its characters)."""
    out = []
    for seed in [seeds] if isinstance(seeds, str) else seeds:
        if not isinstance(seed, str):
            raise InvalidSeed(repr(seed), "a seed is a URL string")
        stripped = seed.strip()
        if any(c.isspace() for c in stripped):
            # Two URLs in one quoted argument, or a line break in a string, became one bogus
            # URL (/p/1.html%20http://...): never what was meant. A space in a path is %20.
            raise InvalidSeed(
                seed, "white space inside: one URL per seed (a space in a URL is written %20)"
            )
        try:
            url = normalize(stripped)
        except InvalidURL as exc:
            raise InvalidSeed(seed, str(exc)) from None
        host = host_of(url).strip("[]")
        if not allow_private and (host == "localhost" or _is_private_literal(host)):
            raise InvalidSeed(
                seed,
                "private or loopback address: allow it with the crawl option "
                "allow_private_networks (crawler crawl --allow-private-networks; "
                "--option allow_private_networks=true; allow_private_networks=True)",
            )
        out.append(url)
    if not out:
        raise InvalidSeed("", "no seed URL given")
    return list(dict.fromkeys(out))


def _is_private_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: checked when it is resolved, on every connection
    return not is_public_address(host)
