"""A TCP forwarder on loopback that a test can make silent: :meth:`Proxy.stop` stops relaying
bytes either way without closing anything (a silent partition: connections stay open, nothing
answers, new ones are accepted and hang), :meth:`Proxy.heal` relays again."""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class Proxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server((host, 0))
        self.port = int(self._listener.getsockname()[1])
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def url(self, db: int = 0) -> str:
        return f"redis://{self.target[0]}:{self.port}/{db}"

    def stop(self) -> None:
        self._forwarding.clear()

    def heal(self) -> None:
        self._forwarding.set()

    def close(self) -> None:
        self._closed.set()
        self._forwarding.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._relay, args=(a, b), daemon=True).start()

    def _relay(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            while not self._closed.is_set():
                self._forwarding.wait()
                ready, _, _ = select.select([src], [], [], 0.2)
                if not ready or not self._forwarding.is_set():
                    continue  # silent: what was sent waits in the kernel's buffers
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
