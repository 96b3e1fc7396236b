"""Pure logic: no process, no Redis (in-process HTTP servers and threads are fine). `make test-fast`."""
