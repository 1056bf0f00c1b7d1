"""Host cost of one OpenCL kernel launch through pyopencl, and the device's back-to-back floor.

``python bench/cl_launch.py`` enqueues a trivial kernel N times in a row, three ways, and prints
microseconds per launch: the host time to enqueue (no waiting), and the wall time until the queue
drains (what an invoke of N tiny kernels cannot go below).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time

import numpy as np
import pyopencl as cl

SRC = "__kernel void k(__global float4* a, int n) { int i = get_global_id(0); if (i < n) a[i] = a[i] + 1.0f; }"


def main() -> int:
    ctx = cl.create_some_context(interactive=False)
    q = cl.CommandQueue(ctx)
    print(ctx.devices[0].name)
    prg = cl.Program(ctx, SRC).build()
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096 * 16)
    k = cl.Kernel(prg, "k")
    k.set_args(buf, np.int32(4096))
    n = 1000
    lib = ctypes.CDLL(ctypes.util.find_library("OpenCL") or "libOpenCL.so.1")
    enq = lib.clEnqueueNDRangeKernel
    enq.restype = ctypes.c_int32
    enq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
    gs, ls = (ctypes.c_size_t * 1)(4096), (ctypes.c_size_t * 1)(64)
    qp, kp = q.int_ptr, k.int_ptr

    def raw():  # no event object: clEnqueueNDRangeKernel(..., event=NULL)
        err = enq(qp, kp, 1, None, gs, ls, 0, None, None)
        if err:
            raise RuntimeError(err)

    for label, fn in [
        ("ctypes clEnqueueNDRangeKernel, no event", raw),
        ("enqueue_nd_range_kernel", lambda: cl.enqueue_nd_range_kernel(q, k, (4096,), (64,))),
        ("enqueue_nd_range_kernel, 1 item", lambda: cl.enqueue_nd_range_kernel(q, k, (64,), (64,))),
    ]:
        for _ in range(50):
            fn()
        q.finish()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        q.finish()
        t2 = time.perf_counter()
        print(f"{label}: host enqueue {1e6 * (t1 - t0) / n:.2f} us/launch, until drained {1e6 * (t2 - t0) / n:.2f} "
              f"us/launch")
    pq = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    evs = [cl.enqueue_nd_range_kernel(pq, k, (4096,), (64,)) for _ in range(200)]
    pq.finish()
    d = sorted((e.profile.end - e.profile.start) * 1e-3 for e in evs)
    gaps = sorted((b.profile.start - a.profile.end) * 1e-3 for a, b in zip(evs, evs[1:], strict=False))
    print(f"profiled kernel time median {d[len(d) // 2]:.2f} us; gap between kernels median {gaps[len(gaps) // 2]:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
