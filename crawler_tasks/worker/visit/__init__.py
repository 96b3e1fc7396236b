"""One URL's visit, from its release to its final record: the pipeline the tasks call
(:mod:`.pipeline`), the deciding steps (:mod:`.fetch_step`, :mod:`.adaptive`,
:mod:`.sitemap_seeds`) and what they return (:mod:`.outcome`), the one place a fetched URL is
settled (:mod:`.settle`) and a response's continuation (:mod:`.respond`), the parse and render
steps (:mod:`.parse_step`, :mod:`.render_step`, :mod:`.render_guard`) and the last step of
every URL (:mod:`.recorder`).

May import every room below it (``process``, ``output``, ``render``, ``runtime``), ``state``,
``web`` and the foundation.
"""
