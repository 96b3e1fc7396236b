"""Object stores: where a crawl's output ends up when its ``output`` names one.

A crawl's ``output`` is a local directory (every worker writes there, as before) or
``s3://BUCKET/PREFIX``: an S3 API store (AWS S3, MinIO, Ceph RGW, SeaweedFS, R2, GCS's
interoperability API). Workers then stage their files under their own ``CRAWLER_OUTPUT_DIR``
and upload closed segments (worker/output/uploads.py); readers (``crawler export``,
``Crawl.pages()``) read the objects from any machine.

:class:`~.base.ObjectStore` is the one interface both kinds of place answer
(:mod:`.local`, :mod:`.s3`), so a reader does not care where the files are. :func:`place`
sorts an ``output`` string: a local path, an S3 URL, or a URL of a scheme the crawler does not
write (a ConfigError, never a local directory named ``gs:``).
"""

from __future__ import annotations

from pathlib import Path

from .base import ObjectStore, is_url, local_root, looks_like_url, place

__all__ = ["ObjectStore", "is_url", "local_root", "looks_like_url", "place", "store_for"]


def store_for(output: str) -> ObjectStore:
    """The store an ``output`` (as :func:`place` gives it) names."""
    if is_url(output):
        from .s3 import S3Store  # boto3 only where S3 is used

        return S3Store.from_url(output)
    from .local import LocalStore

    return LocalStore(Path(output))
