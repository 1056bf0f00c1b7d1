"""GPU latency: litegpu backends vs LiteRT XNNPACK (1 and N threads) and LiteRT's GPU accelerator.

Usage: ``python bench/gpu.py [--backends opencl] [--precisions fp32,fp16] [--runs N] [--models a,b]
[--threads 16] [--json FILE] [--set MODULE.NAME=VALUE] [--variant LABEL:MODULE.NAME=VALUE[;...]]``

``--variant``: one more litegpu column per backend and precision whose delegate (device included: a
backend's ``DeviceInfo`` is read then) and plans are made with those module constants set (restored after):
a plan A/B in one process, the litegpu columns of a model timed interleaved, run by run and batch by batch.

Every engine runs the same model on the same random input in this one process.  Two figures per engine:

- host to host: ``set input -> invoke -> read every output``, as an application sees it; the median of
  ``--runs`` runs after warm-ups;
- device-bound: the input set once, ``--runs`` runs back to back, then one read of every output, divided
  by ``--runs`` (for LiteRT's CompiledModel this is its real GPU rate: its Python readback costs about
  0.7 ms a read); the median of 5 such batches.

GPU kernel time per launch comes from bench/gpu_profile.py.  LiteRT's GPU accelerator runs fp16 unless
``enforce_f32``: our fp32 is paired with LiteRT GPU fp32 (enforce_f32=True), our fp16 modes with its
default.  For fp16 columns the storage of every output in the delegate's plan is printed
(float16, or float32 where the mixed-precision rules keep it).  Accuracy is reported against LiteRT XNNPACK
(or LiteRT's GPU accelerator where XNNPACK lacks a custom op).  Prints a Markdown table with machine
and date.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models, set_attribute  # noqa: E402
from _common import median_ms as _median_ms  # noqa: E402


def _interp_runner(it, x):
    """(host-to-host run, device-bound batch) for an Interpreter-like object."""
    inp = it.get_input_details()[0]["index"]
    outs = [d["index"] for d in it.get_output_details()]
    it.allocate_tensors()

    def run():
        it.set_tensor(inp, x)
        it.invoke()
        return [it.get_tensor(o) for o in outs]

    def bound(n: int):
        it.set_tensor(inp, x)
        for _ in range(n):
            it.invoke()
        return [it.get_tensor(o) for o in outs]

    return run, bound


def _litert_gpu_runner(path: str, x, enforce_f32: bool):
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import GpuOptions, Options

    opts = Options(hardware_accelerators=HardwareAccelerator.GPU, gpu_options=GpuOptions(enforce_f32=enforce_f32))
    model = CompiledModel.from_file(path, options=opts)
    ins = model.create_input_buffers(0)
    outs = model.create_output_buffers(0)
    details = model.get_output_tensor_details(model.get_signature_by_index(0)["key"]) \
        if hasattr(model, "get_signature_by_index") else None
    sizes = []
    for name, d in (details or {}).items():
        sizes.append((name, int(np.prod(d["shape"])), d["dtype"], tuple(d["shape"])))

    def read():
        return [b.read(n, np.dtype(dt)).reshape(shape) for b, (_, n, dt, shape) in zip(outs, sizes, strict=False)]

    def run():
        ins[0].write(x)
        model.run_by_index(0, ins, outs)
        return read()

    def bound(n: int):
        ins[0].write(x)
        for _ in range(n):
            model.run_by_index(0, ins, outs)
        return read()

    return run, bound, model.is_fully_accelerated()


def _interleaved_ms(runs_of: list, runs: int, warmup: int = 5) -> list[float]:
    """Each function's median wall time (ms), the functions called in turn run by run (no drift between them)."""
    for _ in range(warmup):
        for fn in runs_of:
            fn()
    ts: list[list[float]] = [[] for _ in runs_of]
    for _ in range(runs):
        for i, fn in enumerate(runs_of):
            t0 = time.perf_counter()
            fn()
            ts[i].append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e3 for t in ts]


def _interleaved_bound_ms(bounds: list, runs: int, batches: int = 5) -> list[float]:
    """:func:`_bound_ms` of each, the batches taken in turn."""
    for b in bounds:
        b(2)
    ts: list[list[float]] = [[] for _ in bounds]
    for _ in range(batches):
        for i, b in enumerate(bounds):
            t0 = time.perf_counter()
            b(runs)
            ts[i].append((time.perf_counter() - t0) / runs)
    return [statistics.median(t) * 1e3 for t in ts]


class _Settings:
    """``MODULE.NAME=VALUE;...`` set while in the ``with`` block, the old values restored after."""

    def __init__(self, spec: str) -> None:
        self.items = [i for i in spec.split(";") if i]
        self.old: list = []

    def __enter__(self) -> None:
        import importlib

        for item in self.items:
            target, old = set_attribute(item)
            module, name = target.rsplit(".", 1)
            self.old.append((importlib.import_module(module), name, old))

    def __exit__(self, *exc) -> None:
        for mod, name, old in reversed(self.old):
            setattr(mod, name, old)
        self.old.clear()


def _bound_ms(bound, runs: int, batches: int = 5) -> float:
    bound(2)
    ts = []
    for _ in range(batches):
        t0 = time.perf_counter()
        bound(runs)
        ts.append((time.perf_counter() - t0) / runs)
    return statistics.median(ts) * 1e3


def _output_storage(it) -> dict[str, str]:
    """Each output's storage in the delegate's plan (float16 / float32 / ...), by tensor name."""
    out = {}
    for k in [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]:
        plan = getattr(k, "plan", None)
        if plan is None:
            continue
        for tid in plan.outputs:
            t = plan.tensors[tid]
            out[t.name] = t.storage
    return out


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.shape != b.shape:
        return math.nan
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def _worst(outs, ref) -> float:
    # LiteRT's CompiledModel may order outputs by signature name: match by shape and closeness.
    errs = []
    for o in outs:
        cands = [_rel(o, r) for r in ref if np.size(r) == np.size(o)]
        errs.append(min(cands) if cands else math.nan)
    return max(errs) if errs else math.nan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="opencl")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--models", default="")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--no-litert-gpu", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="set a module constant first (an A/B switch, e.g. "
                         "litegpu_opencl._device.PINNED_TRANSFERS=True); repeatable")
    ap.add_argument("--seed", type=int, default=0, help="seed of the uniform(-1, 1) model input (errors depend on it)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:MODULE.NAME=VALUE[;...]",
                    help="one more litegpu column per backend and precision, its delegate and plans made with these "
                         "module constants set (e.g. nohost:litegpu_opencl._device.LAUNCH_HOST_US={}); the litegpu "
                         "columns of a model are then timed interleaved; repeatable")
    args = ap.parse_args()
    for item in args.set:
        set_attribute(item)
        print(f"set {item}")

    import litegpu
    from ai_edge_litert import interpreter as litert

    models = mediapipe_models(args.models, default=GPU_SET)
    backends = [b for b in args.backends.split(",") if b]
    precisions = [p for p in args.precisions.split(",") if p]
    variants = [("", "")] + [tuple(v.split(":", 1)) for v in args.variant]  # (label, settings); "" as built
    delegates = {}  # (backend, precision, variant label) -> delegate
    for label, spec in variants:
        for b in backends:
            for p in precisions:
                with _Settings(spec):
                    try:
                        d = litegpu.load_delegate(b, {"precision": p, "cache": {"enabled": False}})
                    except litegpu.LiteGPUError as e:
                        print(f"skip {b}/{p}: {e}", file=sys.stderr)
                        continue
                    # the device's queries (its DeviceInfo, which the backend fills from its constants) under spec
                    getattr(getattr(d, "device", None), "info", None)
                delegates[(b, p, label)] = d
    settings = dict(variants)
    devinfo = {f"{b}": d.devices() for (b, _, _), d in delegates.items()}

    rows = []
    for name, path in models.items():
        path = str(path)
        probe = litegpu.Interpreter(model_path=path)
        shape = tuple(probe.get_input_details()[0]["shape"])
        x = np.random.default_rng(args.seed).uniform(-1, 1, shape).astype(np.float32)
        row: dict = {"model": name}
        ref = None
        for t in (1, args.threads):
            try:
                run, _ = _interp_runner(litert.Interpreter(model_path=path, num_threads=t), x)
                row[f"xnnpack_{t}t_ms"] = _median_ms(run, args.runs)
                ref = ref if ref is not None else run()
            except Exception as e:  # noqa: BLE001 - MediaPipe custom ops are missing from LiteRT's CPU build
                row[f"xnnpack_{t}t_ms"] = math.nan
                row["note"] = str(e).splitlines()[0][:70]
        # LiteRT GPU in the precision that matches ours: fp32 (enforce_f32) for our fp32, fp16 for our fp16s
        litert_precisions = [] if args.no_litert_gpu else \
            sorted({"fp32" if p == "fp32" else "fp16" for p in precisions}, reverse=True)
        for lp in litert_precisions:
            key = f"litert_gpu_{lp}"
            try:
                run, bound, full = _litert_gpu_runner(path, x, enforce_f32=lp == "fp32")
                row[f"{key}_ms"] = _median_ms(run, args.runs)
                row[f"{key}_bound_ms"] = _bound_ms(bound, args.runs)
                row[f"{key}_full"] = bool(full)
                gpu_out = run()
                if ref is None:
                    ref = gpu_out
                else:
                    row[f"{key}_err"] = _worst(gpu_out, ref)
            except Exception as e:  # noqa: BLE001
                row[f"{key}_ms"] = row[f"{key}_bound_ms"] = math.nan
                row[f"{key}_note"] = str(e).splitlines()[0][:70]
        engines = []  # (column, run, bound)
        for (b, p, label), d in delegates.items():
            col = f"{b}_{p}" + (f"_{label}" if label else "")
            with _Settings(settings[label]):
                it = litegpu.Interpreter(model_path=path, experimental_delegates=[d])
                t0 = time.perf_counter()
                run, bound = _interp_runner(it, x)
            row[f"{col}_init_ms"] = (time.perf_counter() - t0) * 1e3
            plan = it.get_execution_plan()
            row[f"{col}_cpu_nodes"] = sum(len(s["node_indices"]) for s in plan if s["backend"] == "cpu")
            row[f"{col}_launches"] = sum(len(s.kernel._launches) for s in it._main.plan.steps if s.kind == "delegate")
            row[f"{col}_outputs"] = _output_storage(it)
            if ref is not None:
                row[f"{col}_err"] = _worst(run(), ref)
            engines.append((col, run, bound))
        if len(variants) > 1:  # a plan A/B: the columns interleaved
            for (col, _, _), t in zip(engines, _interleaved_ms([e[1] for e in engines], args.runs), strict=True):
                row[f"{col}_ms"] = t
            for (col, _, _), t in zip(engines, _interleaved_bound_ms([e[2] for e in engines], args.runs), strict=True):
                row[f"{col}_bound_ms"] = t
        else:
            for col, run, bound in engines:
                row[f"{col}_ms"] = _median_ms(run, args.runs)
                row[f"{col}_bound_ms"] = _bound_ms(bound, args.runs)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    print(f"\n{machine_line()}" + "".join(f"; --set {item}" for item in args.set))
    for b, devs in devinfo.items():
        print(f"{b} devices: {', '.join(devs)}")
    cols = [f"{b}_{p}" + (f"_{label}" if label else "") for (b, p, label) in delegates]
    for label, spec in variants[1:]:
        print(f"variant {label}: {spec}")
    lcols = [f"litert_gpu_{lp}" for lp in ("fp32", "fp16") if any(f"litert_gpu_{lp}_ms" in r for r in rows)]

    def fmt(v, spec=".3f"):
        return format(v, spec) if isinstance(v, float) and not math.isnan(v) else "n/a"

    for title, suffix in (("host to host", "_ms"), ("device-bound", "_bound_ms")):
        print(f"\n{title}, ms (median):")
        names = [f"litegpu {c}" for c in cols] + [f"LiteRT GPU {c[-4:]}" for c in lcols]
        names += ["XNNPACK 1t", f"XNNPACK {args.threads}t"] if suffix == "_ms" else []
        print("| model | " + " | ".join(names) + " |")
        print("|" + "---|" * (len(names) + 1))
        for r in rows:
            cells = [fmt(r.get(c + suffix, math.nan)) for c in cols + lcols]
            if suffix == "_ms":
                cells += [fmt(r.get("xnnpack_1t_ms", math.nan)), fmt(r.get(f"xnnpack_{args.threads}t_ms", math.nan))]
            print(f"| {r['model']} | " + " | ".join(cells) + " |")
    print("\nlaunches per invoke (the plan's kernel launches, boundary layout launches included):")
    print("| model | " + " | ".join(cols) + " |")
    print("|" + "---|" * (len(cols) + 1))
    for r in rows:
        print(f"| {r['model']} | " + " | ".join(str(r.get(c + "_launches", "n/a")) for c in cols) + " |")
    print("\nmax relative error vs LiteRT XNNPACK:")
    print("| model | " + " | ".join(cols + lcols) + " |")
    print("|" + "---|" * (len(cols + lcols) + 1))
    for r in rows:
        print(f"| {r['model']} | " + " | ".join(fmt(r.get(c + "_err", math.nan), ".1e") for c in cols + lcols) + " |")

    def geo(vals):
        vals = [v for v in vals if v and not math.isnan(v)]
        return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else math.nan

    for c in cols:
        if "_fp32" in c:
            continue
        print(f"{c} output storage: " + "; ".join(
            f"{r['model']}: " + ", ".join(f"{k} {v}" for k, v in r.get(c + "_outputs", {}).items()) for r in rows))
    for c in cols:
        lc = "litert_gpu_fp32" if "_fp32" in c else "litert_gpu_fp16"
        h2h = geo([r.get(c + "_ms", math.nan) / r.get(lc + "_ms", math.nan) for r in rows])
        h2b = geo([r.get(c + "_ms", math.nan) / r.get(lc + "_bound_ms", math.nan) for r in rows])
        b2b = geo([r.get(c + "_bound_ms", math.nan) / r.get(lc + "_bound_ms", math.nan) for r in rows])
        vs_x16 = [r.get(c + "_ms", math.nan) / r.get(f"xnnpack_{args.threads}t_ms", math.nan) for r in rows]
        print(f"{c} geomean vs LiteRT GPU {lc[-4:]}: host-to-host/host-to-host {h2h:.2f}x, "
              f"host-to-host/device-bound {h2b:.2f}x, device-bound/device-bound {b2b:.2f}x; vs XNNPACK-"
              f"{args.threads}: " + ", ".join(f"{v:.2f}x" for v in vs_x16))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_line(), "devices": devinfo, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
