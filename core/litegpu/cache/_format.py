"""The cache entry file format (version 3).

One file per entry; all integers little-endian::

    offset      size  field
    0           8     magic  89 4C 47 43 0D 0A 1A 0A  ("\\x89LGC\\r\\n\\x1a\\n")
    8           2     format version (uint16) = 3
    10          2     flags (uint16): 0, or 1 = the checksum is SHA-256 (below)
    12          4     header length H (uint32)
    16          H     header: a UTF-8 JSON object (below)
    16+H        pad   zero bytes up to D = the next multiple of 16
    D           S     data: the sections, each at a 16-byte aligned offset, zero padding between
    D+S         32    checksum of every byte before it: farmhash Fingerprint64 (uint64) and 24 zero bytes;
                      with flag 1 (written where the pyfarmhash package is missing), SHA-256

The header object::

    {"format": "litegpu-delegate-cache", "created": <unix seconds>, "litegpu_version": "0.1.0",
     "backend": "opencl", "key_digest": "<sha256 hex>", "key": {<EntryKey canonical fields>},
     "data_size": S, "sections": [{"name": "program", "offset": 0, "size": 1234}, ...]}

Section offsets are relative to D and increase in table order; names are unique non-empty strings.
The magic's first byte is non-ASCII and it holds CR LF, SUB and LF so that a text-mode transfer or a
7-bit channel breaks it visibly (the PNG trick).  A reader refuses any other version: a new layout gets
a new version number, never a reinterpretation of this one.  The checksum finds corruption (a truncated
or damaged file), not tampering: the directory's owner and mode are what is trusted.  (Version 1 ended
in a BLAKE2b-256, version 2 in a SHA-256: hashing pose_landmark_full's 15 MB entry was 20 and about 10
ms of a warm start; farmhash's 64-bit fingerprint, LiteRT's choice for its own cache, takes under 2 ms.)
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any, BinaryIO

from .._errors import CacheError

__all__ = ["MAGIC", "FORMAT_VERSION", "FORMAT_NAME", "encode", "decode", "read_header", "Entry"]

try:  # farmhash::Fingerprint64 (the pyfarmhash package, a dependency; see cache._keys)
    import farmhash as _farmhash
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    _farmhash = None

MAGIC = b"\x89LGC\r\n\x1a\n"
FORMAT_VERSION = 3
#: flag: the checksum is SHA-256 (an entry written without pyfarmhash)
FLAG_SHA256 = 1
FORMAT_NAME = "litegpu-delegate-cache"
_PREFIX = struct.Struct("<8sHHI")  # magic, version, flags, header length
PREFIX_SIZE = _PREFIX.size  # 16
CHECKSUM_SIZE = 32
ALIGN = 16
MAX_HEADER = 16 << 20  # a header is a few kB; anything near this is not ours
MAX_SECTIONS = 65536


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _checksum(body: bytes, flags: int) -> bytes:
    """The 32-byte checksum of ``body`` (every byte before it) for an entry with ``flags``."""
    if flags & FLAG_SHA256:
        import hashlib

        return hashlib.sha256(body).digest()
    if _farmhash is None:
        raise CacheError("its checksum is a farmhash fingerprint and the pyfarmhash package is not installed")
    return struct.pack("<Q", _farmhash.fingerprint64(body)) + bytes(CHECKSUM_SIZE - 8)


class Entry:
    """A decoded entry file: its header and its sections (a plain class: creating a dataclass at import
    costs a warm start about a millisecond)."""

    __slots__ = ("header", "sections")

    def __init__(self, header: dict[str, Any], sections: dict[str, bytes] | dict[str, memoryview]) -> None:
        self.header, self.sections = header, sections


def encode(header: Mapping[str, Any], sections: Mapping[str, bytes | bytearray | memoryview]) -> bytes:
    """The bytes of one entry file.  ``header`` holds the caller's fields (key, created, ...); the
    format fields (``format``, ``sections``, ``data_size``) are added here."""
    table, parts, pos = [], [], 0
    for name, data in sections.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"section names must be non-empty strings, got {name!r}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"section {name!r} must be bytes, got {type(data).__name__}")
        mv = memoryview(data).cast("B")
        start = _align(pos)
        if start > pos:
            parts.append(bytes(start - pos))
        table.append({"name": name, "offset": start, "size": mv.nbytes})
        parts.append(mv)
        pos = start + mv.nbytes
    if len(table) > MAX_SECTIONS:
        raise ValueError(f"too many sections ({len(table)} > {MAX_SECTIONS})")
    head = dict(header)
    head.update(format=FORMAT_NAME, sections=table, data_size=pos)
    hjson = json.dumps(head, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    if len(hjson) > MAX_HEADER:
        raise ValueError(f"cache header too large ({len(hjson)} bytes)")
    flags = 0 if _farmhash is not None else FLAG_SHA256
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, flags, len(hjson))
    pad = bytes(_align(PREFIX_SIZE + len(hjson)) - PREFIX_SIZE - len(hjson))
    body = b"".join([prefix, hjson, pad, *parts])
    return body + _checksum(body, flags)


def _parse_prefix(prefix: bytes, size: int | None) -> tuple[int, int]:
    """Check magic, version and flags; return the header length and the flags."""
    if len(prefix) < PREFIX_SIZE:
        if not MAGIC.startswith(prefix[: len(MAGIC)]):
            raise CacheError("not a litegpu cache entry (bad magic)")
        raise CacheError(f"truncated: {len(prefix)} bytes, shorter than the {PREFIX_SIZE}-byte prefix")
    magic, version, flags, hlen = _PREFIX.unpack(prefix[:PREFIX_SIZE])
    if magic != MAGIC:
        raise CacheError("not a litegpu cache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise CacheError(f"format version {version}, this litegpu reads version {FORMAT_VERSION}")
    if flags & ~FLAG_SHA256:
        raise CacheError(f"unknown flags {flags:#06x}")
    if hlen > MAX_HEADER or (size is not None and PREFIX_SIZE + hlen + CHECKSUM_SIZE > size):
        raise CacheError(f"header length {hlen} does not fit the file")
    return hlen, flags


def _parse_header(raw: bytes) -> dict[str, Any]:
    try:
        head = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CacheError(f"header is not JSON ({type(e).__name__})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT_NAME:
        raise CacheError("header is not a litegpu cache header")
    if not isinstance(head.get("key"), dict) or not isinstance(head.get("key_digest"), str):
        raise CacheError("header has no key")
    return head


def _section_table(head: Mapping[str, Any], data_size: int) -> list[tuple[str, int, int]]:
    table = head.get("sections")
    if head.get("data_size") != data_size or not isinstance(table, list) or len(table) > MAX_SECTIONS:
        raise CacheError("section table does not match the file size")
    out, seen, end = [], set(), 0
    for s in table:
        if not isinstance(s, dict):
            raise CacheError("malformed section table")
        name, off, size = s.get("name"), s.get("offset"), s.get("size")
        if (not isinstance(name, str) or not name or name in seen
                or type(off) is not int or type(size) is not int or size < 0
                or off < end or off % ALIGN or off + size > data_size):
            raise CacheError(f"malformed section table entry {s!r:.80}")
        seen.add(name)
        out.append((name, off, size))
        end = off + size
    return out


def decode(buf: bytes | memoryview, *, views: bool = False, trailer: bytes | None = None) -> Entry:
    """Parse and verify a whole entry file; raise :class:`CacheError` saying what is wrong.
    ``views``: the sections as read-only memoryviews into ``buf`` instead of copies (a warm start's
    14 MB of weights copied once more cost 15 ms on the CI machine).  ``trailer``: the file's last
    ``CHECKSUM_SIZE`` bytes, read apart from the rest (``buf``), so that the checksum is computed over
    ``buf`` as it is, not over a copy of all but its end."""
    if trailer is not None and len(buf) < PREFIX_SIZE:  # too short to split: as one buffer
        buf, trailer = bytes(buf) + trailer, None
    mv = memoryview(buf).cast("B")
    if trailer is None:
        n = mv.nbytes
        body = mv[: max(n - CHECKSUM_SIZE, 0)]
        trailer = bytes(mv[body.nbytes:])
    else:
        body = mv
        n = mv.nbytes + len(trailer)
    hlen, flags = _parse_prefix(bytes(mv[:PREFIX_SIZE]), n)
    data_start = _align(PREFIX_SIZE + hlen)
    if n < data_start + CHECKSUM_SIZE:
        raise CacheError(f"truncated: {n} bytes")
    # Checksum before interpreting anything else: a bit flip anywhere is reported as such.
    raw = buf if isinstance(buf, bytes) and len(buf) == body.nbytes else bytes(body)
    if _checksum(raw, flags) != trailer:
        raise CacheError("checksum mismatch (truncated or corrupted)")
    head = _parse_header(bytes(mv[PREFIX_SIZE: PREFIX_SIZE + hlen]))
    data = mv[data_start: n - CHECKSUM_SIZE]
    table = _section_table(head, data.nbytes)
    if views:
        data = data.toreadonly()
        return Entry(head, {name: data[off: off + size] for name, off, size in table})
    return Entry(head, {name: bytes(data[off: off + size]) for name, off, size in table})


def read_header(f: BinaryIO, size: int) -> dict[str, Any]:
    """Read only the header of an open entry file (for listings; the checksum is not verified)."""
    prefix = f.read(PREFIX_SIZE)
    hlen, _flags = _parse_prefix(prefix, size)
    raw = f.read(hlen)
    if len(raw) != hlen:
        raise CacheError("truncated header")
    head = _parse_header(raw)
    ds = head.get("data_size")
    if type(ds) is not int or size != _align(PREFIX_SIZE + hlen) + ds + CHECKSUM_SIZE:
        raise CacheError("file size does not match the header (truncated?)")
    return head
