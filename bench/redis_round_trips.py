"""Redis round trips from 64 threads of one process, through the crawl-state client a fetch
process makes (``state/connection.py``, the worker's options): round trips/s and CPU us per
round trip. Of every 4 calls, 3 are a GET and one a 2-command pipeline (one round trip).

    .venv/bin/python bench/redis_round_trips.py [--seconds 5] [--threads 64]
    perf stat -e 'raw_syscalls:sys_enter,syscalls:sys_enter_futex,syscalls:sys_enter_poll' \\
        .venv/bin/python bench/redis_round_trips.py     # system calls per round trip

A private redis-server on a free port; nothing else is touched.
"""

from __future__ import annotations

import argparse
import subprocess
import threading
import time

from crawler_tasks.state import connection
from crawler_tasks.surface.embedded import free_port, redis_binary, wait_for_redis


def run(url: str, seconds: float, threads: int) -> None:
    client = connection.connect(
        url,
        pool_size=64,
        health_check_interval=30,
        socket_keepalive=True,
        socket_timeout=10,
        socket_connect_timeout=10,
    )
    client.set("k", b"x" * 100)
    stop = threading.Event()
    counts = [0] * threads
    gate = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        gate.wait()
        n = 0
        pipe = client.pipeline(transaction=False)
        while not stop.is_set():
            if n % 4 == 3:
                pipe.get("k")
                pipe.incr("c")
                pipe.execute()
            else:
                client.get("k")
            n += 1
        counts[i] = n

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    gate.wait()
    cpu0, t0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    cpu, wall, n = time.process_time() - cpu0, time.monotonic() - t0, sum(counts)
    conn = type(client.connection_pool.get_connection()).__name__
    print(f"round trips {n:,}  per s {n / wall:,.0f}  CPU us a round trip {1e6 * cpu / n:.1f}")
    print(f"connection class {conn}")
    client.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=64)
    args = p.parse_args()
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    args_ = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen([redis_binary(), *args_], stdout=subprocess.DEVNULL)
    try:
        wait_for_redis(url, server)
        run(url, args.seconds, args.threads)
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
