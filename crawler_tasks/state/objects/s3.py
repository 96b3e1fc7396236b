"""An S3 API bucket and prefix as an object store (boto3).

The client is configured by the AWS SDK's own chain only, so that any S3-compatible store
works without settings of ours: credentials from ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), a profile (``AWS_PROFILE``) or an
instance role; the region from ``AWS_DEFAULT_REGION`` / ``AWS_REGION`` or the profile; the
endpoint from ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO, SeaweedFS, Ceph RGW,
R2...). boto3, not a client of our own: it is that chain, and it writes large objects in
parts (s3transfer). A failure is said in one line that names the bucket and what went wrong,
never a credential.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ...errors import ConfigError, ObjectMissing, StoreUnavailable
from .base import ObjectStore

#: Error codes that mean "no such object" (HEAD answers a bare 404).
_MISSING = {"NoSuchKey", "404", "NotFound"}
#: Error codes that mean the credentials were refused.
_DENIED = {
    "403",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
}

_clients: dict[int, Any] = {}
_clients_lock = threading.Lock()


def client() -> Any:
    """One boto3 S3 client per process (thread-safe; its creation is not, hence the lock)."""
    if importlib.util.find_spec("boto3") is None:
        raise ConfigError("s3:// output needs boto3: pip install 'crawler-tasks[s3]'")
    import boto3
    from botocore.config import Config

    with _clients_lock:
        made = _clients.get(0)
        if made is None:
            config = Config(
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
                max_pool_connections=16,
            )
            made = _clients[0] = boto3.session.Session().client("s3", config=config)
        return made


class S3Store(ObjectStore):
    def __init__(self, bucket: str, prefix: str = "", s3: Any = None) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._s3 = s3

    @classmethod
    def from_url(cls, url: str) -> S3Store:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        return cls(bucket, prefix)

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            self._s3 = client()
        return self._s3

    def child(self, name: str) -> S3Store:
        return S3Store(self.bucket, self._key(name), self._s3)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _fail(self, exc: Exception, name: str = "") -> StoreUnavailable:
        """``exc`` of botocore as one of ours (a line without secrets)."""
        code = ""
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
        kind = type(exc).__name__
        if name and code in _MISSING:
            return ObjectMissing(self.url, f"no object {name}")
        if code == "NoSuchBucket" or (not name and code in _MISSING):
            return StoreUnavailable(self.url, f"no bucket {self.bucket}")
        if code in _DENIED:
            return StoreUnavailable(
                self.url, f"access denied to bucket {self.bucket} ({code}): check the credentials"
            )
        if kind == "NoCredentialsError":
            why = "no credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile)"
            return StoreUnavailable(self.url, why)
        if kind in {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"}:
            return StoreUnavailable(self.url, f"cannot reach {self.s3.meta.endpoint_url}")
        return StoreUnavailable(self.url, f"{code or kind}: {str(exc)[:200]}")

    def _call(self, name: str, method: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.s3, method)(Bucket=self.bucket, **kwargs)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail(exc, name) from None

    def put(self, name: str, data: bytes) -> None:
        self._call(name, "put_object", Key=self._key(name), Body=data)

    def put_file(self, name: str, path: Path) -> None:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.s3.upload_file(str(path), self.bucket, self._key(name))
        except S3UploadFailedError as exc:  # s3transfer's wrapper: the cause says why
            cause = exc.__cause__ or exc.__context__
            raise self._fail(cause if cause is not None else exc, name) from None
        except (BotoCoreError, ClientError) as exc:
            raise self._fail(exc, name) from None

    def get(self, name: str) -> bytes:
        with self.open(name) as f:
            return f.read()

    def open(self, name: str) -> BinaryIO:
        body: BinaryIO = self._call(name, "get_object", Key=self._key(name))["Body"]
        return body

    def size(self, name: str) -> int:
        return int(self._call(name, "head_object", Key=self._key(name))["ContentLength"])

    def delete(self, name: str) -> None:
        self._call(name, "delete_object", Key=self._key(name))

    def list(self, prefix: str = "") -> Iterator[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        base = f"{self.prefix}/" if self.prefix else ""
        names = []
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base + prefix
            )
            for page in pages:
                names += [o["Key"][len(base) :] for o in page.get("Contents", ())]
        except (BotoCoreError, ClientError) as exc:
            raise self._fail(exc) from None
        return iter(sorted(names))

    def check(self) -> None:
        self._call("", "head_bucket")
