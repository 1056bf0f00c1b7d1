"""Dynamic-range ("hybrid") MobileNet v2 on a GPU backend: LiteRT's hybrid integer arithmetic simulated
(``quantization_simulation``, the default) against the float twin view (simulation off) and LiteRT's CPU.

Usage: ``PYTHONPATH=tests python bench/gpu_hybrid.py [--backend opencl] [--size 224] [--runs 50]``
(on the NVIDIA machine: ``bash bench/device_run.sh env PYTHONPATH=/tmp/lg:/tmp/site:tests python3
bench/gpu_hybrid.py``).

The model is the builder's MobileNet v2 (``tests/_mobilenet_v2.py``, random He-scaled weights, every
weight tensor of >= 1024 elements int8 per channel), 1000 classes.  Prints, per engine: host-to-host
latency (median of ``--runs`` invokes after warm-up), device-bound time (``--runs`` invokes back to back,
one read, / runs) for the GPU, and the output's rel_error against LiteRT's hybrid CPU run (XNNPACK,
1 thread, in the same process) and its reference kernels.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import machine_line, median_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()

    import litegpu
    from _mobilenet_v2 import mobilenet_v2
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from litegpu.testing import rel_error

    model = mobilenet_v2(args.size, hybrid=True, classes=1000)
    x = np.random.default_rng(1).uniform(-1, 1, (1, args.size, args.size, 3)).astype(np.float32)
    print(machine_line())
    print(f"hybrid MobileNet v2 {args.size}x{args.size}, {len(model) / 1e6:.1f} MB")

    ref = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    ref.allocate_tensors()
    ref.set_tensor(ref.get_input_details()[0]["index"], x)
    ref.invoke()
    expect = ref.get_tensor(ref.get_output_details()[0]["index"]).copy()

    cpu = Interpreter(model_content=model, num_threads=1)
    cpu.allocate_tensors()
    cpu.set_tensor(cpu.get_input_details()[0]["index"], x)
    out_in = cpu.get_output_details()[0]["index"]
    ms = median_ms(cpu.invoke, args.runs)
    print(f"| LiteRT CPU (XNNPACK, 1 thread) | {ms:.2f} ms | - | {rel_error(cpu.get_tensor(out_in), expect):.1e} |")

    for sim in (True, False):
        d = litegpu.load_delegate(args.backend, {"quantization_simulation": sim})
        it = litegpu.Interpreter(model_content=model, experimental_delegates=[d])
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        out = it.get_output_details()[0]["index"]

        def host() -> None:
            it.invoke()
            it.get_tensor(out)

        ms = median_ms(host, args.runs)
        t = time.perf_counter()
        for _ in range(args.runs):
            it.invoke()
        it.get_tensor(out)
        dev = (time.perf_counter() - t) / args.runs * 1e3
        plan = {s["backend"] for s in it.get_execution_plan()}
        print(f"| litegpu {args.backend} simulation {'on' if sim else 'off'} ({', '.join(sorted(plan))}) | "
              f"{ms:.2f} ms | {dev:.2f} ms | {rel_error(it.get_tensor(out), expect):.1e} |")


if __name__ == "__main__":
    main()
