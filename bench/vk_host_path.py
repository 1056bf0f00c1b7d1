"""Where a Vulkan invoke's host-to-host time goes, and the host-path switches A/B'd against OpenCL and LiteRT.

Usage: ``python bench/vk_host_path.py [--models a,b] [--runs N] [--spin-us 2000] [--no-peers]``

Per model (fp32, one process, the serialization cache off):

* **split** of one host-to-host invoke on vulkan (each segment's median over ``--runs``): ``set_tensor``,
  the executor's ``send`` (the input's memcpy into mapped memory), the submit, the fence wait, the
  ``receive`` (the outputs' memcpys) and the ``get_tensor`` copies (``_submit``: the device's part of the
  submit, bookkeeping and ``vkQueueSubmit``); **GPU span**: the command buffer's
  GPU time from two timestamps in command buffers submitted around it (no barriers added: the launches
  run as they do in an invoke); **submit to wake**: the host's time from the submit to the wait's return,
  blocking (``vkWaitForFences``) and polling (``vkGetFenceStatus``) -- their difference is what the
  blocking wait adds after the GPU is done.
* **A/B**: host to host (set input, invoke, read every output), the median of ``--runs``: each variant runs
  a block of ``--runs``/5 invokes back to back (as ``bench/gpu.py`` runs an engine: interleaving single
  runs of engines with their own weights and API contexts slowed whichever came after another by
  0.1-0.3 ms), the blocks alternated over 5 rounds: vulkan as built by default (``default``), ``main``
  (the boundary through staging copies, blocking waits, one fence: ``HOST_BOUNDARY=False``,
  ``FENCE_SPIN_US=0``, ``RESET_BESIDE=False``),
  each switch alone, and (unless ``--no-peers``) OpenCL's default and LiteRT's GPU accelerator (fp32,
  its device-bound figure too).
* **memory types**: per host-visible type, the host's memcpy of 442,368 bytes (palm's input) into it and
  of 153,216 bytes (palm's outputs) out of it, and the GPU's copy of the same into and out of device memory.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402


def _med(ts: list[float]) -> float:
    return statistics.median(ts) * 1e3


def _interp(delegate, path: str):
    import litegpu

    it = litegpu.Interpreter(model_path=path, experimental_delegates=[delegate] if delegate else [])
    it.allocate_tensors()
    return it


def _runner(it, x):
    inp = it.get_input_details()[0]["index"]
    outs = [d["index"] for d in it.get_output_details()]

    def run():
        it.set_tensor(inp, x)
        it.invoke()
        return [it.get_tensor(o) for o in outs]

    return run


class _Span:
    """Timestamps in command buffers submitted before and after a recording's, in one vkQueueSubmit."""

    def __init__(self, dev, rec):
        import vulkan as vk
        from litegpu_vulkan._device import _Recording

        self.vk, self.dev, self.rec = vk, dev, rec
        d = dev._device
        ffi = vk.ffi
        self.pool = vk.vkCreateQueryPool(d, vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP,
                                                                    queryCount=2), None)
        self.pre, self.post = _Recording(dev, []), _Recording(dev, [])
        for r, stage, q in ((self.pre, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0),
                            (self.post, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, 1)):
            vk.vkBeginCommandBuffer(r.cmd, vk.VkCommandBufferBeginInfo(flags=0))
            if q == 0:
                vk.vkCmdResetQueryPool(r.cmd, self.pool, 0, 2)
            vk.vkCmdWriteTimestamp(r.cmd, stage, self.pool, q)
            vk.vkEndCommandBuffer(r.cmd)
        cmds = [self.pre.cmd] + ([rec.cmd] if rec is not None else []) + [self.post.cmd]
        self.cmds = ffi.new("VkCommandBuffer[]", cmds)
        self.info = vk.VkSubmitInfo(commandBufferCount=len(cmds), pCommandBuffers=self.cmds)
        self.ptr = ffi.addressof(self.info)
        self.fence = vk.vkCreateFence(d, vk.VkFenceCreateInfo(), None)
        self.fences = ffi.new("VkFence[1]", [self.fence])
        self.data = ffi.new("uint64_t[2]")

    def once(self, poll: bool) -> tuple[float, float, float]:
        """(GPU span, host submit call, host submit-to-wake), ms."""
        vk, d = self.vk, self.dev._device
        lib = vk.lib
        self.dev.finish()
        lib.vkResetFences(d, 1, self.fences)
        t0 = time.perf_counter()
        lib.vkQueueSubmit(self.dev._queue, 1, self.ptr, self.fence)
        t1 = time.perf_counter()
        if poll:
            while lib.vkGetFenceStatus(d, self.fence) == vk.VK_NOT_READY:
                pass
        else:
            lib.vkWaitForFences(d, 1, self.fences, vk.VK_TRUE, 10**10)
        t2 = time.perf_counter()
        lib.vkGetQueryPoolResults(d, self.pool, 0, 2, 16, self.data, 8,
                                  vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        span = (self.data[1] - self.data[0]) * self.dev._timestamp_ns * 1e-6
        return span, (t1 - t0) * 1e3, (t2 - t0) * 1e3


def _split(it, k, x, runs: int) -> dict[str, float]:
    inp = it.get_input_details()[0]["index"]
    outs = [d["index"] for d in it.get_output_details()]
    dev = k.device
    tid = k.plan.inputs[0]
    seg: dict[str, list[float]] = {n: [] for n in ("set_tensor", "send", "submit", "wait", "receive", "get_tensor",
                                                    "_submit")}
    for _ in range(runs + 3):
        t0 = time.perf_counter()
        it.set_tensor(inp, x)
        t1 = time.perf_counter()
        sent = k.send({tid: x})
        t2 = time.perf_counter()
        rec = k._recording_for(*sent)
        dev._queue_dirty(rec.upload_keys)  # replay() is these two calls
        t2b = time.perf_counter()
        dev._submit(rec)
        t3 = time.perf_counter()
        seg["_submit"].append(t3 - t2b)
        dev.finish()
        t4 = time.perf_counter()
        k.receive()
        t5 = time.perf_counter()
        for o in outs:
            it.get_tensor(o)
        t6 = time.perf_counter()
        for name, a, b in zip(list(seg)[:6], (t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6), strict=True):
            seg[name].append(b - a)
    return {n: _med(v[3:]) for n, v in seg.items()}


def _spans(dev, rec, runs: int) -> dict[str, float]:
    sp = _Span(dev, rec)
    got: dict[str, list[float]] = {"gpu": [], "submit call": [], "wake block": [], "wake poll": []}
    for i in range(2 * runs + 4):
        poll = bool(i % 2)
        span, call, wake = sp.once(poll)
        if i >= 4:
            got["gpu"].append(span / 1e3)
            got["submit call"].append(call / 1e3)
            got["wake poll" if poll else "wake block"].append(wake / 1e3)
    return {n: _med(v) for n, v in got.items()}


def _memory_types(dev) -> list[str]:
    """Host and GPU copy times per host-visible memory type (see the module doc)."""
    import vulkan as vk
    from litegpu.gpu._device import BufferRef
    from litegpu_vulkan import _device as vd

    mp = vk.vkGetPhysicalDeviceMemoryProperties(dev._pd)
    lines = []
    for h in range(mp.memoryHeapCount):
        heap = mp.memoryHeaps[h]
        lines.append(f"heap {h}: {heap.size / 2**30:.1f} GiB, flags {int(heap.flags)}")
    n_in, n_out = 442368, 153216
    src = np.random.default_rng(0).integers(0, 255, n_in, dtype=np.uint8)
    out = np.empty(n_out, np.uint8)
    devbuf = dev.alloc(n_in)
    real = dev._type_order
    for t in range(mp.memoryTypeCount):
        flags = int(mp.memoryTypes[t].propertyFlags)
        if not flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT:
            lines.append(f"type {t} (heap {mp.memoryTypes[t].heapIndex}): {vd._flag_words(flags)}")
            continue
        dev._type_order = lambda kind, bits, t=t: [t]
        try:
            buf = vd._Buffer(dev, n_in, f"probe{t}")
        finally:
            dev._type_order = real
        w, r = [], []
        for _ in range(30):
            t0 = time.perf_counter()
            buf.host[:n_in] = src
            t1 = time.perf_counter()
            out[:] = buf.host[:n_out]
            t2 = time.perf_counter()
            w.append(t1 - t0)
            r.append(t2 - t1)
        gin, gout = [], []
        for _ in range(10):
            for dst_list, a, b, n in ((gin, buf, devbuf, n_in), (gout, devbuf, buf, n_out)):
                t0 = time.perf_counter()
                dev._transfer(BufferRef(a, 0, n), BufferRef(b, 0, n), n)
                dst_list.append(time.perf_counter() - t0)
        lines.append(f"type {t} (heap {mp.memoryTypes[t].heapIndex}): {vd._flag_words(flags)}: host write 442 KB "
                     f"{_med(w):.3f} ms, host read 153 KB {_med(r):.3f} ms; a synchronous GPU copy of 442 KB into "
                     f"VRAM {_med(gin):.3f} ms, of 153 KB out of VRAM {_med(gout):.3f} ms (submit and wait included)")
        del buf
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--spin-us", type=float, default=2000.0, help="FENCE_SPIN_US of the polling variants")
    ap.add_argument("--no-peers", action="store_true", help="vulkan only (no OpenCL, no LiteRT)")
    args = ap.parse_args()

    import litegpu
    from litegpu_vulkan import _device as vd

    models = mediapipe_models(args.models, default=GPU_SET)
    dv = litegpu.load_delegate("vulkan", {"precision": "fp32", "cache": {"enabled": False}})
    dev = dv.device
    do = None if args.no_peers else litegpu.load_delegate("opencl", {"precision": "fp32", "cache": {"enabled": False}})
    print(machine_line())
    print(f"vulkan: {dev.info.name}, memory {dev.memory_mode}; defaults HOST_BOUNDARY={vd.HOST_BOUNDARY}, "
          f"HOST_BOUNDARY_OUTPUTS={vd.HOST_BOUNDARY_OUTPUTS}, BOUNDARY_INPUT_MEMORY={vd.BOUNDARY_INPUT_MEMORY!r}, "
          f"FENCE_SPIN_US={vd.FENCE_SPIN_US}, RESET_BESIDE={vd.RESET_BESIDE}")
    print("\n### memory types\n")
    for line in _memory_types(dev):
        print(f"- {line}")
    print(flush=True)
    # variant: (HOST_BOUNDARY, HOST_BOUNDARY_OUTPUTS, BOUNDARY_INPUT_MEMORY, FENCE_SPIN_US, RESET_BESIDE); the
    # first three are read at allocation (one interpreter per setting), the last two at each submit / wait
    spin = args.spin_us
    names = ("HOST_BOUNDARY", "HOST_BOUNDARY_OUTPUTS", "BOUNDARY_INPUT_MEMORY", "FENCE_SPIN_US", "RESET_BESIDE")
    variants = {"default": tuple(getattr(vd, n) for n in names),
                "main": (False, False, "bar", 0.0, False), "main+spin": (False, False, "bar", spin, False),
                "inputs-bar": (True, False, "bar", 0.0, False), "reset-beside": (False, False, "bar", 0.0, True),
                "default-no-reset": (True, False, "bar", spin, False),
                "inputs-system+spin": (True, False, "system", spin, False)}
    split_of = ("main", "main+spin", "inputs-bar", "reset-beside", "default")
    split_rows, ab_rows = [], []
    for name, path in models.items():
        path = str(path)
        x = None
        its, runs = {}, {}
        for v, setting in variants.items():
            for n, val in zip(names[:3], setting[:3], strict=True):
                setattr(vd, n, val)
            its[v] = _interp(dv, path)
            if x is None:
                shape = tuple(its[v].get_input_details()[0]["shape"])
                x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
            runs[v] = (_runner(its[v], x), setting[3:])
        for n, val in zip(names, variants["default"], strict=True):
            setattr(vd, n, val)
        default_spin = (vd.FENCE_SPIN_US, vd.RESET_BESIDE)
        peers = {}
        lbound = None
        if do is not None:
            peers["opencl"] = _runner(_interp(do, path), x)
            try:
                from gpu import _litert_gpu_runner

                lrun, lbound, _full = _litert_gpu_runner(path, x, enforce_f32=True)
                peers["litert"] = lrun
            except Exception as e:  # noqa: BLE001 - no LiteRT GPU here
                print(f"{name}: LiteRT GPU unavailable: {str(e).splitlines()[0][:80]}", file=sys.stderr)
        ref = runs["main"][0]()
        for v, (fn, sp) in runs.items():
            vd.FENCE_SPIN_US, vd.RESET_BESIDE = sp
            got = fn()
            err = max(float(np.abs(a - b).max() / (np.abs(b).max() + 1e-12)) for a, b in zip(got, ref, strict=True))
            if err > 1e-5:
                print(f"{name}: variant {v} differs from main by {err:.2e}", file=sys.stderr)
        # the A/B in blocks (as bench/gpu.py runs an engine: back to back, its weights in the GPU's L2 and no
        # switch between APIs' contexts inside a block), the blocks alternated over 5 rounds; the first 2
        # runs of a block are not timed
        ts: dict[str, list[float]] = {v: [] for v in list(runs) + list(peers)}
        block = max(1, args.runs // 5)
        engines = [(v, fn, sp) for v, (fn, sp) in runs.items()] + [(p, fn, default_spin) for p, fn in peers.items()]
        for _rnd in range(5):
            for v, fn, sp in engines:
                vd.FENCE_SPIN_US, vd.RESET_BESIDE = sp
                for i in range(block + 2):
                    t0 = time.perf_counter()
                    fn()
                    if i >= 2:
                        ts[v].append(time.perf_counter() - t0)
        row = {v: _med(t) for v, t in ts.items()}
        if lbound is not None:
            from gpu import _bound_ms

            row["litert device-bound"] = _bound_ms(lbound, args.runs)
        ab_rows.append((name, row))
        # the split: main, each change alone, the default
        for v in split_of:
            it = its[v]
            (k,) = [s.kernel for s in it._main.plan.steps if s.kind == "delegate"]
            vd.FENCE_SPIN_US, vd.RESET_BESIDE = variants[v][3:]
            s = _split(it, k, x, args.runs)
            s.update(_spans(dev, k._recording, args.runs))
            s["stats"] = dev.recording_stats(k._recording)
            split_rows.append((name, v, s))
        vd.FENCE_SPIN_US, vd.RESET_BESIDE = default_spin
        its.clear()
        runs.clear()
        peers.clear()
        # as it goes (a run cut short keeps what it measured); the tables follow at the end
        print(f"{name}: " + ", ".join(f"{v} {m:.3f}" for v, m in row.items()), flush=True)
        for _n, v, s in split_rows[-len(split_of):]:
            print(f"  {v}: " + ", ".join(f"{c} {s[c]:.3f}" for c in s if c != "stats") + f", {s['stats']}", flush=True)

    cols = list(ab_rows[0][1])
    print(f"\n### host to host, ms (median of {5 * max(1, args.runs // 5)}: 5 rounds of a block per variant)\n")
    print("| model | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name, row in ab_rows:
        print(f"| {name} | " + " | ".join(f"{row.get(c, float('nan')):.3f}" for c in cols) + " |")
    if "opencl" in cols:
        for v in variants:
            wins = sum(row[v] < row["opencl"] for _n, row in ab_rows)
            geo = None
            if "litert device-bound" in cols:
                geo = float(np.exp(np.mean([np.log(row[v] / row["litert device-bound"]) for _n, row in ab_rows])))
            print(f"- {v}: below opencl on {wins}/{len(ab_rows)}" + (f"; geomean / LiteRT device-bound {geo:.2f}x"
                                                                     if geo else ""))
    seg = ["set_tensor", "send", "submit", "_submit", "wait", "receive", "get_tensor", "gpu", "submit call",
           "wake block", "wake poll"]
    print("\n### vulkan split, ms (medians; gpu = the command buffer's GPU span; wake = submit to the wait's return)\n")
    print("| model | variant | " + " | ".join(seg) + " | barriers | copies |")
    print("|---|---|" + "---:|" * (len(seg) + 2))
    for name, v, s in split_rows:
        print(f"| {name} | {v} | " + " | ".join(f"{s[c]:.3f}" for c in seg)
              + f" | {s['stats']['barriers']} | {s['stats']['copies']} |")
    empty = _spans(dev, None, args.runs)
    print(f"\nempty submit: gpu {empty['gpu']:.3f}, submit call {empty['submit call']:.3f}, wake block "
          f"{empty['wake block']:.3f}, wake poll {empty['wake poll']:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
