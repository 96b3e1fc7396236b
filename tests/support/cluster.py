"""A real Redis Cluster on loopback for the tests: ``redis-server --cluster-enabled yes`` per
node, joined with ``redis-cli --cluster create``. Masters (and optional replicas) keep an
append-only file, so a master can be killed and restarted, or failed over, mid-crawl."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from crawler_tasks.surface.embedded import redis_binary


def _free_pair(taken: frozenset[int] = frozenset()) -> int:
    """A port P such that P and P + 10000 (the cluster bus) are both free, and not one of
    ``taken`` (the ports chosen for the cluster's other nodes: they are bound only when the
    nodes start, so the kernel may hand out the same free port twice)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535 or {port, port + 10000, port - 10000} & taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class Node:
    def __init__(self, root: Path, fsync: str = "always", taken: frozenset[int] = frozenset()):
        self.fsync = fsync
        self.port = _free_pair(taken)
        self.dir = root / str(self.port)
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", "2000", "--dir", str(self.dir)]
        args += ["--appendonly", "yes", "--appendfsync", self.fsync]
        args += ["--maxmemory-policy", "noeviction"]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen([redis_binary(), *args], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client().ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"cluster node {self.port} did not start") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def info(self, section: str) -> dict:  # type: ignore[type-arg]
        c = self.client()
        try:
            return dict(c.info(section))
        finally:
            c.close()


class Cluster:
    """``masters`` masters, each with ``replicas`` replicas; ``url`` names one master,
    ``nodes_url`` every node (several startup nodes, state/connection.py). ``fsync``: the
    append-only file's (``everysec``: as a cluster is usually run)."""

    def __init__(self, masters: int = 3, replicas: int = 0, fsync: str = "always") -> None:
        if shutil.which("redis-cli") is None:
            raise RuntimeError("redis-cli is not on PATH (it creates the test cluster)")
        self._tmp = tempfile.TemporaryDirectory(prefix="crawler-cluster-")
        root = Path(self._tmp.name)
        self.nodes: list[Node] = []
        for _ in range(masters * (1 + replicas)):
            taken = frozenset(n.port for n in self.nodes)
            self.nodes.append(Node(root, fsync, taken))
        self.replicas = replicas
        for node in self.nodes:
            node.start()
        addresses = [n.address for n in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses]
            + ["--cluster-replicas", str(replicas), "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok()
        self.url = f"redis://{self.nodes[0].address}/0"
        self.nodes_url = "redis://" + ",".join(addresses) + "/0"

    def replica_of(self, master: Node) -> Node:
        """A live replica of ``master``."""
        for n in self.nodes:
            if n is master or n.proc is None or n.proc.poll() is not None:
                continue
            with contextlib.suppress(redis.RedisError):
                if int(n.info("replication").get("master_port", 0)) == master.port:
                    return n
        raise RuntimeError(f"no live replica of {master.address}")

    def caught_up(self, master: Node, timeout: float = 10) -> None:
        """Until ``master``'s replica has every write ``master`` had when this was called."""
        offset = int(master.info("replication")["master_repl_offset"])
        replica = self.replica_of(master)
        deadline = time.monotonic() + timeout
        while int(replica.info("replication").get("slave_repl_offset", 0)) < offset:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{replica.address} did not catch up with {master.address}")
            time.sleep(0.02)

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every live node says cluster_state:ok and agrees on the slots."""
        deadline = time.monotonic() + timeout
        while True:
            live = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
            with contextlib.suppress(redis.RedisError):
                states = [n.info("cluster") for n in live]
                raw = [n.client().execute_command("CLUSTER", "INFO") for n in live]
                text = [r.decode() if isinstance(r, bytes) else str(r) for r in raw]
                if states and all("cluster_state:ok" in t for t in text):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("the test cluster did not become ok")
            time.sleep(0.2)

    def masters(self) -> list[Node]:
        out = []
        for n in self.nodes:
            if n.proc is None or n.proc.poll() is not None:
                continue
            with contextlib.suppress(redis.RedisError):
                if n.info("replication").get("role") == "master":
                    out.append(n)
        return out

    def client(self) -> redis.Redis:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(self.url)  # type: ignore[return-value]

    def flush(self) -> None:
        for n in self.masters():
            c = n.client()
            c.flushall()
            c.close()

    def stop(self) -> None:
        for n in self.nodes:
            n.kill()
        self._tmp.cleanup()
