"""The test suite: tests/unit, tests/integration, tests/faults and tests/bench are its tiers
(tests/conftest.py marks each test from its directory); tests/support holds what they share."""
