"""The worker runtime: the Celery app and tasks, the per-process context, the pipeline one URL
goes through, the dispatcher, output files. Imports ``state``, ``web`` and the foundation.
"""
