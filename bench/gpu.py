"""GPU latency: litegpu backends vs LiteRT XNNPACK (1 and N threads) and LiteRT's GPU accelerator.

Usage: ``python bench/gpu.py [--backends opencl] [--precisions fp32,fp16] [--runs N] [--models a,b]
[--threads 16] [--json FILE]``

Every engine runs the same model on the same random input in this one process.  A timed run is
``set input -> invoke -> read every output`` (host to host, as an application sees it); each number
is the median of ``--runs`` runs after warm-ups.  Accuracy is reported against LiteRT XNNPACK
(or LiteRT's GPU accelerator where XNNPACK lacks a custom op).  LiteRT's GPU accelerator is also
timed device-bound (``--runs`` runs back to back between one input write and one read, / runs;
median of 3).  For fp16 columns the storage of every output in the delegate's plan is printed
(float16, or float32 where the mixed-precision rules keep it).  Prints a Markdown table with machine
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
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402


def _median_ms(fn, runs: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _interp_runner(it, x):
    inp = it.get_input_details()[0]["index"]
    outs = [d["index"] for d in it.get_output_details()]
    it.allocate_tensors()

    def run():
        it.set_tensor(inp, x)
        it.invoke()
        return [it.get_tensor(o) for o in outs]

    return run


def _litert_gpu_runner(path: str, x):
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    model = CompiledModel.from_file(path, hardware_accel=HardwareAccelerator.GPU)
    ins = model.create_input_buffers(0)
    outs = model.create_output_buffers(0)
    details = model.get_output_tensor_details(model.get_signature_by_index(0)["key"]) \
        if hasattr(model, "get_signature_by_index") else None
    sizes = []
    for name, d in (details or {}).items():
        sizes.append((name, int(np.prod(d["shape"])), d["dtype"], tuple(d["shape"])))

    def run():
        ins[0].write(x)
        model.run_by_index(0, ins, outs)
        return [b.read(n, np.dtype(dt)).reshape(shape) for b, (_, n, dt, shape) in zip(outs, sizes, strict=False)]

    def device_bound(n: int) -> float:
        """ms per run of n runs back to back with one input write before and one read after."""
        run()
        t0 = time.perf_counter()
        ins[0].write(x)
        for _ in range(n):
            model.run_by_index(0, ins, outs)
        for b, (_, m, dt, _shape) in zip(outs, sizes, strict=False):
            b.read(m, np.dtype(dt))
        return (time.perf_counter() - t0) / n * 1e3

    run.device_bound = device_bound  # type: ignore[attr-defined]
    return run, model.is_fully_accelerated()


def _output_storage(it) -> dict[str, str]:
    """Each output's storage in the delegate's plan (float16 / float32 / ...), by tensor name."""
    out = {}
    for k in [s.run.__self__ for s in it._main.plan.steps if s.kind == "delegate"]:
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
    args = ap.parse_args()

    import litegpu
    from ai_edge_litert import interpreter as litert

    models = mediapipe_models(args.models, default=GPU_SET)
    backends = [b for b in args.backends.split(",") if b]
    precisions = [p for p in args.precisions.split(",") if p]
    delegates = {}
    for b in backends:
        for p in precisions:
            try:
                delegates[(b, p)] = litegpu.load_delegate(b, {"precision": p, "cache": {"enabled": False}})
            except litegpu.LiteGPUError as e:
                print(f"skip {b}/{p}: {e}", file=sys.stderr)
    devinfo = {f"{b}": d.devices() for (b, _), d in delegates.items()}

    rows = []
    for name, path in models.items():
        path = str(path)
        probe = litegpu.Interpreter(model_path=path)
        shape = tuple(probe.get_input_details()[0]["shape"])
        x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
        row: dict = {"model": name}
        ref = None
        for t in (1, args.threads):
            try:
                run = _interp_runner(litert.Interpreter(model_path=path, num_threads=t), x)
                row[f"xnnpack_{t}t_ms"] = _median_ms(run, args.runs)
                ref = ref if ref is not None else run()
            except Exception as e:  # noqa: BLE001 - MediaPipe custom ops are missing from LiteRT's CPU build
                row[f"xnnpack_{t}t_ms"] = math.nan
                row["note"] = str(e).splitlines()[0][:70]
        if not args.no_litert_gpu:
            try:
                run, full = _litert_gpu_runner(path, x)
                row["litert_gpu_ms"] = _median_ms(run, args.runs)
                row["litert_gpu_device_bound_ms"] = statistics.median(run.device_bound(args.runs) for _ in range(3))
                row["litert_gpu_full"] = bool(full)
                gpu_out = run()
                if ref is None:
                    ref = gpu_out
                else:
                    row["litert_gpu_err"] = _worst(gpu_out, ref)
            except Exception as e:  # noqa: BLE001
                row["litert_gpu_ms"] = math.nan
                row["litert_gpu_note"] = str(e).splitlines()[0][:70]
        for (b, p), d in delegates.items():
            it = litegpu.Interpreter(model_path=path, experimental_delegates=[d])
            t0 = time.perf_counter()
            run = _interp_runner(it, x)
            row[f"{b}_{p}_init_ms"] = (time.perf_counter() - t0) * 1e3
            plan = it.get_execution_plan()
            row[f"{b}_{p}_cpu_nodes"] = sum(len(s["node_indices"]) for s in plan if s["backend"] == "cpu")
            row[f"{b}_{p}_ms"] = _median_ms(run, args.runs)
            row[f"{b}_{p}_outputs"] = _output_storage(it)
            if ref is not None:
                row[f"{b}_{p}_err"] = _worst(run(), ref)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    print(f"\n{machine_line()}")
    for b, devs in devinfo.items():
        print(f"{b} devices: {', '.join(devs)}")
    cols = [f"{b}_{p}" for (b, p) in delegates]
    head = "| model | " + " | ".join(f"litegpu {c} (ms)" for c in cols) + \
        f" | LiteRT GPU (ms) | LiteRT GPU device-bound (ms) | XNNPACK 1t (ms) | XNNPACK {args.threads}t (ms) | " + \
        " | ".join(f"{c} err" for c in cols) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        cells = [f"{r.get(c + '_ms', math.nan):.3f}" for c in cols]
        cells += [f"{r.get('litert_gpu_ms', math.nan):.3f}", f"{r.get('litert_gpu_device_bound_ms', math.nan):.3f}",
                  f"{r.get('xnnpack_1t_ms', math.nan):.3f}",
                  f"{r.get(f'xnnpack_{args.threads}t_ms', math.nan):.3f}"]
        cells += [f"{r.get(c + '_err', math.nan):.1e}" for c in cols]
        print(f"| {r['model']} | " + " | ".join(cells) + " |")

    def geo(vals):
        vals = [v for v in vals if v and not math.isnan(v)]
        return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else math.nan

    for c in cols:
        if c.endswith("fp32"):
            continue
        print(f"{c} output storage: " + "; ".join(
            f"{r['model']}: " + ", ".join(f"{k} {v}" for k, v in r.get(c + "_outputs", {}).items()) for r in rows))
    for c in cols:
        vs_bound = geo([r.get(c + "_ms", math.nan) / r.get("litert_gpu_device_bound_ms", math.nan) for r in rows])
        print(f"{c}: geomean vs LiteRT GPU device-bound {vs_bound:.2f}x")
    for c in cols:
        vs_gpu = geo([r.get(c + "_ms", math.nan) / r.get("litert_gpu_ms", math.nan) for r in rows])
        vs_x16 = [r.get(c + "_ms", math.nan) / r.get(f"xnnpack_{args.threads}t_ms", math.nan) for r in rows]
        print(f"{c}: geomean vs LiteRT GPU {vs_gpu:.2f}x; vs XNNPACK-{args.threads}: "
              + ", ".join(f"{v:.2f}x" for v in vs_x16))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_line(), "devices": devinfo, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
