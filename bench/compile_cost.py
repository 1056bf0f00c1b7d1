"""What each kernel variant costs the driver to compile, cold: the build plus the first launch.

Usage: ``python bench/compile_cost.py [--dialect opencl|wgsl|glsl] [--precision fp32] [--kernels se_gate,...]
[--top 30]``

Renders every representative option set of each kernel template (``kernels.variants``) and times, with
the driver's cache in a private, initially empty folder (PoCL's, Mesa's), the driver compile of each
distinct source *and its first launch*: PoCL builds the work-group function lazily at the first
``clEnqueueNDRangeKernel`` of a local size, lavapipe at the first dispatch, so a build alone misses
most of the time (a barrier in a loop or under a branch is where it goes).  The launch is one work
group with 1 MiB buffers and every param 1: nothing is checked, only timed.  Times are CPU seconds of
this process, its threads and the children it waited for (PoCL links with a subprocess), so a busy
machine does not inflate them.  Prints a Markdown table, the costliest first, and the total per kernel.
This is the tool for CI time (the default test run compiles hundreds of kernels on PoCL and lavapipe).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))


def _cpu() -> float:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


class _OpenCL:
    def __init__(self) -> None:
        import pyopencl as cl

        self.cl = cl
        self.ctx = cl.create_some_context(interactive=False)
        self.queue = cl.CommandQueue(self.ctx)
        self.buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, 1 << 20)

    def run(self, rk) -> None:
        import numpy as np

        cl = self.cl
        k = getattr(cl.Program(self.ctx, rk.source).build(), rk.entry_point)
        k.set_args(*[self.buf] * len(rk.buffer_bindings),
                   *[np.int32(1) if p.dtype == "i32" else np.float32(1) for p in rk.param_layout])
        cl.enqueue_nd_range_kernel(self.queue, k, rk.workgroup, rk.workgroup)
        self.queue.finish()


class _WGPU:
    def __init__(self, spirv: bool) -> None:
        import wgpu

        self.wgpu, self.spirv = wgpu, spirv
        adapter = wgpu.gpu.request_adapter_sync(power_preference="low-power")
        self.dev = adapter.request_device_sync(
            required_features=["shader-f16"] if "shader-f16" in adapter.features else [])

    def run(self, rk) -> None:
        usage = self.wgpu.BufferUsage
        code = rk.source
        if self.spirv:
            from litegpu.gpu.spirv import compile_spirv

            code = compile_spirv(rk.source)
        dev = self.dev
        pipe = dev.create_compute_pipeline(layout="auto", compute={
            "module": dev.create_shader_module(code=code), "entry_point": rk.entry_point})
        bufs = [dev.create_buffer(size=1 << 20, usage=usage.STORAGE | usage.COPY_SRC) for _ in rk.buffer_bindings]
        if rk.param_layout:
            params = rk.pack_params({p.name: 1 for p in rk.param_layout})
            bufs.append(dev.create_buffer_with_data(data=params, usage=usage.UNIFORM))
        group = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
            {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(bufs)])
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, group)
        cp.dispatch_workgroups(1, 1, 1)
        cp.end()
        dev.queue.submit([enc.finish()])
        dev.queue.read_buffer(bufs[0])  # waits for the dispatch (lavapipe compiles at the first one)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialect", default="opencl", choices=["opencl", "wgsl", "glsl"])
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="litegpu-compile-cost-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    os.environ["POCL_CACHE_DIR"] = os.path.join(tmp, "pocl")
    os.environ["MESA_SHADER_CACHE_DIR"] = os.path.join(tmp, "mesa")
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    from litegpu.gpu import kernels as K

    runner = _OpenCL() if args.dialect == "opencl" else _WGPU(spirv=args.dialect == "glsl")
    # storage-only half where the OpenCL device computes fp16 that way (PoCL: no cl_khr_fp16)
    half_math = args.dialect != "opencl" or args.precision == "fp32"
    names = [n for n in args.kernels.split(",") if n] or K.list_kernels()
    runner.run(K.render("unary", args.dialect, args.precision, half_math=half_math))  # the driver's start-up
    rows, seen = [], set()
    for name in names:
        for i, opts in enumerate(K.variants(name)):
            rk = K.render(name, args.dialect, args.precision, half_math=half_math, **opts)
            if rk.source in seen:
                continue
            seen.add(rk.source)
            t = _cpu()
            runner.run(rk)
            rows.append((_cpu() - t, name, i, opts))
    print(f"{args.dialect} {args.precision}: {len(rows)} distinct sources, {sum(r[0] for r in rows):.1f} CPU s\n")
    print("| CPU s | kernel | variant | options |\n|---:|---|---:|---|")
    for sec, name, i, opts in sorted(rows, key=lambda r: -r[0])[: args.top]:
        print(f"| {sec:.2f} | {name} | {i} | `{json.dumps(opts)[:120]}` |")
    per: dict[str, list[float]] = {}
    for sec, name, _, _ in rows:
        per.setdefault(name, []).append(sec)
    print("\n| kernel | sources | CPU s | worst |\n|---|---:|---:|---:|")
    for name, secs in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {name} | {len(secs)} | {sum(secs):.1f} | {max(secs):.2f} |")


if __name__ == "__main__":
    main()
