"""Redis's own time per Lua script, by name: SLOWLOG with a threshold of 0, drained by a
thread (``--script-times`` in broad.py). INFO commandstats only says "evalsha"; this says
which script, so a cut in Redis CPU can be aimed. The drain costs Redis a little itself."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from importlib import resources
from typing import Any

import redis

from crawler_tasks.state.scripts import source

#: Every script (the ``*_lib.lua`` files are prepended to others, never run alone).
_NAMES = sorted(
    p.name.removesuffix(".lua")
    for p in resources.files("crawler_tasks.state").joinpath("lua").iterdir()
    if p.name.endswith(".lua") and not p.name.endswith("_lib.lua")
)


def _sha_names() -> dict[str, str]:
    return {hashlib.sha1(source(n).encode()).hexdigest(): n for n in _NAMES}


class ScriptTimes:
    """Context manager: ``.usec`` and ``.calls`` by script name (other commands by name)."""

    def __init__(self, client: redis.Redis, interval: float = 0.2) -> None:
        self.client, self.interval = client, interval
        self.usec: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._stop = threading.Event()
        self._names = _sha_names()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ScriptTimes:
        self.client.config_set("slowlog-max-len", 100000)
        self.client.config_set("slowlog-log-slower-than", 0)
        self.client.slowlog_reset()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._drain()
        self.client.config_set("slowlog-log-slower-than", 10000)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._drain()

    def _drain(self) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.slowlog_get(-1)
        pipe.slowlog_reset()
        entries, _ = pipe.execute()
        for e in entries:
            cmd = e["command"]
            words = cmd.split(maxsplit=2)[:2] if isinstance(cmd, (bytes, str)) else list(cmd)[:2]
            words = [w.decode(errors="replace") if isinstance(w, bytes) else w for w in words]
            name = words[0].lower()
            if name in ("evalsha", "evalsha_ro") and len(words) > 1:
                name = self._names.get(words[1], "script:" + words[1][:8])
            elif name in ("slowlog", "multi", "exec"):
                continue
            self.usec[name] += int(e["duration"])
            self.calls[name] += 1
