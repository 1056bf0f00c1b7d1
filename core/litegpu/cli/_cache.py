"""``litegpu cache list|info|clear``: the serialization cache (``litegpu.cache``) and the
stored auto-selection decisions."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from .._autoselect import clear_decisions, decision_dir, list_decisions
from ._common import CliError, add_common_args, emit_json, fmt_bytes, load_config_or_none, out, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="list, describe or clear litegpu's caches",
                       description="Manage the serialization cache (compiled kernels, tuning results) and "
                                   "the auto-selection decisions.")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION")
    for name, helptext in (("list", "list the cache entries"), ("info", "cache location, size and settings"),
                           ("clear", "delete cache entries")):
        c = csub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        c.add_argument("--cache-dir", metavar="DIR", help="cache directory (default: config cache.dir / user cache)")
        c.add_argument("--config", metavar="YAML", help="litegpu configuration (YAML file or preset name)")
        if name == "clear":
            c.add_argument("--autoselect-only", action="store_true", help="clear only the auto-selection decisions")
            c.add_argument("--model", metavar="MODEL", help="clear only the entries of this model (when supported)")
        add_common_args(c)
        c.set_defaults(func=run, action=name)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _cache_fn(name: str) -> Any:
    try:
        from ..cache import _cli
    except ImportError:
        return None
    return getattr(_cli, name, None)


def _call(fn: Any, args: argparse.Namespace, config: Any) -> Any:
    """Call a litegpu.cache CLI function with the arguments its signature accepts."""
    params = inspect.signature(fn).parameters
    kwargs: dict[str, Any] = {}
    candidates = {"cache_dir": args.cache_dir, "dir": args.cache_dir, "directory": args.cache_dir,
                  "config": config, "model": getattr(args, "model", None), "json": args.json,
                  "as_json": args.json}
    for k, v in candidates.items():
        if k in params and v is not None:
            kwargs[k] = v
    return fn(**kwargs)


def run(args: argparse.Namespace) -> int:
    config = load_config_or_none(args.config)
    fn = _cache_fn(f"cache_{args.action}")
    data: dict[str, Any] = {}
    if fn is not None and not getattr(args, "autoselect_only", False):
        result = _call(fn, args, config)
        data["cache"] = result
    elif fn is None:
        data["cache"] = None
        data["cache_note"] = "the litegpu.cache package is not installed: only auto-selection decisions are managed"
    adir = decision_dir(config, args.cache_dir)
    if args.action == "list":
        data["autoselect"] = list_decisions(config, args.cache_dir)
    elif args.action == "info":
        rows = list_decisions(config, args.cache_dir)
        data["autoselect"] = {"dir": str(adir), "decisions": len(rows), "bytes": sum(r.get("bytes", 0) for r in rows)}
    else:
        if getattr(args, "model", None) and fn is None:
            raise CliError("--model needs the litegpu.cache package")
        data["autoselect"] = {"removed": clear_decisions(config, args.cache_dir), "dir": str(adir)}
    if args.json:
        emit_json(data)
        return 0
    _print(args.action, data)
    return 0


def _print(action: str, data: dict[str, Any]) -> None:
    cache = data.get("cache")
    if cache is None:
        if data.get("cache_note"):
            out(f"note: {data['cache_note']}")
    elif isinstance(cache, str):
        out(cache.rstrip("\n"))
    elif isinstance(cache, list) and cache and isinstance(cache[0], dict):
        keys = list(cache[0].keys())
        out(table([k.upper() for k in keys], [[r.get(k) for k in keys] for r in cache]))
    elif isinstance(cache, dict):
        for k, v in cache.items():
            out(f"{k}: {v}")
    elif cache:
        out(str(cache))
    a = data["autoselect"]
    if action == "list":
        out(f"auto-selection decisions ({len(a)}):")
        if a:
            out(table(["MODEL SHA-256", "BACKEND", "PRECISION", "POLICY", "MEASURED AT"],
                      [[(r.get("fingerprint") or "?")[:16], r.get("backend"), r.get("precision") or "-",
                        r.get("policy"), r.get("measured_at")] for r in a]))
    elif action == "info":
        out(f"auto-selection decisions: {a['decisions']} in {a['dir']} ({fmt_bytes(a['bytes'])})")
    else:
        out(f"removed {a['removed']} auto-selection decision(s) from {a['dir']}")
