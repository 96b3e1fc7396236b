"""Guards on every connection the crawler opens: where it may go.

A crawled page can link or redirect anywhere, including ``http://169.254.169.254/`` (cloud
metadata), ``http://localhost:6379/`` (our own Redis) or a DNS name that resolves to either.
:func:`check_host` resolves a host once and vets every address it resolves to; the transport
(:class:`.pinning.PinnedAdapter`) then connects to one of exactly those addresses (pinning), so
a DNS answer that changes between the check and the connection cannot smuggle in a private
address.

Policy:

* by default only globally routable unicast addresses are allowed (:func:`is_public_address`);
* ``allow_private=True`` (crawls of a local network, the tests) also allows private, loopback,
  link-local, shared (100.64/10), unique-local and reserved addresses;
* cloud metadata endpoints, multicast, broadcast and unspecified addresses are never allowed.

IPv6 forms that carry an IPv4 address (``::ffff:a.b.c.d``, ``::a.b.c.d``, 6to4 ``2002::/16``,
NAT64 ``64:ff9b::/96``) are judged by the IPv4 address they carry.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..errors import BlockedAddress, ConnectionFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Instance-metadata and platform endpoints: credentials live there, so they stay blocked even
#: when private networks are allowed. AWS/GCP/Azure/OpenStack, AWS ECS task metadata, AWS IPv6,
#: Alibaba, Azure wire server (a public address, hence listed explicitly).
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
    )
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
#: Special-purpose ranges that not every Python's ``ipaddress`` tables know (they changed in
#: 3.12.4/3.13): IETF protocol assignments, 6to4 relays, the 2024 documentation and SRv6 blocks.
_ALSO_SPECIAL = tuple(
    ipaddress.ip_network(n) for n in ("192.0.0.0/24", "192.88.99.0/24", "3fff::/20", "5f00::/16")
)


def parse_address(ip: str) -> IPAddress | None:
    """The address ``ip`` spells (brackets of an IPv6 URL host allowed), else None (a name)."""
    try:
        return ipaddress.ip_address(ip.strip("[]"))
    except ValueError:
        return None


def _unwrap(addr: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (the one traffic really goes to), else itself."""
    if isinstance(addr, ipaddress.IPv4Address):
        return addr
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr in _NAT64 or addr in _IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return addr


def _never_allowed(addr: IPAddress) -> bool:
    special = addr.is_multicast or addr.is_unspecified or addr == _BROADCAST
    return special or addr in METADATA_ADDRESSES


def _is_public(addr: IPAddress) -> bool:
    if _never_allowed(addr):
        return False
    # ``is_global`` alone misses multicast and (on older Pythons) some special ranges, and
    # ``is_private`` alone misses 100.64/10: ask every property.
    special = (
        addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_reserved
        or not addr.is_global
        or any(addr in net for net in _ALSO_SPECIAL)
    )
    if isinstance(addr, ipaddress.IPv6Address):
        special = special or addr.is_site_local
    return not special


def is_public_address(ip: str) -> bool:
    """Is ``ip`` a globally routable unicast address a public crawl may connect to?

    Anything that does not parse as an address is not public.
    """
    addr = parse_address(ip)
    return addr is not None and _is_public(_unwrap(addr))


def is_allowed_address(ip: str, *, allow_private: bool = False) -> bool:
    """May a crawl connect to ``ip``? See the module docstring for the policy."""
    addr = parse_address(ip)
    if addr is None:
        return False
    addr = _unwrap(addr)
    if allow_private:
        return not _never_allowed(addr)
    return _is_public(addr)


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to for a TCP connection, in the resolver's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
        raise ConnectionFailed(f"cannot resolve {host!r}: {exc}", host=host) from exc
    addresses: list[str] = []
    for *_, sockaddr in infos:
        ip = str(sockaddr[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise ConnectionFailed(f"{host!r} resolves to no address", host=host)
    return addresses


def check_host(
    host: str,
    port: int,
    *,
    allow_private: bool = False,
    resolver: Callable[[str, int], list[str]] = resolve,
) -> list[str]:
    """Resolve ``host`` and return its addresses if every one of them is allowed.

    One bad address blocks the host: a resolver picks among the answers as it likes, so a
    name with a public and a private answer could reach the private one.

    Raises ``BlockedAddress`` or ``ConnectionFailed`` (resolution failed).
    """
    addresses = resolver(host, port)
    blocked = [a for a in addresses if not is_allowed_address(a, allow_private=allow_private)]
    if blocked:
        raise BlockedAddress(
            f"{host} resolves to blocked address {blocked[0]}", host=host, addresses=blocked
        )
    return addresses


def check_literal(host: str, *, allow_private: bool = False) -> None:
    """Raise ``BlockedAddress`` if ``host`` is an IP literal the policy forbids; names pass.

    No DNS: cheap enough to run on a redirect target before anything else looks at it, so a
    redirect to ``169.254.169.254`` is reported as blocked whatever the crawl's scope says.
    Names are vetted by :func:`check_host` when (and if) they are connected to.
    """
    if parse_address(host) is not None and not is_allowed_address(
        host, allow_private=allow_private
    ):
        raise BlockedAddress(f"blocked address {host}", host=host, addresses=[host.strip("[]")])


class KeptAddresses:
    """What host names resolved to, kept ``seconds`` (one fetch process's, as a stub resolver
    keeps answers): a crawl asks for the same names hundreds of times a minute, and each
    getaddrinfo reads /etc/hosts and asks the system's DNS server. Only answers are kept,
    never a failure, at most ``size`` names; each use vets them again (:func:`check_host`),
    so one crawl's ``allow_private`` lends nothing to another's. 0 s: resolve every time."""

    def __init__(self, seconds: float, size: int = 10_000) -> None:
        self.seconds, self.size = seconds, size
        self._kept: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, host: str, port: int, *, allow_private: bool) -> list[str]:
        return check_host(host, port, allow_private=allow_private, resolver=self.resolve)

    def resolve(self, host: str, port: int) -> list[str]:
        if self.seconds <= 0:
            return resolve(host, port)
        now, key = time.monotonic(), host.lower()
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and now - kept[0] < self.seconds:
            return kept[1]
        addresses = resolve(host, port)  # the port picks no address (SOCK_STREAM)
        with self._lock:
            self._kept[key] = (now, addresses)
            self._kept.move_to_end(key)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return addresses
