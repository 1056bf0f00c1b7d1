"""Where one GPU invoke's time goes (OpenCL or Vulkan): boundary transfers (and the host conversions
the executor still does), kernel enqueue, GPU execution (OpenCL profiling events / Vulkan timestamp
queries; the boundary layout launches included), and the interpreter around them.

``python bench/gpu_profile.py [--backend opencl|vulkan] [--models a,b] [--runs N] [--set MOD.NAME=VALUE]
[--cost field=value,...]``
prints a Markdown table, one row a model (``--set`` flips a compiler constant first, ``--cost`` replaces
fields of the cost model's calibration, for A/B runs).  Vulkan adds the GPU time of the staging copies recorded in the invoke's
command buffer, the barriers and copies per command buffer, and the memory type of every memory block
(device-local, host-visible, coherent, cached) with what it holds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, median_ms, mediapipe_models, override_cost, set_attribute  # noqa: E402


def _med(fn, runs):
    return median_ms(fn, runs)


def _load(backend: str, path, args):
    """The delegate, device, interpreter, partition kernel and input of one model, and its median
    host-to-host invoke (set input, invoke, read every output) in ms."""
    import litegpu

    d = litegpu.load_delegate(backend, {"precision": args.precision, "cache": {"enabled": False}})
    it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    x = np.random.default_rng(0).uniform(-1, 1, tuple(inp["shape"])).astype(np.float32)
    outs = [o["index"] for o in it.get_output_details()]

    def full():
        it.set_tensor(inp["index"], x)
        it.invoke()
        return [it.get_tensor(o) for o in outs]

    t_full = _med(full, args.runs)
    (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
    return d, d.device, it, k, x, t_full


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--backend", default="opencl", choices=("opencl", "vulkan"))
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="set a compiler module constant before compiling (an A/B switch, e.g. "
                         "litegpu.gpu._passes.fuse_dw_pw.DW_PW_STAGED=False); repeatable")
    ap.add_argument("--cost", default="", help="cost-model calibration overrides, e.g. step_us=0.18,load_us=0.009 "
                                               "(another calibration's picks in the same session)")
    args = ap.parse_args()
    if args.cost:
        override_cost(args.cost)
    for item in args.set:
        set_attribute(item)
        print(f"set {item}")
    if args.backend == "vulkan":
        return _vulkan(args)

    import pyopencl as cl

    print(machine_line())
    print("| model | invoke (ms) | launches | enqueue all (ms) | replay+finish (ms) | GPU kernels (ms) | "
          "upload+convert (ms) | download+convert (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        d, dev, it, k, x, t_full = _load("opencl", path, args)
        launches = k._launches

        def enqueue_only():
            for ln in launches:
                dev.launch(ln.bound, ln.kernel, ln.grid)

        t_enq = _med(lambda: (enqueue_only(), dev.finish()), args.runs)
        t0 = time.perf_counter()
        for _ in range(args.runs):
            enqueue_only()
        t_enq_only = (time.perf_counter() - t0) / args.runs * 1e3
        dev.finish()
        # GPU time: the same launches on a profiling queue
        pq = cl.CommandQueue(dev.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        gpu = []
        for _ in range(10):
            evs = [cl.enqueue_nd_range_kernel(pq, ln.bound[0], tuple(-(-g // w) * w for g, w in zip(
                ln.grid, ln.kernel.workgroup, strict=False)), ln.kernel.workgroup) for ln in launches]
            pq.finish()
            gpu.append(sum(e.profile.end - e.profile.start for e in evs) * 1e-6)
        t_gpu = statistics.median(gpu)

        def upload():  # the executor's own boundary path (the layout launches are in the GPU column)
            k.send({k.plan.inputs[0]: x})
            dev.finish()

        t_up = _med(upload, args.runs)
        t_down = _med(k.receive, args.runs)
        print(f"| {name} | {t_full:.3f} | {len(launches)} | {t_enq_only:.3f} | {t_enq:.3f} | {t_gpu:.3f} | "
              f"{t_up:.3f} | {t_down:.3f} |", flush=True)
    return 0


def _vulkan(args) -> int:

    print(machine_line())
    print("| model | invoke (ms) | launches | device-bound (ms) | replay+finish (ms) | GPU kernels (ms) | "
          "GPU staging copies (ms) | upload (ms) | download (ms) | barriers | copies |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    memory = {}
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        d, dev, it, k, x, t_full = _load("vulkan", path, args)
        rec = k._recording
        t_submit = _med(lambda: (dev.replay(rec), dev.finish()) and None, args.runs)
        t0 = time.perf_counter()
        for _ in range(args.runs):  # back to back: each replay waits for the previous run, one wait at the end
            dev.replay(rec)
        t_enq_only = (time.perf_counter() - t0) / args.runs * 1e3
        dev.finish()
        # GPU time: the same command buffer with timestamps around every copy and dispatch
        prof = dev.record([(ln.bound, ln.kernel, ln.grid) for ln in k._launches],
                          uploads=[b.ref for b in k._inputs],
                          downloads=[b.ref for b in k._outputs if b is not None], profile=True)
        gpu, copies = [], []
        for _ in range(10):
            dev.replay(prof)
            dev.finish()
            ts = dev.timestamps(prof)
            gpu.append(sum(us for what, _i, us in ts if what == "dispatch") * 1e-3)
            copies.append(sum(us for what, _i, us in ts if what != "dispatch") * 1e-3)

        def upload():  # the executor's own boundary path: a memcpy into mapped staging memory
            k.send({k.plan.inputs[0]: x})
            dev.finish()

        t_up = _med(upload, args.runs)
        dev.replay(rec)
        t_down = _med(k.receive, args.runs)
        st = dev.recording_stats(rec)
        print(f"| {name} | {t_full:.3f} | {len(k._launches)} | {t_enq_only:.3f} | {t_submit:.3f} | "
              f"{statistics.median(gpu):.3f} | {statistics.median(copies):.3f} | {t_up:.3f} | {t_down:.3f} | "
              f"{st['barriers']} | {st['copies']} |", flush=True)
        memory[name] = dev.memory_report()
    print(f"\nmemory: {dev.info.name}, memory option {dev.memory_mode}")
    for name, blocks in memory.items():
        print(f"- {name}: " + "; ".join(f"{b['kind']} {b['used'] / 2**20:.2f}/{b['bytes'] / 2**20:.0f} MiB "
                                        f"type {b['type']} ({b['flags']})" for b in blocks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
