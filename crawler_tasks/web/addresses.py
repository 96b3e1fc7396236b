"""Which server address a host's requests count against (``ip_rate``, ``ip_concurrency``).

Shared hosting puts hundreds of sites on one address: their requests meet at one server, so
a crawl with ``ip_rate`` paces them together (state/lua/release.lua). A CDN is the opposite
case: one address fronts thousands of unrelated sites, and grouping them would crawl each
"far too politely". ``ip_exempt`` names those: networks (CIDRs) and host-name suffixes.
"""

from __future__ import annotations

import ipaddress

from ..errors import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Exempt:
    """The crawl's ``ip_exempt`` list, parsed once: networks and host-name suffixes."""

    def __init__(self, items: tuple[str, ...] = ()) -> None:
        self.networks: list[Network] = []
        self.suffixes: list[str] = []
        for item in items:
            text = item.strip().lower()
            try:
                self.networks.append(ipaddress.ip_network(text, strict=False))
                continue
            except ValueError:
                pass
            name = text.lstrip(".")
            if not name or "/" in name or " " in name or ":" in name:
                raise ConfigError(
                    f"ip_exempt: {item!r} is neither a network (CIDR) nor a host name"
                )
            self.suffixes.append(name)

    def covers(self, host: str, ip: str) -> bool:
        """True when ``host`` (its name) or ``ip`` (its address) is exempt from grouping."""
        host = host.lower().rstrip(".")
        if any(host == s or host.endswith("." + s) for s in self.suffixes):
            return True
        try:
            address = ipaddress.ip_address(ip.strip("[]"))
        except ValueError:
            return False
        return any(address in n for n in self.networks)
