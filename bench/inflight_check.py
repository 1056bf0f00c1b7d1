"""Runs in flight give the answers of runs one at a time, on a real GPU.

``python bench/inflight_check.py [--backends vulkan,opencl] [--models a,b] [--inflight 4] [--frames 12]``

For each model and backend: ``--frames`` different random inputs, each run alone (``run_by_index``,
then read) and then all of them through ``run_async`` with ``--inflight`` runs in flight (the reads
after every run was queued).  Prints the largest absolute difference per model; the kernels are
the same, so anything but 0 means one run saw another's buffers.  A correctness check for the
device, where the tests do not run; ``tests/test_compiled_model_async.py`` is the CI's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vulkan,opencl")
    ap.add_argument("--models", default="")
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--frames", type=int, default=12)
    args = ap.parse_args()

    from litegpu.compiled_model import CompiledModel
    from litegpu.hardware_accelerator import HardwareAccelerator

    print(machine_line())
    print("| model | backend | frames | in flight | max abs difference, in flight vs one at a time |\n|---|---|---:|---:|---:|")
    worst = 0.0
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        for b in [b for b in args.backends.split(",") if b]:
            m = CompiledModel.from_file(str(path), hardware_accel=HardwareAccelerator.GPU, backend=b,
                                        max_in_flight=args.inflight)
            key = m.get_signature_by_index(0)["key"]
            (d,) = m.get_input_tensor_details(key).values()
            outs = list(m.get_output_tensor_details(key).values())
            sizes = [(int(np.prod(o["shape"])), o["dtype"], tuple(o["shape"])) for o in outs]
            rng = np.random.default_rng(1)
            xs = [rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) for _ in range(args.frames)]

            def read(bufs):
                return [bf.read(n, dt).reshape(s) for bf, (n, dt, s) in zip(bufs, sizes, strict=True)]

            alone = []
            i, o = m.create_input_buffers(0), m.create_output_buffers(0)
            for x in xs:
                i[0].write(x)
                m.run_by_index(0, i, o)
                alone.append(read(o))
            sets = [(m.create_input_buffers(0), m.create_output_buffers(0)) for _ in xs]
            handles = []
            for x, (i, o) in zip(xs, sets, strict=True):
                i[0].write(x)
                handles.append(m.run_async(0, i, o))
            diff = 0.0
            for h, (_i, o), want in zip(handles, sets, alone, strict=True):
                h.wait()
                diff = max(diff, *(float(np.max(np.abs(g - w))) for g, w in zip(read(o), want, strict=True)))
            worst = max(worst, diff)
            print(f"| {name} | {b} | {args.frames} | {args.inflight} | {diff:.3g} |")
            m.close()
    print(f"\nworst: {worst:.3g} ({'identical' if worst == 0 else 'DIFFERENT'})")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
