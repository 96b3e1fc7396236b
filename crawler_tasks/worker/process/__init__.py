"""One worker process's plumbing: the Celery app (:mod:`.app`) and its Redis transport made to
survive a full or restarting Redis (:mod:`.broker`), what the process tells the cluster about
itself (:mod:`.liveness`), riding out Redis outages (:mod:`.outage`) and judging its own stalls
(:mod:`.stall`), logging that does not flood (:mod:`.logs`), malloc arenas (:mod:`.malloc`)
and the fault suite's kill points (:mod:`.faults`).

The lowest room of ``worker/``: imports ``state``, ``web`` and the foundation only.
"""
