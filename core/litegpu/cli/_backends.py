"""``litegpu backends``: every registered backend, its version and devices, available or not and why;
``--options``: the options each backend accepts in the ``backends.<name>`` configuration section."""

from __future__ import annotations

import argparse

from ._common import add_common_args, backend_infos, emit_json, out, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backends", help="list the registered backends and whether they can run here",
                       description="List every registered backend with its version and devices, "
                                   "and say why an unavailable one cannot run here.")
    add_common_args(p)
    p.add_argument("--refresh", action="store_true", help="check availability again instead of the cached answer")
    p.add_argument("--options", action="store_true",
                   help="list the options each backend accepts (configuration section backends.NAME) "
                        "with their type, default and meaning")
    p.set_defaults(func=run)


def _plugin_problems() -> list[dict]:
    try:
        from .._plugins import get_plugins
    except ImportError:
        return []
    return [p for p in get_plugins() if p.get("status") != "ok" or p.get("problems")]


def _option_rows(name: str) -> list[dict]:
    from .._backend_options import COMMON_BACKEND_OPTIONS
    from .._plugins import backend_option_schema

    schema = COMMON_BACKEND_OPTIONS if name == "all" else backend_option_schema(name)
    return [{"option": key, "type": opt.type_name(), "default": opt.default, "doc": opt.doc,
             "common": key in COMMON_BACKEND_OPTIONS}
            for key, opt in schema.items()]


def _yaml_value(v: object) -> str:
    """A default as it is written in YAML (``true``, ``null``), the form the user types."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _show_options(rows: list, as_json: bool) -> int:
    names = ["all", *(r.name for r in rows if r.name != "cpu")]
    if as_json:
        emit_json({n: _option_rows(n) for n in names})
        return 0
    out("Options go under backends.NAME in a configuration file (backends.all: every backend), or")
    out("`--option KEY=VALUE` on the command line.")
    for n in names:
        opts = [o for o in _option_rows(n) if n == "all" or not o["common"]]
        out("")
        if n == "all":
            out("backends.all (common to every backend):")
        elif not opts:
            out(f"backends.{n}: only the common options")
            continue
        else:
            out(f"backends.{n} (besides the common options):")
        out(table(["OPTION", "TYPE", "DEFAULT", "MEANING"],
                  [[o["option"], o["type"], _yaml_value(o["default"]), o["doc"]]
                   for o in opts]))
    return 0


def run(args: argparse.Namespace) -> int:
    rows = backend_infos(refresh=args.refresh)
    if args.options:
        return _show_options(rows, args.json)
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
