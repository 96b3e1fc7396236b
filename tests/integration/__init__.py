"""Real redis-server, Celery workers and CLI processes. `make test` runs these and tests/unit."""
