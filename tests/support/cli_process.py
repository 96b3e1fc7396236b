"""``python -m crawler_tasks.surface.cli ARGS`` in a process of its own, forked from a server
process that has already imported the command (multiprocessing's forkserver, one per test
process, started at the first call).

Why: test_cli_errors.py runs the command ~130 times, and each start imported the package
again: ~0.4 CPU-s a start (redis-py alone ~0.25), ~50 CPU-s of the suite on 2 cores. What a
test reads is unchanged: each run is a new process with the environment given, its own stdout
and stderr (files: no terminal, as under ``subprocess.run(capture_output=True)``) and its own
exit status, and the command runs from its entry point, ``sys.exit(main())``, as ``crawler`` runs it.
An exception that escapes the command is printed with its traceback, which the tests look for.
The commands as users type them (``crawler ...``, the README's) run as real subprocesses in
the other tests.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MODULE = "crawler_tasks.surface.cli"

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload([MODULE])


def _main(argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked process: the environment, stdout and stderr given, then the command."""
    os.environ.clear()
    os.environ.update(env)
    for path, fd in ((out, 1), (err, 2)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = ["crawler", *argv]
    sys.exit(importlib.import_module(MODULE).main())  # what `crawler` and `python -m` run


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The command's exit status, stdout and stderr, as ``subprocess.run(..., text=True)``."""
    argv = [sys.executable, "-m", MODULE, *args]
    with tempfile.TemporaryDirectory(prefix="cli-run-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        proc = _context.Process(
            target=_main,
            args=(list(args), dict(os.environ if env is None else env), str(out), str(err)),
        )
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired(argv, timeout)
        code = proc.exitcode
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())
