"""The worker runtime, in rooms by job. Imports ``state``, ``web`` and the foundation.

Inside ``worker/`` the rooms are layered too, lowest first; a room imports its own modules
and the rooms below it, never one above (``tests/unit/test_layers.py``):

* ``process/``: one OS process's plumbing (the Celery app, the broker transport, heartbeats
  and liveness, outages and stalls, logging, fault points);
* ``output/``: the crawl's files (pages, items, edges, WARC) and their exactly-once fences;
* ``render/``: the headless browser a render process drives;
* ``runtime/``: what a process holds for the crawls it works on (its context, each crawl's
  runtime, hooks, the send gate, the hand-off of a URL to its next step);
* ``visit/``: one URL's steps, from its release to its final record;
* ``dispatch/``: the dispatcher thread (release rounds, host affinity, repair, departure).

Above them: :mod:`.tasks` (the Celery tasks, thin), :mod:`.lifecycle` (the process's signal
handlers and the dispatcher's bootstep), ``__main__`` (``python -m crawler_tasks.worker``) and
:mod:`.hooks` (the extraction hook API users import).
"""
