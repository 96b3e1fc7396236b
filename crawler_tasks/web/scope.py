"""Crawl scope: which normalised URLs a crawl follows (its allowed domains, include and
exclude patterns, URL length and trap limits)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import ConfigError, InvalidSeed, InvalidURL
from .urls import has_repeated_segments, host_of, ipv6_host, normalize, normalize_host


def _normalize_domain(domain: str) -> str:
    """An allowed domain as :func:`host_of` gives hosts: an IPv6 address (with or without its
    brackets: the seeds' hosts come without) in the form ``normalize`` writes."""
    domain = domain.strip().lstrip(".")
    try:
        if domain.startswith("[") or ":" in domain:
            return ipv6_host(ipaddress.IPv6Address(domain.strip("[]")))
        return normalize_host(domain)
    except (ValueError, UnicodeError):
        raise ConfigError(f"invalid allowed domain {domain!r}") from None


def _compile(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    try:
        return tuple(re.compile(p) for p in patterns)
    except re.error as exc:
        raise ConfigError(f"invalid URL pattern {exc.pattern!r}: {exc}") from None


@dataclass(frozen=True)
class Scope:
    """Which normalised URLs a crawl follows.

    ``allowed_domains`` are hosts, stored normalised (IDN, upper case, a leading dot accepted);
    a URL is in scope when its host is one of them or a subdomain of one; an empty tuple means
    no domain restriction. ``include``/``exclude`` are regexes searched in the normalised URL.
    """

    allowed_domains: tuple[str, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_url_length: int = 2048
    max_repeated_segments: int = 3
    _domains: frozenset[str] = field(init=False, repr=False, compare=False)
    _include: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _exclude: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Frozen: fields are coerced and derived tables built once, through object.__setattr__.
        domains = tuple(dict.fromkeys(_normalize_domain(d) for d in self.allowed_domains))
        for name, value in (("allowed_domains", domains), ("_domains", frozenset(domains))):
            object.__setattr__(self, name, value)
        for name in ("include", "exclude"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
            object.__setattr__(self, "_" + name, _compile(getattr(self, name)))

    @classmethod
    def for_seeds(
        cls,
        seeds: Iterable[str],
        allowed_domains: Iterable[str] | None = None,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        max_url_length: int = 2048,
        max_repeated_segments: int = 3,
    ) -> Scope:
        """A scope whose allowed domains default to the seeds' hosts (raises InvalidSeed)."""
        hosts: dict[str, None] = {}
        for seed in seeds:
            try:
                hosts[host_of(normalize(seed))] = None
            except InvalidURL as exc:
                raise InvalidSeed(seed, str(exc.details.get("why", exc))) from None
        if allowed_domains is None and not hosts:
            raise ConfigError("no seeds to take the allowed domains from")
        domains = tuple(hosts) if allowed_domains is None else tuple(allowed_domains)
        return cls(domains, tuple(include), tuple(exclude), max_url_length, max_repeated_segments)

    def _in_domain(self, host: str) -> bool:
        if not self._domains or host in self._domains:
            return True
        # Walk up the parents (a.b.c -> b.c -> c): cost grows with labels, not with domains.
        dot = host.find(".")
        while dot >= 0:
            if host[dot + 1 :] in self._domains:
                return True
            dot = host.find(".", dot + 1)
        return False

    def check(self, url: str) -> str | None:
        """None when the normalised ``url`` is in scope, else why not (a short reason)."""
        if len(url) > self.max_url_length:
            return "url_too_long"
        if not self._in_domain(host_of(url)):
            return "out_of_domain"
        if any(p.search(url) for p in self._exclude):
            return "excluded"
        if self._include and not any(p.search(url) for p in self._include):
            return "not_included"
        if has_repeated_segments(url, self.max_repeated_segments):
            return "trap"
        return None
