"""A crawl's output: each process's files (:mod:`.files`: pages, items, edges, WARC; read back
by :mod:`.read`), WARC records (:mod:`.warc`) and which record a recrawl's response becomes
(:mod:`.revisits`), and the exactly-once fences of its appends (:mod:`.archive_fence`,
:mod:`.warc_appends`, :mod:`.page_appends`).

May import ``worker.process`` (fault points), ``state``, ``web`` and the foundation.
"""
