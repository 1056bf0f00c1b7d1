"""Per-kernel GPU time of one OpenCL or Vulkan invoke, and what other kernel variants would take.

``python bench/gpu_kernels.py [--backend opencl|vulkan] [--models a,b] [--explore [--wgs N] [--kernels a,b]
[--space KERNEL.OPTION=V,V ...] [--top N] [--dedupe] [--no-same]] [--json out.json] [--cost field=value,...]
[--set MODULE.NAME=VALUE ...] [--rows N]``
profiles every launch (Vulkan: and every staging copy, as ``copy`` rows) of
each model's partition on a profiling queue (median of ``--runs`` per launch) and prints the kernels
that take the most time.  With ``--explore`` every launch is also re-rendered with the other values
of its template's tuning options (e.g. ``block_w`` / ``block_s`` of conv2d) and work groups, timed
the same way, so a heuristic can be checked against the best variant found (OpenCL only; ``--wgs``: work
groups tried per variant whose group is not fixed, the runtime's first; ``--kernels``: explore only those
kernels' launches, e.g. ``conv2d,conv2d_tiled``, the rest timed as run; ``--space``: one option's values,
e.g. ``conv2d.split=1,8,16``; ``--top N``: a conv launch's N variants the cost model ranks cheapest, each
conv2d one also with pack, unroll, two_round at their defaults, instead of the option product; ``--dedupe``: a launch repeated in
a model explored once; ``--no-same``: not
conv2d's launches as conv2d_tiled and back); ``--json``
then keeps every variant's time, the data the cost model (``litegpu.gpu._cost``) is calibrated on.
Vulkan times come from timestamp queries around each command of the partition's command buffer,
recorded with a barrier after each command so that they run one at a time, like OpenCL's in-order
profiling queue.  ``--cost`` overrides fields of the device's cost-model calibration
(``litegpu.gpu._cost.DeviceCost``) for the run, to time the variants another calibration picks in the same
session (e.g. the previous constants against the new ones).  ``--set`` flips a compiler module constant first
(as ``gpu_profile.py``'s, for per-launch A/B runs); ``--rows N`` lists a model's N most expensive launches (0:
every launch, in plan order; default 12).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models, override_cost, set_attribute  # noqa: E402

#: template options worth exploring (values beyond the spec's are skipped by render)
_KEEP: list = []
_EXPLORE = {"conv2d": {"block_w": (1, 2, 4), "block_s": (1, 2), "split": (1, 4, 8, 16, 32, 64, 128),
                        "unroll": (1, 2, 4), "pack": (1, 2, 4, 8)},
            "conv2d_tiled": {"tile_p": (16, 32, 64), "tile_s": (1, 2, 4, 8), "kc": (2, 4, 8)},
            "dw_pw_conv2d": {"pack": (1, 2, 4, 8), "two_round": (False, True)},  # split launches (pack needs one)
            "heads": {"split": (1, 4, 16, 32, 64, 128)},  # FULLY_CONNECTED (one head) and the sibling heads
            "reduce": {"split": (1, 16, 64, 128, 256, 512, 1024), "unroll": (1, 4)}}


def _explored(kernel: str, opts: dict) -> bool:
    """Whether ``--explore`` times this option set: ``pack`` and ``two_round`` only with a split, at most 128
    threads a group (conv2d's chooser, ``_cost._MAX_PACKED``)."""
    split, pack = opts.get("split", 1), opts.get("pack", 1)
    return (pack == 1 and not opts.get("two_round")) or (split > 1 and split * pack <= 128)


#: kernels that compute the same launch with the same bindings and params (an ungrouped conv2d is also a
#: conv2d_tiled launch): --explore times the other kernel's variants too, keeping the epilogue options
_SAME_LAUNCH = {"conv2d": "conv2d_tiled", "conv2d_tiled": "conv2d"}
_EPILOGUE = ("act", "residual", "residual_act", "qdq", "residual_channels")


def _time_launches(cl, ctx, items, runs: int) -> list[float]:
    """Median GPU time (us) of each (kernel, gsize, wg) on a profiling queue (pyopencl's, on the backend's
    context and kernels: their handles wrapped)."""
    if not isinstance(ctx, cl.Context):
        ctx = cl.Context.from_int_ptr(ctx.int_ptr)
    items = [(k if isinstance(k, cl.Kernel) else cl.Kernel.from_int_ptr(k.int_ptr), g, w) for k, g, w in items]
    pq = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    samples: list[list[float]] = [[] for _ in items]
    for _ in range(runs):
        evs = [cl.enqueue_nd_range_kernel(pq, k, g, w) for k, g, w in items]
        pq.finish()
        for i, e in enumerate(evs):
            samples[i].append((e.profile.end - e.profile.start) * 1e-3)
    return [statistics.median(s) for s in samples]


def _gsize(grid, wg):
    return tuple(-(-g // w) * w for g, w in zip(grid, wg, strict=False))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--explore", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--backend", default="opencl", choices=("opencl", "vulkan"))
    ap.add_argument("--wgs", type=int, default=8,
                    help="--explore: work groups timed per variant without a fixed group (the runtime's is the first)")
    ap.add_argument("--kernels", default="", help="--explore: only the launches of these kernels (a,b)")
    ap.add_argument("--space", action="append", default=[], metavar="KERNEL.OPTION=V,V",
                    help="--explore: the values of one option to explore (replaces the default's; repeatable)")
    ap.add_argument("--top", type=int, default=0,
                    help="--explore: a conv launch's N variants the cost model ranks best (and each one's twin "
                         "without pack / unroll) instead of the option product")
    ap.add_argument("--dedupe", action="store_true",
                    help="--explore: explore a launch once per model (kernel, options and params repeat)")
    ap.add_argument("--no-same", action="store_true",
                    help="--explore: not the other kernel of the same launch (conv2d <-> conv2d_tiled)")
    ap.add_argument("--cost", default="", help="cost-model overrides for this run, e.g. step_us=0.42,overlap=0")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="set a compiler module constant before compiling (an A/B switch, as gpu_profile.py's)")
    ap.add_argument("--rows", type=int, default=12, help="launches listed per model, most expensive first (0: all, "
                                                          "in plan order)")
    args = ap.parse_args()
    _ROWS[0] = args.rows
    if args.cost:
        override_cost(args.cost)
    for item in args.set:
        set_attribute(item)
        print(f"set {item}")
    for item in args.space:
        target, values = item.split("=", 1)
        kern, opt = target.split(".", 1)
        _EXPLORE.setdefault(kern, {})[opt] = tuple(_value(v) for v in values.split(","))
    if args.backend == "vulkan":
        if args.explore:
            raise SystemExit("--explore is OpenCL only")
        return _vulkan(args)

    import pyopencl as cl
    from litegpu.gpu._tuning import candidates
    from litegpu.gpu.kernels import kernel_spec, render

    print(machine_line())
    report: dict[str, list[dict]] = {}
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        d, it, dev, k = delegated(path, "opencl", args.precision)
        bp = getattr(k, "base_pointer", "")  # the variants bind as the runtime's launches do
        times = _time_launches(cl, dev.ctx, launch_items(k), args.runs)
        rows = []
        seen: set[str] = set()
        for i, (ln, op, t) in enumerate(zip(k._launches, k.ops, times, strict=True)):
            row = {"label": ln.label, "kernel": op.kernel, "options": dict(ln.kernel.options),
                   "params": {kk: v for kk, v in op.params.items() if isinstance(v, (int, float))},
                   "grid": list(ln.grid), "wg": list(ln.kernel.workgroup), "us": round(t, 2)}
            _with_estimate(row, dev.info)
            same = json.dumps([op.kernel, row["options"], row["params"]], sort_keys=True, default=str)
            if args.explore and not (args.dedupe and same in seen):
                seen.add(same)
                variants = []
                kernels = [op.kernel]
                if op.kernel in _SAME_LAUNCH and not op.options.get("grouped") and not args.no_same:
                    kernels.append(_SAME_LAUNCH[op.kernel])
                jobs = []
                wanted = not args.kernels or op.kernel in args.kernels.split(",")
                if wanted and args.top and op.kernel in _SAME_LAUNCH:
                    jobs, kernels = _top_jobs(op, dev.info, args.top), []
                for kern in kernels if wanted else []:
                    space = _EXPLORE.get(kern, {})
                    keys = list(space)
                    base = dict(op.options) if kern == op.kernel else \
                        {kk: v for kk, v in op.options.items() if kk in _EPILOGUE}
                    for combo in itertools.product(*[space[kk] for kk in keys]) if keys else [()]:
                        jobs.append((kern, keys, {**base, **dict(zip(keys, combo, strict=True))}))
                for kern, keys, opts in jobs:
                    if (opts.get("grouped") and opts.get("block_s", 1) != 1) or not _explored(kern, opts):
                        continue
                    try:
                        probe = render(kern, dev.dialect, k.plan.precision, base_pointer=bp, **opts)
                    except Exception as e:  # noqa: BLE001 - a variant the template refuses
                        variants.append({"options": opts, "error": str(e)[:200]})
                        continue
                    grid = probe.global_size(op.params)
                    fixed = kernel_spec(kern).fixed_workgroup(kernel_spec(kern).resolve(opts))
                    cands = [fixed] if fixed else candidates(kern, grid, dev.info, "exhaustive")[:args.wgs]
                    vitems, vmeta = [], []
                    for wg in cands:
                        rk = probe if tuple(wg) == probe.workgroup else render(
                            kern, dev.dialect, k.plan.precision, workgroup=wg, base_pointer=bp, **opts)
                        try:
                            bound = dev.bind(dev.compile(rk), rk, _refs_of(k, i), op.params)
                        except Exception as e:  # noqa: BLE001
                            variants.append({"options": opts, "wg": list(wg), "error": str(e)[:200]})
                            continue
                        lim = dev.kernel_max_workgroup(bound)
                        if lim and int(np.prod(wg)) > lim:
                            continue
                        # (rk's own grid: a branched launch's z range follows its work group)
                        vitems.append((bound[0], _gsize(rk.global_size(op.params), wg), tuple(wg)))
                        vmeta.append((opts, wg, bound))
                        _KEEP.append(bound)  # released buffers under a live kernel crash some drivers
                    if vitems:
                        vt = _time_launches(cl, dev.ctx, vitems, 7)
                        for (o, wg, _b), t in zip(vmeta, vt, strict=True):
                            variants.append({"kernel": kern, "options": {kk: o[kk] for kk in keys},
                                             "wg": list(wg), "us": round(t, 2)})
                ok = [v for v in variants if "us" in v]
                row["best"] = min(ok, key=lambda v: v["us"]) if ok else None
                row["variants"] = variants  # every variant's time (and refusal), to calibrate _cost against
            rows.append(row)
        report[name] = rows
        _KEEP.extend([d, it])
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
        _print_rows(name, rows, sum((r.get("best") or r)["us"] for r in rows) if args.explore else None)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def _top_jobs(op, info, n: int) -> list[tuple[str, list[str], dict]]:
    """``--top``: the ``n`` conv2d / conv2d_tiled variants of a conv launch the cost model ranks cheapest,
    with each conv2d one's twins at pack 1, unroll 1, two_round False and all three (what those options
    change, measured side by side), as ``(kernel, tuning keys, options)`` jobs."""
    from litegpu.gpu._cost import conv_candidates, estimate, profile_for
    from litegpu.gpu.ops.conv import tiled_has_form

    dev, o = profile_for(info), op.options
    tiled = op.kernel == "conv2d_tiled" or tiled_has_form(o)
    ranked = sorted(conv_candidates(op.params, dev, bool(o.get("grouped")), tiled, o),
                    key=lambda c: estimate(c[2], dev))
    picked: dict[tuple, None] = {}
    for kern, opts, _ in ranked[:n]:
        picked[(kern, tuple(opts.items()))] = None
        if kern == "conv2d":  # its twins: each of pack, unroll, two_round at its default, and all three
            plain = {"pack": 1, "unroll": 1, "two_round": False}
            for twin in [{k: v} for k, v in plain.items()] + [plain]:
                picked[(kern, tuple({**opts, **twin}.items()))] = None
    jobs = []
    for kern, items in picked:
        base = dict(o) if kern == op.kernel else {kk: v for kk, v in o.items() if kk in _EPILOGUE}
        jobs.append((kern, [kk for kk, _ in items], {**base, **dict(items)}))
    return jobs


def _value(text: str):
    """An option value of ``--space``: an int, a bool (True/False) or a string."""
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        return text


def _row(label: str, kernel: str, options: dict, params: dict, grid: list, wg: list, us: float,
         info=None) -> dict:
    row = {"label": label, "kernel": kernel, "options": options, "params": params, "grid": grid, "wg": wg,
           "us": round(us, 2)}
    return _with_estimate(row, info)


def _with_estimate(row: dict, info) -> dict:
    """The cost model's estimate for the launch on this device (``est``), to calibrate it against ``us``."""
    from litegpu.gpu._cost import estimate, launch_work, profile_for

    w = launch_work(row["kernel"], row["options"], row["params"]) if info is not None else None
    if w is not None:
        row["est"] = round(estimate(w, profile_for(info)), 2)
    return row


#: launches _print_rows lists (the most expensive first; 0: every launch, in plan order); --rows
_ROWS = [12]


def _print_rows(name: str, rows: list[dict], best: float | None = None) -> None:
    total = sum(r["us"] for r in rows)
    print(f"\n## {name}: {len(rows)} launches, GPU sum {total:.1f} us"
          + (f", best variants sum {best:.1f} us" if best is not None else ""))
    for r in sorted(rows, key=lambda r: -r["us"])[:_ROWS[0]] if _ROWS[0] else rows:
        extra = f" best {r['best']['us']:.1f} us {r['best']}" if r.get("best") else ""
        est = f"(est {r['est']:5.1f})" if "est" in r else " " * 11
        print(f"  {r['us']:8.1f} us {est} {r['kernel']:<18} {r['grid']} wg {r['wg']} {r['options']} "
              f"{r['label'][:60]}{extra}")
    by_kernel: dict[str, float] = {}
    for r in rows:
        by_kernel[r["kernel"]] = by_kernel.get(r["kernel"], 0.0) + r["us"]
    print("  by kernel: " + ", ".join(f"{kk} {v:.0f}" for kk, v in sorted(by_kernel.items(), key=lambda x: -x[1])))


def _vulkan(args) -> int:
    """Vulkan: timestamps around every dispatch and staging copy of the invoke's command buffer."""
    print(machine_line())
    report: dict[str, list[dict]] = {}
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        rows, dev, k = vulkan_rows(path, args.precision, args.runs)
        report[name] = rows
        _print_rows(name, rows)
        st = dev.recording_stats(k._recording)
        print(f"  command buffer: {st}; memory: " + "; ".join(
            f"{b['kind']} {b['used'] / 2**20:.2f} MiB ({b['flags']})" for b in dev.memory_report()))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def vulkan_rows(path: Path, precision: str, runs: int) -> tuple[list[dict], Any, Any]:
    """``(rows, device, kernel)``: the median Vulkan timestamp time of every dispatch and staging copy of
    the model's delegated partition (a row per command, as ``_row`` makes them)."""
    d, it, dev, k = delegated(path, "vulkan", precision)
    ups = [b.ref for b in k._inputs]
    downs = [b.ref for b in k._outputs if b is not None]
    prof = dev.record([(ln.bound, ln.kernel, ln.grid) for ln in k._launches], uploads=ups, downloads=downs,
                      profile=True)
    samples: dict[tuple[str, int], list[float]] = {}
    for _ in range(runs):
        dev.replay(prof)
        dev.finish()
        for what, i, us in dev.timestamps(prof):
            samples.setdefault((what, i), []).append(us)
    rows = []
    for (what, i), ts in samples.items():
        t = statistics.median(ts)
        if what == "dispatch":
            ln, op = k._launches[i], k.ops[i]
            rows.append(_row(ln.label, op.kernel, dict(ln.kernel.options),
                             {kk: v for kk, v in op.params.items() if isinstance(v, (int, float))},
                             list(ln.grid), list(ln.kernel.workgroup), t, dev.info))
        else:
            ref = (ups if what == "upload" else downs)[i]
            rows.append(_row(f"{what} staging copy {i}", "copy", {}, {"bytes": ref.nbytes}, [ref.nbytes], [], t))
    _KEEP.extend([d, it])
    return rows, dev, k


def delegated(path: Path, backend: str, precision: str) -> tuple[Any, Any, Any, Any]:
    """``(delegate, interpreter, device, kernel)`` of the model on ``backend`` (no cache): the kernel is its
    one delegated partition, whose ``_launches`` are the planned launches."""
    import litegpu

    d = litegpu.load_delegate(backend, {"precision": precision, "cache": {"enabled": False}})
    it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
    it.allocate_tensors()
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    return d, it, d.device, k


def launch_items(k) -> list[tuple]:
    """OpenCL ``(kernel, global size, work group)`` of each launch of partition kernel ``k``."""
    return [(ln.bound[0], _gsize(ln.grid, ln.kernel.workgroup), ln.kernel.workgroup) for ln in k._launches]


def _refs_of(k, i):
    """The buffer refs launch ``i`` binds, in binding order (constants were uploaded at prepare)."""
    from litegpu.gpu._device import BufferRef

    if not getattr(k, "base_pointer", ""):
        # re-wrap the bound sub-buffers so dev.bind can re-bind them unchanged
        return [BufferRef(s, 0, s.size) for s in k._launches[i].bound[1]]
    # one allocation, each buffer an offset into it (the runtime's base-pointer binding): the refs as the runtime
    # made them -- the plan's tensors' spans, the constants in binding order over the launches
    consts = 0
    for op in k.ops[:i]:
        consts += sum(isinstance(src, str) for _name, src in op.bindings)
    op, refs = k.ops[i], []
    for name, src in op.bindings:
        if isinstance(src, str):
            refs.append(k._const_bufs[consts])
            consts += 1
        else:
            refs.append(k._span(op, name, k._refs[src]))
    return refs


if __name__ == "__main__":
    raise SystemExit(main())
