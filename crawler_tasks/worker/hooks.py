"""The extraction hook API, where users' projects import it from::

    from crawler_tasks.worker.hooks import Follow, Page, Result

The code is in :mod:`crawler_tasks.worker.runtime.hooks` (with the loader that imports and
calls users' hooks in a worker); this module is only the public name of its three types.
"""

from .runtime.hooks import Follow, Page, Result

__all__ = ["Follow", "Page", "Result"]
