"""``litegpu cache list|info|clear``: the serialization cache (:mod:`litegpu.cache`: compiled
delegate payloads) and the stored auto-selection decisions."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

from .._autoselect import clear_decisions, decision_dir, list_decisions
from ._common import EXIT_FAIL, add_common_args, emit_json, fmt_bytes, load_config_or_none, out, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="list, describe or clear litegpu's caches",
                       description="Manage the serialization cache (compiled delegate payloads: kernels, "
                                   "tuning) and the auto-selection decisions kept next to it.")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION")
    for name, helptext in (("list", "list the cache entries and auto-selection decisions"),
                           ("info", "cache location, state, size and cap"),
                           ("clear", "delete cache entries and auto-selection decisions")):
        c = csub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        c.add_argument("--cache-dir", metavar="DIR", help="cache directory (default: config cache.dir / user cache)")
        c.add_argument("--config", metavar="YAML", help="litegpu configuration (YAML file or preset name)")
        if name == "list":
            c.add_argument("--verify", action="store_true", help="also verify every entry's checksum")
        if name == "clear":
            c.add_argument("--backend", metavar="B", help="clear only this backend's compiled entries")
            c.add_argument("--autoselect-only", action="store_true",
                           help="clear only the auto-selection decisions")
            c.add_argument("--no-autoselect", action="store_true", help="keep the auto-selection decisions")
        add_common_args(c)
        c.set_defaults(func=run, action=name)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _cache_module() -> Any:
    try:
        from ..cache import _cli
    except ImportError:
        return None
    return _cli


def run(args: argparse.Namespace) -> int:
    config = load_config_or_none(args.config)
    cache_dir = args.cache_dir
    if cache_dir is None and config is not None:
        cache_dir = (config.data.get("cache") or {}).get("dir")
    mod = _cache_module()
    status = 0
    buf = io.StringIO()
    skip_cache = args.action == "clear" and args.autoselect_only
    # Decisions live in the same folder (entries of backend "autoselect"): cleared and counted on their own.
    cleared = None
    if args.action == "clear" and not (args.no_autoselect or args.backend):
        cleared = clear_decisions(config, args.cache_dir)
    if mod is not None and not skip_cache:
        if args.action == "list":
            status = mod.cache_list(cache_dir, as_json=args.json, verify=args.verify, out=buf)
        elif args.action == "info":
            status = mod.cache_info(cache_dir, as_json=args.json, out=buf)
        else:
            status = mod.cache_clear(cache_dir, backend=args.backend, as_json=args.json, out=buf, keep="autoselect")
    adir = decision_dir(config, args.cache_dir)
    if args.action == "list":
        auto: Any = list_decisions(config, args.cache_dir)
    elif args.action == "info":
        rows = list_decisions(config, args.cache_dir)
        auto = {"dir": str(adir), "decisions": len(rows), "bytes": sum(r.get("bytes", 0) for r in rows)}
    elif args.no_autoselect or args.backend:
        auto = {"dir": str(adir), "removed": 0}
    else:
        auto = {"dir": str(adir), "removed": cleared}
    if args.json:
        text = buf.getvalue().strip()
        emit_json({"cache": json.loads(text) if text else None,
                   "cache_note": None if mod is not None else "the litegpu.cache package is not installed",
                   "autoselect": auto})
        return status
    if mod is None:
        out("note: the litegpu.cache package is not installed: only auto-selection decisions are managed")
    elif buf.getvalue():
        out(buf.getvalue().rstrip("\n"))
    if args.action == "list":
        out(f"auto-selection decisions in {adir}: {len(auto)}")
        if auto:
            out(table(["MODEL SHA-256", "BACKEND", "PRECISION", "POLICY", "MEASURED AT"],
                      [[(r.get("fingerprint") or "?")[:16], r.get("backend"), r.get("precision") or "-",
                        r.get("policy"), r.get("measured_at")] for r in auto]))
    elif args.action == "info":
        out(f"auto-selection: {auto['decisions']} decision(s) in {auto['dir']} ({fmt_bytes(auto['bytes'])})")
    else:
        out(f"removed {auto['removed']} auto-selection decision(s) from {auto['dir']}")
    return EXIT_FAIL if status else 0
