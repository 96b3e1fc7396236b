"""What the tiers share: sites, TLS, clusters, starting a crawl, waiting helpers. bench/ imports it
as ``tests.support``."""
