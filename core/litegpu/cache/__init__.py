"""The backend-neutral serialization cache: compiled delegate payloads on disk.

A backend builds an :class:`EntryKey` for a partition at prepare time, asks :meth:`DelegateCache.load`
for its sections (``dict[str, bytes]``) and, on a miss, compiles and hands its sections to
:meth:`DelegateCache.store`.  The cache owns the directory, the file format, integrity checks, atomic
writes and eviction; a backend only produces and consumes bytes.  See docs/design.md, "Serialization
cache".
"""

from typing import Any

from ._dirs import default_cache_dir
from ._format import FORMAT_VERSION
from ._keys import FINGERPRINT, EntryKey, canonical_json, model_token, partition_signature
from ._store import DEFAULT_MAX_BYTES, CacheStats, DelegateCache, EntryInfo

__all__ = [
    "DelegateCache",
    "EntryKey",
    "EntryInfo",
    "CacheStats",
    "model_token",
    "partition_signature",
    "canonical_json",
    "default_cache_dir",
    "DEFAULT_MAX_BYTES",
    "FORMAT_VERSION",
    "FINGERPRINT",
    "cache_list",
    "cache_info",
    "cache_clear",
]


def __getattr__(name: str) -> Any:
    # the command-line functions (argparse...) load on first use, not with every warm start's cache read
    if name in ("cache_list", "cache_info", "cache_clear"):
        from . import _cli

        return getattr(_cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
