"""Redis round trips by call site, in the workers of a bench run (issue 32).

Counting: this file, copied as ``sitecustomize.py`` into a directory put first on the
workers' PYTHONPATH, wraps redis-py's ``send_packed_command`` (one command, or a whole
pipeline / transaction: one round trip each) and counts each call by a short stack signature:
the nearest crawler frames (file:function), else the nearest kombu / celery frame (the
broker's own traffic). Each process writes its counts to ``$RT_SITES_DIR/<pid>.json`` every
second (pool children leave with os._exit, past atexit).

    d=$(mktemp -d); cp bench/_rt_sites.py $d/sitecustomize.py
    RT_SITES_DIR=$d/out PYTHONPATH=$d .venv/bin/python bench/broad.py ... --skip-scrapy
    .venv/bin/python bench/_rt_sites.py $d/out PAGES     # the table, per page
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import threading
import time

_OURS = ("crawler_tasks",)
_BROKER = ("kombu", "celery")


def _signature(depth: int = 3) -> str:
    frame, ours, broker = sys._getframe(2), [], ""
    while frame is not None and len(ours) < depth:
        path = frame.f_code.co_filename
        if any(f"/{p}/" in path for p in _OURS):
            ours.append(f"{path.rsplit('/', 1)[-1][:-3]}:{frame.f_code.co_name}")
        elif not broker and any(f"/{p}/" in path for p in _BROKER):
            broker = f"{path.split('/site-packages/')[-1].split('/')[0]}:{frame.f_code.co_name}"
        frame = frame.f_back
    return " < ".join(ours) if ours else (broker or "other")


def _install(out: str) -> None:
    from redis.connection import AbstractConnection

    counts: collections.Counter[str] = collections.Counter()
    send = AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):  # type: ignore[no-untyped-def]
        counts[_signature()] += 1
        return send(self, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    os.makedirs(out, exist_ok=True)

    def dump() -> None:
        while True:
            time.sleep(1.0)
            body = {"argv": sys.argv, "counts": dict(counts)}
            path = os.path.join(out, f"{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(body, f)
            os.replace(path + ".tmp", path)

    threading.Thread(target=dump, daemon=True).start()


def _report(out: str, pages: int) -> None:
    total: collections.Counter[str] = collections.Counter()
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            body = json.load(f)
        if any("celery" in a or "worker" in a for a in body["argv"]):
            total.update(body["counts"])
    print(f"{'per page':>9}  call site")
    for site, n in total.most_common(40):
        print(f"{n / pages:9.3f}  {site}")
    print(f"{sum(total.values()) / pages:9.3f}  all")


if __name__ == "__main__":
    _report(sys.argv[1], int(sys.argv[2]))
elif os.environ.get("RT_SITES_DIR"):
    with contextlib.suppress(ImportError):  # a process without redis-py
        _install(os.environ["RT_SITES_DIR"])
