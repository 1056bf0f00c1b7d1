"""``litegpu inspect``: inputs/outputs, op histogram, the execution plan per backend (with the reason
for each node a delegate declines), delegate descriptions, the cached auto-selection decision,
and an SVG drawing of the graph."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from .._profile import delegate_descriptions
from ._common import (
    CliError,
    LoadedModel,
    add_backend_options,
    add_common_args,
    backend_infos,
    backend_options,
    emit_json,
    fmt_bytes,
    load_config_or_none,
    load_model,
    make_interpreter,
    make_progress,
    out,
    parse_option_pairs,
    table,
)
from ._svg import backend_map, graph_svg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a model's inputs, ops and how each backend would run it",
                       description="Show inputs/outputs, the op histogram, and for each backend the execution "
                                   "plan: which nodes it runs, why it declines the others, what its partitions "
                                   "report (transformations, planned memory); plus the cached auto-selection "
                                   "decision.  --svg draws the graph coloured by backend.")
    p.add_argument("model", help=".tflite model file")
    p.add_argument("--backend", "-b", action="append", metavar="B",
                   help="backend to plan for (repeatable; default: every available backend)")
    p.add_argument("--svg", metavar="FILE",
                   help="write the graph as SVG, coloured by the plan of the first non-cpu backend shown")
    p.add_argument("--cache-dir", metavar="DIR", help="where to look for the auto-selection decision")
    p.add_argument("--all-nodes", action="store_true",
                   help="list every node left on the CPU with its reason (default: grouped by reason)")
    add_backend_options(p)
    add_common_args(p, progress=True)
    p.set_defaults(func=run)


def _shape(t: Any) -> str:
    s = "x".join(str(d) for d in t.shape) or "scalar"
    if t.shape_signature is not None and tuple(t.shape_signature) != tuple(t.shape):
        s += " (sig " + "x".join(str(d) for d in t.shape_signature) + ")"
    return s


def _quant(t: Any) -> str | None:
    q = t.quantization
    if q is None or not np.size(q.scale):
        return None
    sc = np.asarray(q.scale).reshape(-1)
    zp = np.asarray(q.zero_point).reshape(-1)
    if sc.size == 1:
        return f"scale={sc[0]:.6g} zero_point={int(zp[0]) if zp.size else 0}"
    return f"per-axis {q.quantized_dimension}: {sc.size} scales"


def _io(model: LoadedModel, which: str) -> list[dict[str, Any]]:
    sg = model.model.subgraphs[0]
    rows = []
    for k, i in enumerate(sg.inputs if which == "inputs" else sg.outputs):
        t = sg.tensors[i]
        rows.append({"position": k, "index": t.index, "name": t.name, "shape": list(t.shape),
                     "shape_signature": None if t.shape_signature is None else list(t.shape_signature),
                     "dtype": t.dtype, "quantization": _quant(t), "_t": t})
    return rows


def node_reasons(interp: Any) -> dict[int, dict[str, str]]:
    """For every node of the main subgraph that runs on the CPU: ``{"kind", "reason"}`` where kind
    is ``folded`` (constant inputs, evaluated at prepare), ``declined`` (a delegate said no; its
    reason) or ``partitioner`` (accepted, but left on the CPU by the partition limits)."""
    from .._delegate import NodeView
    from .._plan import _resolved_tensors

    plan = interp._main.plan
    if plan is None:
        return {}
    sg = plan.subgraph
    stepped = {n for st in plan.steps for n in st.node_indices}
    # Folded nodes have their own "folded" segment (older plans merged them into a cpu one).
    on_cpu = [n for seg in plan.segments if seg.backend in ("cpu", "folded") for n in seg.node_indices]
    found: dict[int, dict[str, str]] = {}
    delegates = list(getattr(interp, "_delegates", ()))
    resolved = _resolved_tensors(sg, plan.specs) if delegates else []
    for n in on_cpu:
        op = sg.operators[n]
        if n not in stepped:
            found[n] = {"kind": "folded", "reason": "constant-folded at prepare (inputs are all constants)"}
            continue
        view = NodeView(op=op, inputs=tuple(resolved[i] if i >= 0 else None for i in op.inputs),
                        outputs=tuple(resolved[o] for o in op.outputs), subgraph=sg, model=plan.model)
        whys = []
        accepted = False
        for d in delegates:
            try:
                s = d.supports(view)
            except Exception as e:  # shown, never fatal
                whys.append(f"{d.name}: supports() raised {type(e).__name__}: {e}")
                continue
            if s:
                accepted = True
            else:
                whys.append((f"{d.name}: " if len(delegates) > 1 else "")
                            + (getattr(s, "reason", "") or "declined (no reason given)"))
        if accepted:
            found[n] = {"kind": "partitioner",
                        "reason": "accepted, but the partitioner kept it on the CPU (partition limits)"}
        elif whys:
            found[n] = {"kind": "declined", "reason": "; ".join(whys)}
    return found


def plan_for(model: LoadedModel, backend: str, config: Any, opts: dict[str, Any]) -> dict[str, Any]:
    try:
        interp = make_interpreter(model, backend, opts, config=config)
    except CliError as e:
        return {"backend": backend, "error": str(e)}
    segments = interp.get_execution_plan()
    reasons = node_reasons(interp) if backend != "cpu" else {}
    ops = model.model.subgraphs[0].operators
    unsupported = [{"node": n, "op": ops[n].name, "kind": r["kind"], "reason": r["reason"]}
                   for n, r in sorted(reasons.items())]
    descs = delegate_descriptions(interp)
    mem = [d["memory_bytes"] for d in descs if d["memory_bytes"] is not None]
    n_nodes = len(ops)
    on_backend = sum(len(s["node_indices"]) for s in segments if s["backend"] == backend)
    folded = [c for c in unsupported if c["kind"] == "folded"]
    return {"backend": backend, "options": {k: v for k, v in opts.items() if k != "cache"},
            "segments": segments, "nodes": n_nodes, "nodes_on_backend": on_backend,
            "partitions": sum(1 for s in segments if s["backend"] not in ("cpu", "folded")),
            "folded_nodes": [c["node"] for c in folded],
            "cpu_nodes": [c for c in unsupported if c["kind"] != "folded"], "partition_descriptions": descs,
            "planned_device_memory_bytes": sum(mem) if mem else None}


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    config = load_config_or_none(args.config)
    extra = parse_option_pairs(args.option)
    names = args.backend or [r.name for r in backend_infos() if r.available]
    sg = model.model.subgraphs[0]
    hist = Counter(op.name for op in sg.operators)
    all_hist = Counter(op.name for s in model.model.subgraphs for op in s.operators)
    plans = []
    with make_progress(args, "inspect", len(names)) as bar:  # GPU backends compile at prepare
        for b in names:
            bar.update(0, label=f"inspect {b}")
            plans.append(plan_for(model, b, config, backend_options(config, b, args.precision, extra)))
            bar.update()
    decision = _decision(model, config, args.cache_dir)
    inputs, outputs = _io(model, "inputs"), _io(model, "outputs")
    result = {
        "model": model.path, "bytes": len(model.data), "sha256": model.fingerprint,
        "version": getattr(model.model, "version", None), "description": getattr(model.model, "description", ""),
        "subgraphs": len(model.model.subgraphs),
        "signatures": [s.key for s in getattr(model.model, "signatures", ())],
        "inputs": [{k: v for k, v in r.items() if k != "_t"} for r in inputs],
        "outputs": [{k: v for k, v in r.items() if k != "_t"} for r in outputs],
        "operators": len(sg.operators), "op_histogram": dict(hist.most_common()),
        "op_histogram_all_subgraphs": dict(all_hist.most_common()) if len(model.model.subgraphs) > 1 else None,
        "plans": plans, "autoselect": decision,
    }
    if args.svg:
        ok = [p for p in plans if "segments" in p]
        first = next((p for p in ok if p["backend"] != "cpu"), ok[0] if ok else None)
        bmap = backend_map(first["segments"]) if first else {}
        reasons = {c["node"]: (c["reason"], c["kind"] == "declined") for c in first["cpu_nodes"]} if first else {}
        for n in first["folded_nodes"] if first else ():
            reasons[n] = ("constant-folded at prepare (inputs are all constants)", False)
        title = f"{model.name}" + (f" on {first['backend']}" if first else "")
        try:
            Path(args.svg).write_text(graph_svg(model.model, bmap, reasons, title), encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot write {args.svg}: {e.strerror or e}") from e
        result["svg"] = args.svg
    if args.json:
        emit_json(result)
        return 0
    _print(result, inputs, outputs, args.all_nodes)
    return 0


def _decision(model: LoadedModel, config: Any, cache_dir: str | None) -> dict[str, Any] | None:
    from .._autoselect import cached_decision

    try:
        dec = cached_decision(model.data, config=config, cache_dir=cache_dir)
    except Exception:  # informational: a broken cache must not break inspect
        return None
    if dec is None:
        return None
    d = dec.as_dict()
    return {k: d[k] for k in ("backend", "precision", "policy", "reason", "measured_at", "path", "candidates")}


def _ranges(ns: list[int], limit: int = 8) -> str:
    """``[1, 2, 3, 7]`` -> ``#1-3, #7`` (at most ``limit`` runs, then ``...``)."""
    runs: list[list[int]] = []
    for n in sorted(ns):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = [f"#{a}" if a == b else f"#{a}-{b}" for a, b in runs[:limit]]
    return ", ".join(text) + (", ..." if len(runs) > limit else "")


def _grouped(cpu_nodes: list[dict[str, Any]]) -> list[str]:
    """One line per reason: the ops (with counts) and node numbers it applies to."""
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for c in cpu_nodes:
        by_reason.setdefault(c["reason"], []).append(c)
    lines = []
    for reason, cs in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        ops = Counter(c["op"] for c in cs)
        what = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in ops.most_common())
        lines.append(f"{reason}: {what} ({_ranges([c['node'] for c in cs])})")
    return lines


def _idle(detail: str) -> bool:
    """"removed 0 identity nodes: none found": every count in the pass's summary is zero."""
    counts = re.findall(r"\d+", detail)
    return bool(counts) and all(int(c) == 0 for c in counts)


def _print_transformations(passes: list[dict[str, Any]]) -> None:
    """One line per pass that did something: its first detail and how many more there are."""
    if not passes:
        return
    idle = [t for t in passes if t["details"] and _idle(t["details"][0])]
    out("  transformations:")
    for t in passes:
        if t in idle:
            continue
        det = t["details"]
        more = f" (+{len(det) - 1} more)" if len(det) > 1 else ""
        out(f"    {t['pass']}" + (f": {det[0]}{more}" if det else ""))
    if idle:
        out(f"    ({len(idle)} passes found nothing to do: {', '.join(t['pass'] for t in idle)})")


def readable(v: Any, key: str = "") -> str:
    """A value from a kernel's ``describe()`` for people: floats to 3 significant digits, times
    (keys ending ``_ms``) with their unit, mappings as ``name value`` pairs."""
    unit = " ms" if key.endswith("_ms") else ""
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "-"
    if isinstance(v, float):
        return (f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}") + unit
    if isinstance(v, int):
        return fmt_bytes(v) if key.endswith("_bytes") else f"{v}{unit}"
    if isinstance(v, dict):
        total = f", total {readable(float(sum(v.values())))}" if unit and all(
            isinstance(x, (int, float)) for x in v.values()) else ""
        return "(" + ", ".join(f"{k} {readable(x)}" for k, x in v.items()) + total + ")" + unit
    if isinstance(v, (list, tuple)):
        if not v:
            return "none"
        if len(v) > 6:  # per-kernel lists (workgroups...): the count here, the values in --json
            return f"{len(v)} values (--json lists them)"
        return ", ".join(readable(x) for x in v) if key else "[" + ", ".join(readable(x) for x in v) + "]"
    return str(v)


def _print(r: dict[str, Any], inputs: list[dict], outputs: list[dict], all_nodes: bool = False) -> None:
    out(f"model: {r['model']} ({fmt_bytes(r['bytes'])}, sha256 {r['sha256'][:16]}…, schema v{r['version']}, "
        f"{r['subgraphs']} subgraph(s), {r['operators']} operators in the main subgraph)")
    if r["description"]:
        out(f"description: {r['description']}")
    if r["signatures"]:
        out(f"signatures: {', '.join(r['signatures'])}")
    for title, rows in (("inputs", inputs), ("outputs", outputs)):
        out(f"{title}:")
        out(table(["#", "NAME", "TENSOR", "SHAPE", "DTYPE", "QUANTIZATION"],
                  [[x["position"], x["name"], x["index"], _shape(x["_t"]), x["dtype"], x["quantization"] or "-"]
                   for x in rows], right=(0, 2)))
    out("op histogram (main subgraph):")
    out(table(["OP", "COUNT"], [[k, v] for k, v in r["op_histogram"].items()], right=(1,)))
    if r["op_histogram_all_subgraphs"]:
        out("op histogram (all subgraphs): " + ", ".join(f"{k} {v}" for k, v in
                                                          r["op_histogram_all_subgraphs"].items()))
    for p in r["plans"]:
        out("")
        if "error" in p:
            out(f"execution plan on {p['backend']}: not available: {p['error']}")
            continue
        out(f"execution plan on {p['backend']}: {p['nodes_on_backend']} of {p['nodes']} nodes on "
            f"{p['backend']}, {len(p['segments'])} segment(s)")
        rows = []
        for s in p["segments"]:
            ns = s["node_indices"]
            rng = _ranges(ns, limit=3) if ns else "-"
            hist = Counter(s["op_names"])
            rows.append([s["backend"], rng, len(ns), ", ".join(f"{k} x{v}" if v > 1 else k
                                                               for k, v in hist.most_common())])
        out(table(["BACKEND", "NODES", "COUNT", "OPS"], rows, right=(2,)))
        if p["folded_nodes"]:
            ops = Counter(r["op_names"][r["node_indices"].index(n)] for n in p["folded_nodes"]
                          for r in p["segments"] if n in r["node_indices"])
            out(f"{len(p['folded_nodes'])} node(s) constant-folded at prepare (run once, by no backend): "
                + ", ".join(f"{k} x{v}" if v > 1 else k for k, v in ops.most_common()))
        if p["cpu_nodes"] and p["backend"] != "cpu":
            out(f"nodes left on the CPU by {p['backend']} ({len(p['cpu_nodes'])}):")
            if all_nodes:
                for c in p["cpu_nodes"]:
                    out(f"  #{c['node']} {c['op']}: {c['reason']}")
            else:
                for line in _grouped(p["cpu_nodes"]):
                    out(f"  {line}")
        for d in p["partition_descriptions"]:
            facts = []
            if d["memory_bytes"] is not None:
                facts.append(f"planned device memory: {fmt_bytes(d['memory_bytes'])}")
            other = {k: v for k, v in d["describe"].items()
                     if k not in ("transformations", "passes", "memory", "kernels")}
            if isinstance(d["describe"].get("kernels"), list):
                facts.append(f"{len(d['describe']['kernels'])} kernels")
            if other:
                facts.append(", ".join(f"{k}={readable(v, k)}" for k, v in other.items()))
            out(f"{d['label']}: " + ("; ".join(facts) if facts else
                                      "" if d["transformations"] else "(describe() reports nothing)"))
            _print_transformations(d["transformations"])
        if p["planned_device_memory_bytes"] is not None:
            out(f"planned device memory in all: {fmt_bytes(p['planned_device_memory_bytes'])}")
    out("")
    dec = r["autoselect"]
    if dec is None:
        out("auto-selection: no cached decision (run `litegpu autoselect MODEL`)")
    else:
        choice = dec["backend"] + (f" ({dec['precision']})" if dec["precision"] else "")
        out(f"auto-selection ({dec['policy']}, measured {dec['measured_at']}): {choice}")
        out(f"  why: {dec['reason']}")
    if r.get("svg"):
        out(f"graph drawn to {r['svg']}")
