"""Does pyopencl release the GIL in the driver's costly calls, and does litegpu's ctypes path?
``python bench/cl_context_gil.py [--pyopencl-first]``

Each call runs on a second thread while the main thread counts in a loop; rounds in the millions
mean the GIL was free (the call can overlap the GPU executor's import or the model's read, as
vulkan's vkCreateDevice does), a handful mean it was held.  In order: the process's first
``clGetPlatformIDs`` (every driver starts there; through litegpu_opencl._platforms.start_drivers,
ctypes, or with ``--pyopencl-first`` through pyopencl), pyopencl's platform and device list, the
first context through pyopencl, then one through ctypes (``_platforms.create_context``).
(H200, 2026-11-26, pyopencl: the first enumeration 209 ms and the first context 170 ms, the GIL held
in both.)
"""

from __future__ import annotations

import sys
import threading
import time

import pyopencl as cl


def _on_thread(fn) -> tuple[float, int, object]:
    """``fn()`` on a second thread while this one counts: (ms, rounds, result)."""
    got: dict[str, object] = {}

    def run() -> None:
        t0 = time.perf_counter()
        got["r"] = fn()
        got["ms"] = (time.perf_counter() - t0) * 1e3

    th = threading.Thread(target=run)
    rounds = 0
    th.start()
    while th.is_alive():
        rounds += 1
    return float(got.get("ms", float("nan"))), rounds, got.get("r")


_FREE_RATE: list[float] = []  # loop rounds per ms while the other thread sleeps (the GIL free), measured first


def _verdict(ms: float, rounds: int) -> str:
    """Rounds per ms against the rate with the GIL free (a busy machine counts slower: measured, not assumed)."""
    if not ms >= 20:
        return "too quick to tell"
    share = rounds / ms / _FREE_RATE[0]
    return f"{'GIL free' if share > 0.5 else 'GIL held' if share < 0.15 else 'GIL partly held'}, {share:.0%} of the free rate"


def main() -> int:
    from litegpu_opencl import _platforms

    ms, rounds, _ = _on_thread(lambda: time.sleep(0.1))
    _FREE_RATE.append(rounds / ms)

    if "--pyopencl-first" not in sys.argv:
        ms, rounds, _ = _on_thread(_platforms.start_drivers)
        print(f"first clGetPlatformIDs through ctypes, on a thread: {ms:.1f} ms while the main thread ran {rounds} "
              f"loop rounds ({_verdict(ms, rounds)})")
    ms, rounds, pairs = _on_thread(lambda: [(p, d) for p in cl.get_platforms() for d in p.get_devices()])
    print(f"pyopencl's platforms and devices, on a thread: {ms:.1f} ms while the main thread ran {rounds} "
          f"loop rounds ({_verdict(ms, rounds)})")
    pairs.sort(key=lambda pd: 0 if pd[1].type & cl.device_type.GPU else 1)
    _plat, dev = pairs[0]
    ms, rounds, _ = _on_thread(lambda: cl.CommandQueue(cl.Context([dev])))
    print(f"{dev.name.strip()}: first context through pyopencl, on a thread, {ms:.1f} ms while the main thread ran "
          f"{rounds} loop rounds ({_verdict(ms, rounds)})")
    from litegpu_opencl import _cl

    ms, rounds, _ctx = _on_thread(lambda: _cl.create_context(_cl.Device(dev.int_ptr, None)))  # type: ignore[arg-type]
    print(f"{dev.name.strip()}: a context through ctypes, on a thread, {ms:.1f} ms while the main thread ran "
          f"{rounds} loop rounds ({_verdict(ms, rounds)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
