"""Host cost of OpenCL launches and transfers through pyopencl, by how a launch names its memory.

``python bench/cl_launch.py [--launches N] [--runs R] [--no-transfers]`` prints three Markdown tables:

- **launches**: a trivial kernel (4096 work items, groups of 64) enqueued N times in a row on one in-order
  queue, with the argument shapes litegpu's kernels have (one buffer; 7 buffers as separate allocations,
  as sub-buffers of one allocation, as one allocation passed 7 times; the same plus 17 int params, as a
  real conv kernel; one allocation plus element-offset ints; one or two base pointers plus 7 offsets and 17 ints, the
  typed views derived in the kernel; one buffer and one int, the offsets and ints read by the kernel from an
  argument block in it or in a second buffer), and, for the real shape, through ctypes
  with no event object, 8 kernels of 8 programs in turn (as a model's launches; also each naming 7 sub-buffers of
  its own), 4096 work groups, 3-D sizes, and
  ``__local`` memory with a barrier, and a kernel that keeps the GPU busy for 2-30 us.  Columns: host enqueue (no waiting),
  until the queue drains (the floor of an invoke of N dependent launches), and each launch's profiled GPU
  time and the gap between launches (profiling queue).
- **invoke-sized batches**: 30 launches enqueued on an idle queue, then one finish, for the trivial and the busy
  kernels: whether an enqueue costs the host more while the GPU is busy.
- **transfers** (not with ``--no-transfers``): moving 64 KiB, 768 KiB (a 256x256x3 float input) and 3 MiB between the host and one
  device buffer: from / into pageable numpy memory (what litegpu does by default), and through pinned
  memory (a mapped ``CL_MEM_ALLOC_HOST_PTR`` buffer, the host copy in or out included:
  ``litegpu_opencl._device.PINNED_TRANSFERS``); 5 reads queued then one wait, as an invoke with 5 outputs.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, median_ms  # noqa: E402

N_ITEMS, WG = 4096, 64
_PARAMS = 17  # int params of a dw_pw_conv2d launch
_BODY = "int i = get_global_id(0); if (i < n) {body}"
SRC = "\n".join([
    "__kernel void one(__global float4* a, int n) { " + _BODY.format(body="a[i] = a[i] + 1.0f;") + " }",
    "__kernel void seven(" + ", ".join(f"__global const float4* restrict a{j}" for j in range(6))
    + ", __global float4* restrict d, int n) { " + _BODY.format(body="d[i] = a0[i] + a5[i];") + " }",
    "__kernel void real(" + ", ".join(f"__global const float4* restrict a{j}" for j in range(6))
    + ", __global float4* restrict d, int n, " + ", ".join(f"int p{j}" for j in range(_PARAMS - 1))
    + ") { " + _BODY.format(body="d[i] = a0[i] + a5[i] + (float)p3;") + " }",
    "__kernel void offsets(" + ", ".join(f"__global const float4* restrict a{j}" for j in range(6))
    + ", __global float4* restrict d, int n, " + ", ".join(f"int p{j}" for j in range(_PARAMS - 1)) + ", "
    + ", ".join(f"int o{j}" for j in range(7))
    + ") { " + _BODY.format(body="d[o6 + i] = a0[o0 + i] + a5[o5 + i] + (float)p3;") + " }",
    # the same 7 views through one (or two) base pointers plus element offsets, the typed restrict pointers
    # derived in a thin wrapper around an inline body (how a kernel can name one cl_mem per allocation)
    "inline void base_body(" + ", ".join(f"__global const float4* restrict a{j}" for j in range(6))
    + ", __global float4* restrict d, int n, int p3) { " + _BODY.format(body="d[i] = a0[i] + a5[i] + (float)p3;")
    + " }",
    "__kernel void base1(__global float4* b, int n, " + ", ".join(f"int p{j}" for j in range(_PARAMS - 1)) + ", "
    + ", ".join(f"int o{j}" for j in range(7)) + ") { base_body("
    + ", ".join(f"b + o{j}" for j in range(7)) + ", n, p3); }",
    "__kernel void base2(__global float4* b, __global float4* w, int n, "
    + ", ".join(f"int p{j}" for j in range(_PARAMS - 1)) + ", " + ", ".join(f"int o{j}" for j in range(7))
    + ") { base_body(" + ", ".join(f"{'w' if j in (1, 2) else 'b'} + o{j}" for j in range(7)) + ", n, p3); }",
    # the same, every offset and param read by the kernel from an argument block in the allocation (one
    # buffer + one int a launch), or in a second allocation (two buffers + one int)
    "__kernel void packed1(__global uchar* b, uint at) { __global const int* g = (__global const int*)(b + at); "
    "base_body(" + ", ".join(f"(__global float4*)(b + g[{j}])" for j in range(7)) + f", g[7], g[{7 + 1 + 3}]); }}",
    "__kernel void packed2(__global uchar* b, __global const int* args, uint at) { __global const int* g = args + at; "
    "base_body(" + ", ".join(f"(__global float4*)(b + g[{j}])" for j in range(7)) + f", g[7], g[{7 + 1 + 3}]); }}",
    "__kernel void packed3(__global uchar* restrict b, __global const uchar* restrict r, "
    "__global const int* restrict g) { "
    "base_body(" + ", ".join(f"(__global {'' if j == 6 else 'const '}float4*)({'b' if j == 6 else 'r'} + g[{j}])"
                             for j in range(7)) + f", g[7], g[{7 + 1 + 3}]); }}",
    "__kernel void real3d(" + ", ".join(f"__global const float4* restrict a{j}" for j in range(6))
    + ", __global float4* restrict d, int n, " + ", ".join(f"int p{j}" for j in range(_PARAMS - 1))
    + ") { int i = (get_global_id(2) * 16 + get_global_id(1)) * 16 + get_global_id(0); "
    "if (i < n) d[i] = a0[i] + a5[i] + (float)p3; }",
    # litegpu's argument shape with a body that keeps the GPU busy for p0 dependent multiply-adds a work item
    "__kernel void spin(" + ", ".join(f"__global const float4* restrict a{j}" for j in range(6))
    + ", __global float4* restrict d, int n, " + ", ".join(f"int p{j}" for j in range(_PARAMS - 1))
    + ") { int i = get_global_id(0); if (i < n) { float4 v = a0[i]; for (int j = 0; j < p0; j++) "
    "v = v * 0.999f + 0.001f; d[i] = v + (float)p3; } }",
    "__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void shared(" + ", ".join(
        f"__global const float4* restrict a{j}" for j in range(6))
    + ", __global float4* restrict d, int n, " + ", ".join(f"int p{j}" for j in range(_PARAMS - 1))
    + ") { __local float4 t[64]; int l = get_local_id(0); int i = get_global_id(0); "
    "t[l] = a0[min(i, n - 1)]; barrier(CLK_LOCAL_MEM_FENCE); if (i < n) d[i] = t[63 - l] + a5[i] + (float)p3; }",
])


def _ctypes_enqueue(q: cl.CommandQueue, k: cl.Kernel):
    lib = ctypes.CDLL(ctypes.util.find_library("OpenCL") or "libOpenCL.so.1")
    enq = lib.clEnqueueNDRangeKernel
    enq.restype = ctypes.c_int32
    enq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
    gs, ls = (ctypes.c_size_t * 1)(N_ITEMS), (ctypes.c_size_t * 1)(WG)
    qp, kp = q.int_ptr, k.int_ptr

    def raw():  # no event object: clEnqueueNDRangeKernel(..., event=NULL)
        err = enq(qp, kp, 1, None, gs, ls, 0, None, None)
        if err:
            raise RuntimeError(err)

    return raw


def launches(ctx: cl.Context, n: int) -> None:
    q = cl.CommandQueue(ctx)
    pq = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    prg = cl.Program(ctx, SRC).build()
    nbytes = N_ITEMS * 16
    align = max(int(ctx.devices[0].mem_base_addr_align) // 8, 16)
    step = -(-nbytes // align) * align
    own = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes) for _ in range(7)]
    arena = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, step * 7)
    subs = [arena.get_sub_region(j * step, nbytes) for j in range(7)]
    weights = cl.Buffer(ctx, cl.mem_flags.READ_ONLY, step * 7)
    ints = [np.int32(N_ITEMS)] + [np.int32(j) for j in range(_PARAMS - 1)]
    # the argument block of the packed kernels: 7 byte offsets, then the 17 ints (after 7 views in ``packed``)
    block = np.array([j * step for j in range(7)] + [int(i) for i in ints], np.int32)
    packed = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=np.concatenate([np.zeros(7 * step // 4, np.int32), block]))
    args_buf = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=block)

    def kernel(name: str, args: list) -> cl.Kernel:
        k = cl.Kernel(prg, name)
        for i, a in enumerate(args):
            k.set_arg(i, a)
        return k

    # the real signature in 8 programs (litegpu's launches go to a different kernel each time)
    others = [cl.Kernel(cl.Program(ctx, SRC.replace("(float)p3", f"(float)(p3 + {j})")).build(), "real")
              for j in range(8)]
    for k in others:
        for i, a in enumerate([*subs, *ints]):
            k.set_arg(i, a)
    cases = [
        ("1 buffer", kernel("one", [own[0], ints[0]])),
        ("7 buffers, 7 allocations", kernel("seven", [*own, ints[0]])),
        ("7 buffers, sub-buffers of 1 allocation", kernel("seven", [*subs, ints[0]])),
        ("7 buffers, 1 allocation 7 times", kernel("seven", [arena] * 7 + [ints[0]])),
        ("7 buffers + 17 ints, 7 allocations", kernel("real", [*own, *ints])),
        ("7 buffers + 17 ints, sub-buffers (litegpu today)", kernel("real", [*subs, *ints])),
        ("7 x (1 allocation + offset) + 17 ints",
         kernel("offsets", [arena] * 7 + ints + [np.int32(j * step // 16) for j in range(7)])),
        ("1 buffer + 17 ints + 7 offsets (one base pointer)",
         kernel("base1", [arena] + ints + [np.int32(j * step // 16) for j in range(7)])),
        ("2 buffers + 17 ints + 7 offsets (two base pointers)",
         kernel("base2", [arena, weights] + ints + [np.int32(j * step // 16) for j in range(7)])),
        ("1 buffer + 1 int: offsets and ints read from the buffer", kernel("packed1", [packed, np.uint32(7 * step)])),
        ("2 buffers + 1 int: offsets and ints read from the second", kernel("packed2", [arena, args_buf, np.uint32(0)])),
        ("3 buffers (1 allocation twice + an argument buffer), no int (litegpu's ARGUMENT_BUFFER)",
         kernel("packed3", [arena, arena, args_buf])),
    ]
    print("| launch arguments | host enqueue (us/launch) | until drained (us/launch) | "
          "GPU time, profiled (us) | gap between launches (us) |")
    print("|---|---:|---:|---:|---:|")
    rows = [(label, lambda k=k: cl.enqueue_nd_range_kernel(q, k, (N_ITEMS,), (WG,)), k, (N_ITEMS,), (WG,))
            for label, k in cases]
    real = cases[5][1]
    rows.append(("same as litegpu today, ctypes, no event", _ctypes_enqueue(q, real), real, (N_ITEMS,), (WG,)))
    turn = iter(range(1 << 62))
    rows.append(("same, 8 kernels of 8 programs in turn",
                 lambda: cl.enqueue_nd_range_kernel(q, others[next(turn) % 8], (N_ITEMS,), (WG,)), others[0],
                 (N_ITEMS,), (WG,)))
    k3 = kernel("real3d", [*subs, *ints])
    rows.append(("same, 3-D sizes 16x16x16, groups 8x8x1",
                 lambda: cl.enqueue_nd_range_kernel(q, k3, (16, 16, 16), (8, 8, 1)), k3, (16, 16, 16), (8, 8, 1)))
    ks = kernel("shared", [*subs, *ints])
    rows.append(("same, __local memory and a barrier", lambda: cl.enqueue_nd_range_kernel(q, ks, (N_ITEMS,), (WG,)),
                 ks, (N_ITEMS,), (WG,)))
    for spin in SPINS:
        kb = kernel("spin", [*subs, np.int32(N_ITEMS), np.int32(spin)] + ints[2:])
        rows.append((f"same, {spin} dependent FMAs a work item (the GPU busy)",
                     lambda kb=kb: cl.enqueue_nd_range_kernel(q, kb, (N_ITEMS,), (WG,)), kb, (N_ITEMS,), (WG,)))
    # last (PoCL 3.1 asserts in a later launch after them: pocl_kernel_collect_mem_objs): the 8 programs' kernels each with 7 sub-buffers of their own (litegpu's launches name different ranges)
    arena8 = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, step * 7 * 8)
    own8, held = [], []  # held: clSetKernelArg does not keep the sub-buffers alive
    for j in range(8):
        k = cl.Kernel(cl.Program(ctx, SRC.replace("(float)p3", f"(float)(p3 + {j})")).build(), "real")
        held.append([arena8.get_sub_region((7 * j + m) * step, nbytes) for m in range(7)])
        for i, a in enumerate([*held[-1], *ints]):
            k.set_arg(i, a)
        own8.append(k)
    turn8 = iter(range(1 << 62))
    rows.append(("same, 8 kernels of 8 programs in turn, each its own 7 sub-buffers",
                 lambda: cl.enqueue_nd_range_kernel(q, own8[next(turn8) % 8], (N_ITEMS,), (WG,)), own8[0],
                 (N_ITEMS,), (WG,)))
    big = N_ITEMS * 64  # 4096 work groups (a 224x224 map's conv at one pixel a work item is 784 of 64)
    held.append(cl.Buffer(ctx, cl.mem_flags.READ_WRITE, big * 16))  # kept alive: NVIDIA fails a freed argument
    kbig = kernel("real", [*own[:6], held[-1], *ints])
    rows.append((f"same, {big // WG} work groups", lambda: cl.enqueue_nd_range_kernel(q, kbig, (big,), (WG,)), kbig,
                 (big,), (WG,)))
    for label, fn, k, gs, ls in rows:
        for _ in range(50):
            fn()
        q.finish()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        q.finish()
        t2 = time.perf_counter()
        evs = [cl.enqueue_nd_range_kernel(pq, k, gs, ls) for _ in range(200)]
        pq.finish()
        d = statistics.median((e.profile.end - e.profile.start) * 1e-3 for e in evs)
        gap = statistics.median((b.profile.start - a.profile.end) * 1e-3 for a, b in zip(evs, evs[1:], strict=False))
        print(f"| {label} | {1e6 * (t1 - t0) / n:.2f} | {1e6 * (t2 - t0) / n:.2f} | {d:.2f} | {gap:.2f} |",
              flush=True)


#: the busy kernel's loop lengths (about 2, 10 and 30 us a launch on an H100, by its profiled time)
SPINS = (200, 1500, 5000)


def invokes(ctx: cl.Context, runs: int, per_invoke: int = 30) -> None:
    """Invoke-sized batches: ``per_invoke`` launches of litegpu's argument shape enqueued on an idle queue, then
    one finish; the host's enqueue and the batch until drained, per launch (median of ``runs`` batches), for a
    trivial kernel and the busy ones: whether a launch's host cost grows while the GPU is busy (an enqueue that
    waits on the GPU), or the GPU work hides behind the host's enqueues."""
    q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, SRC).build()
    nbytes = N_ITEMS * 16
    arena = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 7 * 65536 * 16)
    subs = [arena.get_sub_region(j * 65536 * 16, nbytes) for j in range(7)]
    print()
    print(f"| kernel ({per_invoke} launches a batch, then finish) | host enqueue (us/launch) | "
          "batch until drained (us/launch) |")
    print("|---|---:|---:|")
    for spin in (0, *SPINS):
        k = cl.Kernel(prg, "spin")
        for i, a in enumerate([*subs, np.int32(N_ITEMS), np.int32(spin)] + [np.int32(j) for j in range(1, _PARAMS - 1)]):
            k.set_arg(i, a)
        enq, drained = [], []
        for r in range(runs + 5):
            t0 = time.perf_counter()
            for _ in range(per_invoke):
                cl.enqueue_nd_range_kernel(q, k, (N_ITEMS,), (WG,))
            t1 = time.perf_counter()
            q.finish()
            t2 = time.perf_counter()
            if r >= 5:
                enq.append(t1 - t0)
                drained.append(t2 - t0)
        print(f"| {spin} dependent FMAs | {1e6 * statistics.median(enq) / per_invoke:.2f} | "
              f"{1e6 * statistics.median(drained) / per_invoke:.2f} |", flush=True)


def _med_us(fn, runs: int) -> float:
    return median_ms(fn, runs, warmup=3) * 1e3


def transfers(ctx: cl.Context, runs: int) -> None:
    q = cl.CommandQueue(ctx)
    print()
    print("| bytes | write pageable (us) | write via pinned (us) | read pageable (us) | read via pinned (us) | "
          "5 reads pageable, 1 wait (us) | 5 reads via pinned, 1 wait (us) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for nbytes in (64 << 10, 768 << 10, 3 << 20):
        dev = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes) for _ in range(5)]
        host = np.random.default_rng(0).integers(0, 255, nbytes, np.uint8)
        pins = []
        for _ in range(5):
            pb = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
            view, _ev = cl.enqueue_map_buffer(q, pb, cl.map_flags.READ | cl.map_flags.WRITE, 0, (nbytes,), np.uint8,
                                              is_blocking=True)
            pins.append((pb, view))
        pin = pins[0][1]

        def w_page():
            cl.enqueue_copy(q, dev[0], host, is_blocking=False)
            q.finish()

        def w_pin():
            pin[:] = host
            cl.enqueue_copy(q, dev[0], pin, is_blocking=False)
            q.finish()

        def r_page():
            out = np.empty(nbytes, np.uint8)
            cl.enqueue_copy(q, out, dev[0], is_blocking=True)

        def r_pin():
            out = np.empty(nbytes, np.uint8)
            cl.enqueue_copy(q, pin, dev[0], is_blocking=False).wait()
            out[:] = pin

        def r5_page():
            outs = [np.empty(nbytes, np.uint8) for _ in dev]
            evs = [cl.enqueue_copy(q, o, d, is_blocking=False) for o, d in zip(outs, dev, strict=True)]
            evs[-1].wait()

        def r5_pin():
            outs = [np.empty(nbytes, np.uint8) for _ in dev]
            evs = [cl.enqueue_copy(q, v, d, is_blocking=False) for (_b, v), d in zip(pins, dev, strict=True)]
            evs[-1].wait()
            for o, (_b, v) in zip(outs, pins, strict=True):
                o[:] = v

        cells = [_med_us(f, runs) for f in (w_page, w_pin, r_page, r_pin, r5_page, r5_pin)]
        print(f"| {nbytes} | " + " | ".join(f"{c:.1f}" for c in cells) + " |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--no-transfers", action="store_true", help="the launch tables only")
    args = ap.parse_args()
    ctx = cl.create_some_context(interactive=False)
    print(machine_line())
    print(f"{ctx.devices[0].name.strip()} ({ctx.devices[0].platform.name.strip()}, {ctx.devices[0].driver_version})")
    invokes(ctx, args.runs)
    launches(ctx, args.launches)
    if not args.no_transfers:
        transfers(ctx, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
