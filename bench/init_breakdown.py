"""Where a GPU delegate's prepare time goes: passes and lowering, rendering, compiling from source,
rebuilding from cached binaries, uploads.  ``python bench/init_breakdown.py --backend opencl [--models a,b]``.

Each model is prepared once per step in this process (nothing cached across models); prints a Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--models", default="")
    args = ap.parse_args()

    import litegpu
    from litegpu.gpu._lower import compile_partition
    from litegpu.gpu.kernels import render

    print(machine_line())
    print("| model | interpreter prepare (ms) | passes+lowering+memory (ms) | render (ms) | kernels | "
          "compile from source (ms) | rebuild from binaries (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        specs = []

        class Spy(litegpu.Delegate):
            name = "spy"

            def __init__(self, inner):
                super().__init__(inner.options)
                self.inner = inner

            def supports(self, node):
                return self.inner.supports(node)

            def prepare(self, partition):
                specs.append(partition)
                return self.inner.prepare(partition)

        d = litegpu.load_delegate(args.backend, {"cache": {"enabled": False}})
        t0 = time.perf_counter()
        it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[Spy(d)])
        it.allocate_tensors()
        t_all = time.perf_counter() - t0
        dev = d.device
        t0 = time.perf_counter()
        plans = [compile_partition(s, precision=d.precision, alignment=max(256, dev.info.buffer_alignment))
                 for s in specs]
        t_lower = time.perf_counter() - t0
        t0 = time.perf_counter()
        rks = {}
        for plan in plans:
            for op in plan.ops:
                rk = render(op.kernel, dev.dialect, plan.precision, **op.options)
                rks[rk.source] = rk
        t_render = time.perf_counter() - t0
        fresh = type(dev)() if args.backend == "opencl" else dev
        t0 = time.perf_counter()
        progs = {src: fresh.compile(rk) for src, rk in rks.items()}
        t_src = time.perf_counter() - t0
        bins = {src: fresh.program_binary(p) for src, p in progs.items()}
        again = type(dev)() if args.backend == "opencl" else dev
        t0 = time.perf_counter()
        for src, rk in rks.items():
            if bins[src]:
                again.program_from_binary(rk, bins[src])
        t_bin = time.perf_counter() - t0
        print(f"| {name} | {t_all * 1e3:.0f} | {t_lower * 1e3:.0f} | {t_render * 1e3:.0f} | {len(rks)} | "
              f"{t_src * 1e3:.0f} | {t_bin * 1e3:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
