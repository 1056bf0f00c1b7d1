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
    if args.host_ab:
        _HOST_AB[path.stem if hasattr(path, "stem") else str(path)] = _host_ab(full, args.host_ab, args.runs)
    return d, d.device, it, k, x, t_full


_HOST_AB: dict[str, list[float]] = {}


def _host_ab(full, switches: list[str], runs: int) -> list[float]:
    """``--host-ab``: the host-to-host invoke's median ms with every switch off (as they were), each one
    on alone, then all on; the settings interleaved run by run (no drift between them), the same
    interpreter (switches the host side reads at each call: nothing is compiled again)."""
    import time

    parsed = []
    for item in switches:
        target, old = set_attribute(item)
        module, name = target.rsplit(".", 1)
        parsed.append((sys.modules[module], name, getattr(sys.modules[module], name), old))
        setattr(sys.modules[module], name, old)
    configs = [[]] + [[i] for i in range(len(parsed))] + ([list(range(len(parsed)))] if len(parsed) > 1 else [])
    times: list[list[float]] = [[] for _ in configs]
    for r in range(runs + 5):
        for c, on in enumerate(configs):
            for i, (mod, name, new, old) in enumerate(parsed):
                setattr(mod, name, new if i in on else old)
            t0 = time.perf_counter()
            full()
            if r >= 5:
                times[c].append((time.perf_counter() - t0) * 1e3)
    for mod, name, _new, old in parsed:
        setattr(mod, name, old)
    return [statistics.median(t) for t in times]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--backend", default="opencl", choices=("opencl", "vulkan"))
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="set a compiler module constant before compiling (an A/B switch, e.g. "
                         "litegpu.gpu._passes.fuse_dw_pw.DW_PW_STAGED=False); repeatable")
    ap.add_argument("--ptx", action="store_true",
                    help="opencl: also count, per model, instructions of the programs' binaries where the driver "
                         "gives PTX text (NVIDIA): read-only cached loads, plain global loads, 64-bit index "
                         "arithmetic, work-group size hints, local (spill) memory, function calls left (not inlined)")
    ap.add_argument("--per-launch", action="store_true",
                    help="also print each launch's GPU time (the runtime's profile_kernels: what "
                         "`litegpu benchmark --profile` shows), per model, to set the APIs side by side; opencl: "
                         "and each launch's host enqueue")
    ap.add_argument("--host-ab", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="a host-side switch (read at each call, e.g. litegpu_opencl._device.PINNED_TRANSFERS=True): "
                         "the invoke is also timed with each one on alone and all on, interleaved, on the same "
                         "interpreter; repeatable")
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
    ptx, per_launch = {}, {}
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        d, dev, it, k, x, t_full = _load("opencl", path, args)
        if args.ptx:
            ptx[name] = _ptx_counts(dev, k)
        if args.per_launch:
            per_launch[name] = k.profile_kernels(20)
            per_launch[name]["host_us"] = _host_enqueue_us(dev, k, args.runs)
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
        # pyopencl's profiling queue on the backend's context and kernels (their handles wrapped)
        pq = cl.CommandQueue(cl.Context.from_int_ptr(dev.ctx.int_ptr),
                             properties=cl.command_queue_properties.PROFILING_ENABLE)
        pk = {id(ln): cl.Kernel.from_int_ptr(ln.bound[0].int_ptr) for ln in launches}
        gpu = []
        for _ in range(10):
            evs = [cl.enqueue_nd_range_kernel(pq, pk[id(ln)], tuple(-(-g // w) * w for g, w in zip(
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
    _print_per_launch(per_launch)
    _print_host_ab(args.host_ab)
    if ptx:
        print("\n| model | programs | " + " | ".join(_PTX) + " |")
        print("|---|---:|" + "---:|" * len(_PTX))
        for name, counts in ptx.items():
            print(f"| {name} | " + " | ".join(str(c) for c in counts) + " |")
    return 0


def _print_host_ab(switches: list[str]) -> None:
    if not _HOST_AB:
        return
    heads = ["as they were"] + [f"{w.rsplit('.', 1)[1]}" for w in switches] + (["all"] if len(switches) > 1 else [])
    print("\nhost-to-host invoke (ms), host switches interleaved run by run: " + "; ".join(switches))
    print("| model | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(heads))
    for name, ts in _HOST_AB.items():
        print(f"| {name} | " + " | ".join(f"{t:.3f}" for t in ts) + " |")


def _host_enqueue_us(dev, k, runs: int) -> list[float]:
    """opencl: each launch's host enqueue (us), the replay's own ``clEnqueueNDRangeKernel`` call timed alone; a
    run's launches in turn on an idle queue, then one finish, as an invoke; the median over ``runs`` runs."""
    import ctypes

    from litegpu_opencl import _cl

    enq, q = _cl.api().clEnqueueNDRangeKernel, ctypes.c_void_p(dev.queue.int_ptr)
    raw = k._recording.raw_launches()
    ts: list[list[float]] = [[] for _ in raw]
    dev.finish()
    for _ in range(runs + 3):
        for i, (kernel, dims, gsize, wg) in enumerate(raw):
            t0 = time.perf_counter()
            enq(q, kernel, dims, None, gsize, wg, 0, None, None)
            ts[i].append(time.perf_counter() - t0)
        dev.finish()
    return [statistics.median(t[3:]) * 1e6 for t in ts]


def _print_per_launch(per_launch: dict) -> None:
    for name, prof in per_launch.items():
        rows = prof["launches"]
        host = prof.get("host_us")
        print(f"\n{name} ({prof['api']}, {prof['source']}): {len(rows)} launches, sum "
              f"{sum(r['us'] for r in rows):.1f} us" + (f"; host enqueue (a run's launches in turn, then finish), "
                                                          f"sum {sum(host):.1f} us" if host else ""))
        for i, r in enumerate(rows):
            print(f"  {i:3d} {r['us']:8.2f} us" + (f"  host {host[i]:6.2f} us" if host else "")
                  + f"  {r['variant']}  grid {'x'.join(map(str, r['grid']))}  wg {'x'.join(map(str, r['workgroup']))}")


#: what ``--ptx`` counts in PTX text (NVIDIA's OpenCL program binary), by regular expression
_PTX = {"ld.global.nc": r"\bld\.global\.nc\b", "ld.global (not nc)": r"\bld\.global\.(?!nc\b)",
        "st.global": r"\bst\.global\b", "mul.wide.s32": r"\bmul\.wide\.s32\b",
        "cvt.s64.s32": r"\bcvt\.s64\.s32\b", "add.s64": r"\badd\.s64\b", ".reqntid": r"\.reqntid\b",
        ".maxntid": r"\.maxntid\b", ".local decl": r"\.local\s+\.align", "fma.rn.f32": r"\bfma\.rn\.f32\b",
        "ftz": r"\.ftz\b", "call": r"\bcall(?:\.uni)?\s",
        # the tail groups' ticket (_passes/tail_group): device-scope fences, the atomic, the coherent reads
        "membar.gl / fence": r"\bmembar\.gl\b|\bfence\.", "atom.global": r"\batom\.global\b",
        "ld.volatile": r"\bld\.volatile\b"}


def _ptx_counts(dev, k) -> list[int]:
    """``--ptx``: the partition's distinct programs, then each ``_PTX`` count over their binaries (0s where
    the binary is not PTX text)."""
    import re

    progs = {}
    for handle in k._programs.values():
        prog = getattr(handle, "program", handle)
        progs[prog.int_ptr] = prog
    text = ""
    for prog in progs.values():
        b = dev._binary(prog) or b""
        if b"// Generated by NVIDIA" in b[:4096] or b".version" in b[:4096]:
            text += b.decode("utf-8", "replace")
    return [len(progs)] + [len(re.findall(rx, text)) for rx in _PTX.values()]


def _vulkan(args) -> int:

    print(machine_line())
    print("| model | invoke (ms) | launches | device-bound (ms) | replay+finish (ms) | GPU kernels (ms) | "
          "GPU staging copies (ms) | upload (ms) | download (ms) | barriers | copies |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    memory, per_launch = {}, {}  # (--host-ab: also for vulkan's host-side switches)
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        d, dev, it, k, x, t_full = _load("vulkan", path, args)
        if args.per_launch:
            per_launch[name] = k.profile_kernels(20)
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
    _print_per_launch(per_launch)
    _print_host_ab(args.host_ab)
    for name, blocks in memory.items():
        print(f"- {name}: " + "; ".join(f"{b['kind']} {b['used'] / 2**20:.2f}/{b['bytes'] / 2**20:.0f} MiB "
                                        f"type {b['type']} ({b['flags']})" for b in blocks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
