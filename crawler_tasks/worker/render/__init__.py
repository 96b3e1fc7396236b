"""The headless browser of a render process (:mod:`.browser`: one Chromium, driven by
Playwright on an event loop of its own) and when a rendered page is done
(:mod:`.render_settle`). The rules every request of a rendered page obeys are one URL's
business: ``worker/visit/render_guard.py``.

May import ``worker.process``, ``worker.output``, ``state``, ``web`` and the foundation.
"""
