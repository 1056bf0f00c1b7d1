"""Does pyopencl release the GIL while the driver creates a context?  ``python bench/cl_context_gil.py``

Lists the platforms and devices (the first call, on a thread too), creates the process's first context (the costly one: 128 ms to 1.7 s on an H200)
on a second thread while the main thread counts in a loop, then a second context alone, and prints
both times and how many loop rounds the main thread made meanwhile: rounds in the millions mean the GIL was free (so a backend could create
its context beside the model's read, as vulkan does with vkCreateDevice); a handful mean it was held.
"""

from __future__ import annotations

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


def _verdict(ms: float, rounds: int) -> str:
    # a free GIL lets the loop run ~10,000 rounds a ms; a call made in under 20 ms says nothing
    return "too quick to tell" if not ms >= 20 else "GIL free" if rounds > 1000 * ms else "GIL held"


def main() -> int:
    # the process's first platform and device enumeration (the driver's start), on a thread
    ms, rounds, pairs = _on_thread(lambda: [(p, d) for p in cl.get_platforms() for d in p.get_devices()])
    print(f"platforms and devices, first call, on a thread: {ms:.1f} ms while the main thread ran {rounds} "
          f"loop rounds ({_verdict(ms, rounds)})")
    pairs.sort(key=lambda pd: 0 if pd[1].type & cl.device_type.GPU else 1)
    _plat, dev = pairs[0]
    ms, rounds, _ = _on_thread(lambda: cl.CommandQueue(cl.Context([dev])))
    t = time.perf_counter()
    cl.CommandQueue(cl.Context([dev]))
    again = (time.perf_counter() - t) * 1e3
    print(f"{dev.name.strip()}: first context, on a thread, {ms:.1f} ms while the main thread ran {rounds} "
          f"loop rounds ({_verdict(ms, rounds)}); a second context {again:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
