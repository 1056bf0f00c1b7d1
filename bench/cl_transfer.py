"""What each way of moving an invoke's input in and its outputs out costs on OpenCL (pyopencl, one in-order queue).

``python bench/cl_transfer.py [--runs R]`` prints five Markdown tables, every cell the median wall time (us) of
one whole step, the variants of a table interleaved run by run (no drift between them):

- **upload**: a new host array (float32, a model input's size) moved to the device and read once by a kernel
  (as the input layout launch does), then ``clFinish``: a pageable ``clEnqueueWriteBuffer``; through pinned
  staging (a mapped ``CL_MEM_ALLOC_HOST_PTR`` buffer, one host copy: litegpu's path today); the same in 4
  chunks (the copy of a chunk beside the previous chunk's DMA); zero copy, the kernel reading a
  ``CL_MEM_ALLOC_HOST_PTR`` buffer that is mapped (``WRITE_INVALIDATE_REGION``), written and unmapped each run;
  the same buffer mapped once and written in place (outside the spec: a mapped buffer may not be used by a
  kernel; kept only where every run's data was verified); ``CL_MEM_USE_HOST_PTR`` on page-aligned numpy
  memory, mapped per run; and the host copy alone (into pinned, into pageable memory).
- **download**: a kernel writes an output, the host gets it in a numpy array: a blocking pageable read;
  through pinned staging (litegpu today); zero copy (the kernel writes a ``CL_MEM_ALLOC_HOST_PTR`` buffer,
  mapped for reading each run; or mapped once, read in place, verified).
- **kernel GPU time by where its buffer lives** (profiling events): the reading / writing kernel on device
  memory, on ``CL_MEM_ALLOC_HOST_PTR`` and on ``CL_MEM_USE_HOST_PTR`` memory: whether the kernel goes
  across the bus (time grows with the bytes at bus speed) or the driver copies behind the scenes at map/unmap.
- **waiting for an invoke's last read**: a chain of launches (each a few us of GPU work) and a small
  pinned read, then ``clWaitForEvents`` on the read; polling its status first; ``clFinish``.
- **several outputs**: 30 launches, output A written by launch 10 and B by launch 30 (pinned reads): both
  reads queued after the last launch, one wait; A's read queued right behind launch 10 on the same in-order
  queue (the DMA beside the host's enqueue of the remaining launches); A's read on a second queue waiting
  on launch 10's event.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402

MF, MAP = cl.mem_flags, cl.map_flags
SRC = """
__kernel void consume(__global const float4* restrict src, __global float4* restrict dst, int n) {
  int i = get_global_id(0); if (i < n) dst[i] = src[i] + 1.0f; }
__kernel void spin(__global float4* restrict dst, int n, int iters) {
  int i = get_global_id(0); if (i < n) { float4 v = dst[i]; for (int j = 0; j < iters; j++) v = v * 0.999f + 0.001f;
  dst[i] = v; } }
"""
#: model input bytes (float32 BHWC): face_detection 128x128x3, face_landmark/palm 192x192x3, pose/selfie 256x256x3
UPLOADS = (128 * 128 * 3 * 4, 192 * 192 * 3 * 4, 256 * 256 * 3 * 4)
#: output bytes: a landmark vector, selfie's mask 256x256x1, pose's heatmap 64x64x39
DOWNLOADS = (4096, 256 * 256 * 4, 64 * 64 * 39 * 4)
SPIN_ITEMS, SPIN_ITERS = 4096, 1500  # about 10 us of GPU a launch on an H100 (bench/cl_launch.py's busy kernel)


def interleaved(fns: dict[str, Callable[[], None]], runs: int, warmup: int = 5) -> dict[str, float]:
    """Each ``fn`` run ``runs`` times, the variants in turn run by run: their median wall times (us)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(runs + warmup):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r >= warmup:
                times[k].append((time.perf_counter() - t0) * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def aligned(nbytes: int, align: int = 4096) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    off = -raw.ctypes.data % align
    return raw[off:off + nbytes]


class Mapped:
    """A buffer mapped for the whole bench (``view``), or mapped and unmapped per run (:meth:`map` / :meth:`unmap`)."""

    def __init__(self, q: cl.CommandQueue, buf: cl.Buffer, nbytes: int) -> None:
        self.q, self.buf, self.nbytes = q, buf, nbytes

    def map(self, flags: int) -> np.ndarray:
        view, _ev = cl.enqueue_map_buffer(self.q, self.buf, flags, 0, (self.nbytes,), np.uint8, is_blocking=True)
        return view

    @staticmethod
    def unmap(view: np.ndarray, q: cl.CommandQueue) -> None:
        view.base.release(q)


class Bench:
    def __init__(self, ctx: cl.Context, runs: int) -> None:
        self.ctx, self.runs = ctx, runs
        self.q = cl.CommandQueue(ctx)
        self.pq = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        prg = cl.Program(ctx, SRC).build()
        self.k_consume, self.k_spin = cl.Kernel(prg, "consume"), cl.Kernel(prg, "spin")  # retrieved once
        self.failed: list[str] = []

    def consume(self, q: cl.CommandQueue, src: cl.Buffer, dst: cl.Buffer, nbytes: int) -> cl.Event:
        n = nbytes // 16
        return self.k_consume(q, (-(-n // 64) * 64,), (64,), src, dst, np.int32(n))

    def gpu_us(self, src: cl.Buffer, dst: cl.Buffer, nbytes: int) -> float:
        try:
            evs = [self.consume(self.pq, src, dst, nbytes) for _ in range(50)]
            self.pq.finish()
        except cl.Error:
            return float("nan")
        return statistics.median((e.profile.end - e.profile.start) * 1e-3 for e in evs[5:])

    def check(self, label: str, dst: cl.Buffer, want: np.ndarray) -> None:
        got = np.empty(want.size, np.float32)
        cl.enqueue_copy(self.q, got, dst, is_blocking=True)
        if not np.array_equal(got, want + 1.0):
            self.failed.append(label)

    def usable(self, fns: dict[str, Callable[[], object]], check: Callable[[str], None], what: str, nbytes: int
               ) -> dict[str, Callable[[], object]]:
        """The variants that ran (each run three times, its data checked where ``check`` does); one the driver
        refuses is reported and left out of the timing."""
        ok = {}
        for label, fn in fns.items():
            try:
                for _ in range(3):
                    fn()
                    if not label.startswith("copy"):
                        check(label)
            except cl.Error as e:
                print(f"({what} {label} {nbytes}: the driver refused it: {e})", flush=True)
                self.q.finish()
                continue
            ok[label] = fn
        return ok

    # -- uploads
    def uploads(self) -> None:
        print("\n| input bytes | pageable write | pinned staging (today) | pinned, 4 chunks | ALLOC_HOST_PTR zero copy, "
              "map/unmap each run | ALLOC_HOST_PTR mapped once, in place | USE_HOST_PTR, map/unmap each run | "
              "host copy into pinned | host copy into pageable |")
        print("|---:|" + "---:|" * 8)
        gpu_rows = []
        for nbytes in UPLOADS:
            q, n = self.q, nbytes // 4
            x = np.random.default_rng(0).uniform(-1, 1, n).astype(np.float32)
            dev, dst = cl.Buffer(self.ctx, MF.READ_WRITE, nbytes), cl.Buffer(self.ctx, MF.READ_WRITE, nbytes)
            stage = cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, nbytes)
            pin = Mapped(q, stage, nbytes).map(MAP.READ | MAP.WRITE)
            zc = cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, nbytes)
            zc_m = Mapped(q, zc, nbytes)
            zc1 = cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, nbytes)
            zc1_view = Mapped(q, zc1, nbytes).map(MAP.READ | MAP.WRITE)  # mapped for the whole bench
            host = aligned(nbytes)
            uh = cl.Buffer(self.ctx, MF.READ_WRITE | MF.USE_HOST_PTR, hostbuf=host)
            uh_m = Mapped(q, uh, nbytes)
            scratch = np.empty(nbytes, np.uint8)
            xb = x.view(np.uint8)
            chunk = -(-nbytes // 4 // 64) * 64
            tick = iter(range(1 << 30))

            def fresh() -> None:  # a new value every run (verified where a variant goes outside the spec)
                x[0] = next(tick)

            def page():
                fresh()
                cl.enqueue_copy(q, dev, x, is_blocking=False)
                self.consume(q, dev, dst, nbytes)
                q.finish()

            def pinned():
                fresh()
                pin[:] = xb
                cl.enqueue_copy(q, dev, pin, is_blocking=False)
                self.consume(q, dev, dst, nbytes)
                q.finish()

            def chunks():
                fresh()
                for o in range(0, nbytes, chunk):
                    pin[o:o + chunk] = xb[o:o + chunk]
                    cl.enqueue_copy(q, dev, pin[o:o + chunk], dst_offset=o, is_blocking=False)
                self.consume(q, dev, dst, nbytes)
                q.finish()

            def through_map(mapped, buf):  # written through a map / unmap of the kernel's own buffer
                fresh()
                v = mapped.map(MAP.WRITE_INVALIDATE_REGION)
                v[:] = xb
                Mapped.unmap(v, q)
                self.consume(q, buf, dst, nbytes)
                q.finish()

            def zero_map():
                through_map(zc_m, zc)

            def zero_once():
                fresh()
                zc1_view[:] = xb
                self.consume(q, zc1, dst, nbytes)
                q.finish()

            def use_host():
                through_map(uh_m, uh)

            def copy_pin():
                pin[:] = xb

            def copy_page():
                scratch[:] = xb

            fns = {"page": page, "pinned": pinned, "chunks": chunks, "zero_map": zero_map, "zero_once": zero_once,
                   "use_host": use_host, "copy_pin": copy_pin, "copy_page": copy_page}
            ok = self.usable(fns, lambda label: self.check(f"upload {label} {nbytes}", dst, x), "upload", nbytes)
            t = interleaved(ok, self.runs)
            if "zero_once" in ok:
                for _ in range(5):
                    zero_once()
                    self.check(f"upload zero_once {nbytes} (after timing)", dst, x)
            print(f"| {nbytes} | " + " | ".join(f"{t[k]:.1f}" if k in t else "error" for k in fns) + " |", flush=True)
            gpu_rows.append((nbytes, *(self.gpu_us(src, out, nbytes) for src, out in
                                       ((dev, dst), (zc, dst), (zc1, dst), (uh, dst), (dst, zc1)))))
            Mapped.unmap(zc1_view, q)
            Mapped.unmap(pin, q)
            q.finish()
        print("\nkernel GPU time (us, profiled) reading / writing ``bytes`` by where the buffer lives:")
        print("| bytes | reads device memory | reads ALLOC_HOST_PTR (unmapped) | reads ALLOC_HOST_PTR (mapped) | "
              "reads USE_HOST_PTR | writes ALLOC_HOST_PTR (mapped) |")
        print("|---:|---:|---:|---:|---:|---:|")
        for row in gpu_rows:
            print(f"| {row[0]} | " + " | ".join(f"{v:.2f}" for v in row[1:]) + " |", flush=True)

    # -- downloads
    def downloads(self) -> None:
        print("\n| output bytes | pageable read (blocking) | pinned staging (today) | ALLOC_HOST_PTR zero copy, map for "
              "read each run | ALLOC_HOST_PTR mapped once, read in place | host copy out of pinned |")
        print("|---:|" + "---:|" * 5)
        for nbytes in DOWNLOADS:
            q, n = self.q, nbytes // 4
            src = cl.Buffer(self.ctx, MF.READ_WRITE, nbytes)
            x = np.random.default_rng(1).uniform(-1, 1, n).astype(np.float32)
            cl.enqueue_copy(q, src, x, is_blocking=True)
            dst = cl.Buffer(self.ctx, MF.READ_WRITE, nbytes)
            pin = Mapped(q, cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, nbytes), nbytes).map(
                MAP.READ | MAP.WRITE)
            zc = cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, nbytes)
            zc_m = Mapped(q, zc, nbytes)
            zc1 = cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, nbytes)
            zc1_view = Mapped(q, zc1, nbytes).map(MAP.READ | MAP.WRITE)
            want = (x + 1.0).view(np.uint8)
            bad: set[str] = set()

            def verify(label: str, out: np.ndarray) -> None:
                if not np.array_equal(out.view(np.uint8), want):
                    bad.add(label)

            def page():
                self.consume(q, src, dst, nbytes)
                out = np.empty(n, np.float32)
                cl.enqueue_copy(q, out, dst, is_blocking=True)
                return out

            def pinned():
                self.consume(q, src, dst, nbytes)
                out = np.empty(n, np.float32)
                cl.enqueue_copy(q, pin, dst, is_blocking=False).wait()
                out.view(np.uint8)[:] = pin
                return out

            def zero_map():
                self.consume(q, src, zc, nbytes)
                out = np.empty(n, np.float32)
                v = zc_m.map(MAP.READ)
                out.view(np.uint8)[:] = v
                Mapped.unmap(v, q)
                return out

            def zero_once():
                cl.enqueue_fill_buffer(q, zc1, np.float32(0), 0, nbytes)  # a stale value would show
                self.consume(q, src, zc1, nbytes)
                q.finish()
                out = np.empty(n, np.float32)
                out.view(np.uint8)[:] = zc1_view
                return out

            def copy_out():
                out = np.empty(n, np.float32)
                out.view(np.uint8)[:] = pin

            fns = {"page": page, "pinned": pinned, "zero_map": zero_map, "zero_once": zero_once, "copy": copy_out}
            checked = {k: (lambda k=k, fn=fn: verify(k, fn())) if k != "copy" else fn for k, fn in fns.items()}
            ok = self.usable(checked, lambda label: None, "download", nbytes)
            t = interleaved(ok, self.runs)  # (the compare is in every cell: the same few us each)
            self.failed += [f"download {label} {nbytes}" for label in sorted(bad)]
            print(f"| {nbytes} | " + " | ".join(f"{t[k]:.1f}" if k in t else "error" for k in fns) + " |", flush=True)
            Mapped.unmap(zc1_view, q)
            Mapped.unmap(pin, q)
            q.finish()

    # -- waiting
    def spin(self, q: cl.CommandQueue, buf: cl.Buffer, iters: int = SPIN_ITERS) -> cl.Event:
        return self.k_spin(q, (SPIN_ITEMS,), (64,), buf, np.int32(SPIN_ITEMS), np.int32(iters))

    def waits(self) -> None:
        q = self.q
        buf = cl.Buffer(self.ctx, MF.READ_WRITE, SPIN_ITEMS * 16)
        small = cl.Buffer(self.ctx, MF.READ_WRITE, 4096)
        pin = Mapped(q, cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, 4096), 4096).map(MAP.READ | MAP.WRITE)
        ev = self.spin(self.pq, buf)
        self.pq.finish()
        print(f"\nwaiting for the last read: a chain of launches ({(ev.profile.end - ev.profile.start) * 1e-3:.1f} us "
              "of GPU each, profiled), then a 4 KiB read into pinned memory; wall time (us) until the host has it")
        print("| launches | clWaitForEvents | poll the event's status, then wait | clFinish |")
        print("|---:|---:|---:|---:|")
        for chain in (1, 30):
            def launch_all():
                for _ in range(chain):
                    self.spin(q, buf)
                return cl.enqueue_copy(q, pin, small, is_blocking=False)

            def wait():
                launch_all().wait()

            def poll():
                e = launch_all()
                q.flush()
                while e.command_execution_status > cl.command_execution_status.COMPLETE:
                    pass
                e.wait()

            def finish():
                launch_all()
                q.finish()

            t = interleaved({"wait": wait, "poll": poll, "finish": finish}, self.runs)
            print(f"| {chain} | {t['wait']:.1f} | {t['poll']:.1f} | {t['finish']:.1f} |", flush=True)
        Mapped.unmap(pin, q)
        q.finish()

    # -- several outputs
    def early_reads(self) -> None:
        q = self.q
        q2 = cl.CommandQueue(self.ctx)
        nbytes = 256 * 256 * 4
        work = cl.Buffer(self.ctx, MF.READ_WRITE, SPIN_ITEMS * 16)
        a, b = cl.Buffer(self.ctx, MF.READ_WRITE, nbytes), cl.Buffer(self.ctx, MF.READ_WRITE, nbytes)
        src = cl.Buffer(self.ctx, MF.READ_WRITE, nbytes)
        pins = [Mapped(q, cl.Buffer(self.ctx, MF.READ_WRITE | MF.ALLOC_HOST_PTR, nbytes), nbytes).map(
            MAP.READ | MAP.WRITE) for _ in range(2)]
        outs = [np.empty(nbytes, np.uint8) for _ in range(2)]

        def chain(read_a_after: Callable[[cl.Event], None] | None) -> None:
            for i in range(30):
                if i == 9:
                    ev = self.consume(q, src, a, nbytes)
                    if read_a_after is not None:
                        read_a_after(ev)
                elif i == 29:
                    self.consume(q, src, b, nbytes)
                else:
                    self.spin(q, work, 500)

        def at_end():
            chain(None)
            cl.enqueue_copy(q, pins[0], a, is_blocking=False)
            cl.enqueue_copy(q, pins[1], b, is_blocking=False).wait()
            for o, p in zip(outs, pins, strict=True):
                o[:] = p

        def behind():
            chain(lambda ev: cl.enqueue_copy(q, pins[0], a, is_blocking=False))
            cl.enqueue_copy(q, pins[1], b, is_blocking=False).wait()
            for o, p in zip(outs, pins, strict=True):
                o[:] = p

        def second_queue():
            got = []
            chain(lambda ev: (got.append(cl.enqueue_copy(q2, pins[0], a, is_blocking=False, wait_for=[ev])),
                              q2.flush()))
            cl.enqueue_copy(q, pins[1], b, is_blocking=False).wait()
            got[0].wait()
            for o, p in zip(outs, pins, strict=True):
                o[:] = p

        t = interleaved({"end": at_end, "behind": behind, "q2": second_queue}, self.runs)
        print("\nseveral outputs: 30 launches (about 3 us of GPU each), 256 KiB output A written by launch 10, B by "
              "launch 30, pinned reads; wall time (us)")
        print("| both reads after the last launch | A's read right behind launch 10 (same queue) | "
              "A's read on a second queue (waits on launch 10's event) |")
        print("|---:|---:|---:|")
        print(f"| {t['end']:.1f} | {t['behind']:.1f} | {t['q2']:.1f} |", flush=True)
        for p in pins:
            Mapped.unmap(p, q)
        q.finish()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    ctx = cl.create_some_context(interactive=False)
    dev = ctx.devices[0]
    print(machine_line())
    print(f"{dev.name.strip()} ({dev.platform.name.strip()}, {dev.driver_version}); "
          f"host-unified memory: {bool(dev.host_unified_memory)}")
    b = Bench(ctx, args.runs)
    b.uploads()
    b.downloads()
    b.waits()
    b.early_reads()
    print("\ndata verified in every variant" if not b.failed else f"\nDATA WRONG in: {', '.join(b.failed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
