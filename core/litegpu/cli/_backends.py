"""``litegpu backends``: every registered backend, its version and devices, available or not and why."""

from __future__ import annotations

import argparse

from ._common import add_common_args, backend_infos, emit_json, out, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backends", help="list the registered backends and whether they can run here",
                       description="List every registered backend with its version and devices, "
                                   "and say why an unavailable one cannot run here.")
    add_common_args(p)
    p.add_argument("--refresh", action="store_true", help="check availability again instead of the cached answer")
    p.set_defaults(func=run)


def _plugin_problems() -> list[dict]:
    try:
        from .._plugins import get_plugins
    except ImportError:
        return []
    return [p for p in get_plugins() if p.get("status") != "ok" or p.get("problems")]


def run(args: argparse.Namespace) -> int:
    rows = backend_infos(refresh=args.refresh)
    problems = _plugin_problems()
    if args.json:
        emit_json({"backends": [r.as_dict() for r in rows],
                   "plugin_problems": [{"name": p["name"], "status": p["status"], "error": p.get("error"),
                                        "problems": p.get("problems", [])} for p in problems]})
        return 0
    lines = []
    for r in rows:
        status = "yes" if r.available else "no"
        detail = "; ".join(r.devices) if r.available else r.reason
        lines.append([r.name, r.version, status, detail or "-", r.plugin])
    out(table(["BACKEND", "VERSION", "AVAILABLE", "DEVICES / WHY NOT", "PLUGIN"], lines))
    for p in problems:
        what = p.get("error") or "; ".join(p.get("problems", []))
        out(f"plugin {p['name']!r} ({p['status']}): {what}")
    return 0
