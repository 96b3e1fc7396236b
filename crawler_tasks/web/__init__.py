"""Pure web logic: URLs, fetching over HTTP, HTML pages, robots.txt rules, sitemap files,
the SSRF guard. Knows nothing of Redis, Celery or crawls; imports only the package's
foundation (``errors``, ``settings``). Tested with tables, no Redis needed.
"""
