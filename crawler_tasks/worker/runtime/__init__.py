"""What one process holds for the crawls it works on: its context (:mod:`.context`: Redis,
fetcher, caches, output files, the browser pool) and each crawl's runtime
(:mod:`.crawl_runtime`), users' extraction hooks (:mod:`.hooks`), the send gate a request
waits at (:mod:`.send_gate`), server addresses (:mod:`.addresses`), room in Redis
(:mod:`.room`) and the one call that hands a URL to its next step (:mod:`.handoff`).

May import ``worker.process``, ``worker.output``, ``worker.render``, ``state``, ``web`` and
the foundation.
"""
