"""``litegpu cache list|info|clear``: the command-line view of a cache directory.

Each function prints to ``out`` (human text, or JSON with ``as_json``) and returns a process exit code,
so the ``litegpu`` CLI can call them directly; ``python -m litegpu.cache`` wraps them meanwhile.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from ._store import DelegateCache

__all__ = ["cache_list", "cache_info", "cache_clear", "main"]


def _when(t: float | None) -> str:
    if t is None:
        return "?"
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int | None) -> str:
    if n is None:
        return "no cap"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _cache(dir: str | os.PathLike[str] | None) -> DelegateCache:
    return DelegateCache(dir)


def cache_list(dir: str | os.PathLike[str] | None = None, *, as_json: bool = False, verify: bool = False,
               out: TextIO | None = None) -> int:
    """Print every entry (most recently used first)."""
    out = out or sys.stdout
    cache = _cache(dir)
    entries = cache.entries(verify=verify)
    if as_json:
        json.dump([e.to_dict() for e in entries], out, indent=1)
        out.write("\n")
        return 0
    if not entries:
        print(f"no cache entries in {cache.dir}", file=out)
        return 0
    rows = []
    for e in entries:
        model = e.model_name or (f"model {e.model_token[:13]}" if e.model_token else "?")
        rows.append([model if e.valid else f"INVALID: {e.problem}", e.backend or "-", e.precision or "-",
                     "-" if e.ops is None else str(e.ops), _size(e.size), _age(e.last_used), e.path.name[:20]])
    headers = ["MODEL", "BACKEND", "PRECISION", "OPS", "SIZE", "LAST USED", "FILE"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    for r in [headers, *rows]:
        print("  ".join(c.rjust(w) if i in (3, 4) else c.ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip(), file=out)
    print(f"{len(entries)} entries in {cache.dir}; `--json` shows every field", file=out)
    return 0


def _age(t: float) -> str:
    """``"5 s ago"``, ``"3 min ago"``, ``"2 h ago"``, ``"4 days ago"``."""
    import time

    dt = max(0.0, time.time() - t)
    for limit, div, unit in ((60, 1, "s"), (3600, 60, "min"), (86400, 3600, "h")):
        if dt < limit:
            return f"{int(dt / div)} {unit} ago"
    days = int(dt / 86400)
    return f"{days} day{'s' if days != 1 else ''} ago"


def cache_info(dir: str | os.PathLike[str] | None = None, *, as_json: bool = False,
               out: TextIO | None = None) -> int:
    """Print the directory, whether caching is on, and totals."""
    out = out or sys.stdout
    info = _cache(dir).info()
    info.pop("stats")  # a fresh object's counters say nothing here
    if as_json:
        json.dump(info, out, indent=1)
        out.write("\n")
        return 0
    state = "on" if info["enabled"] else f"OFF ({info['reason']})"
    print(f"directory:    {info['dir']}{'' if info['exists'] else ' (not created yet)'}", file=out)
    print(f"caching:      {state}", file=out)
    invalid = f", {info['invalid']} invalid" if info["invalid"] else ""
    print(f"entries:      {info['entries']} ({_size(info['bytes'])}{invalid})", file=out)
    if info["backends"]:
        print("by backend:   " + ", ".join(f"{k}: {v}" for k, v in sorted(info["backends"].items())), file=out)
    print(f"size cap:     {_size(info['max_bytes'])}", file=out)
    print(f"format:       version {info['format_version']}, model token {info['fingerprint']}", file=out)
    return 0


def cache_clear(dir: str | os.PathLike[str] | None = None, *, backend: str | None = None, as_json: bool = False,
                out: TextIO | None = None, keep: str | None = None) -> int:
    """Delete every entry (or one backend's; never ``keep``'s).  Exit code 1 when the directory is refused."""
    out = out or sys.stdout
    cache = _cache(dir)
    info = cache.info()
    if not info["enabled"]:
        msg = f"not clearing {cache.dir}: {info['reason']}"
        if as_json:
            json.dump({"dir": str(cache.dir), "removed": 0, "error": msg}, out)
            out.write("\n")
        else:
            print(msg, file=out)
        return 1
    n = cache.clear(backend, keep=keep)
    if as_json:
        json.dump({"dir": str(cache.dir), "removed": n}, out)
        out.write("\n")
    else:
        print(f"removed {n} cache entr{'y' if n == 1 else 'ies'} from {cache.dir}", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m litegpu.cache",
                                 description="Inspect or clear litegpu's compiled-delegate cache.")
    ap.add_argument("command", choices=("list", "info", "clear"))
    ap.add_argument("--dir", default=None, help="cache directory (default: the user cache directory)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--verify", action="store_true", help="list: also verify every entry's checksum")
    ap.add_argument("--backend", default=None, help="clear: only this backend's entries")
    args = ap.parse_args(argv)
    if args.command == "list":
        return cache_list(args.dir, as_json=args.json, verify=args.verify)
    if args.command == "info":
        return cache_info(args.dir, as_json=args.json)
    return cache_clear(args.dir, backend=args.backend, as_json=args.json)
