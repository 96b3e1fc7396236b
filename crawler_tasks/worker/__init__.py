"""The worker runtime: the Celery app and tasks, the per-process context and each crawl's
runtime, the pipeline one URL goes through (fetch step, parse step, settle), the dispatcher,
output files. Imports ``state``, ``web`` and the foundation.
"""
