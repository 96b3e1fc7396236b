"""What people use: the crawl handle and ``start_crawl``, the CLI and its live display,
embedded mode, Prometheus metrics. Sits on top; nothing below imports it.
"""
