"""Fault scenarios: kills, freezes, outages, full disks, overload. `make test-faults`."""
