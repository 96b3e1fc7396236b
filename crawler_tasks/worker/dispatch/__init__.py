"""The dispatcher, a thread in every worker's main process (:mod:`.dispatcher`) and its parts:
release rounds (:mod:`.rounds`), host affinity (:mod:`.routing`), the repair of what dead
processes and lost messages left (:mod:`.repair`) and a fetch process's departure
(:mod:`.departure`).

The highest room: may import ``visit`` (a lost URL is settled as a visit would be) and every
room below it, ``state``, ``web`` and the foundation.
"""
