"""Launches per invoke of each model's GPU partitions, by kernel template (boundary layout launches included).

``python bench/gpu_launches.py [--backend opencl|vulkan|webgpu] [--models a,b] [--precision fp32]``
prints a Markdown table, one row a model.  The count is a property of the compiled plan, so PoCL or lavapipe
give the numbers the NVIDIA GPU runs; no timing is done.  The kernel variants (and so the launch counts: a split
reduction, the priced fusions) follow the cost model's device calibration and the host's cost of a launch the
backend tells for the device (``DeviceInfo.launch_host_us``): ``--cost-profile nvidia`` plans as for the NVIDIA
GPU on any machine (default: the device's own), with that backend's host cost there (opencl's plan on NVIDIA
takes more fusions than vulkan's).  ``--set MODULE.NAME=VALUE`` flips a compiler constant first (an A/B switch).
``--nodes`` adds, per model, every launch with the graph nodes it covers.
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models, set_attribute  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--backend", default="opencl", choices=("opencl", "vulkan", "webgpu"))
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--nodes", action="store_true")
    ap.add_argument("--cost-profile", default="", help="plan with this _cost.PROFILES calibration (e.g. nvidia)")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="set a compiler module constant before compiling (an A/B switch)")
    args = ap.parse_args()
    for item in args.set:
        set_attribute(item)
    logging.getLogger("litegpu").setLevel(logging.ERROR)  # the tables are the output

    import litegpu

    if args.cost_profile:
        from litegpu.gpu import _cost, _runtime

        forced = _cost.PROFILES[args.cost_profile]
        if args.backend == "opencl":  # and the host's cost of a launch the backend tells that device's plans
            from dataclasses import replace

            from litegpu_opencl._device import launch_host_us

            forced = replace(forced, launch_host_us=launch_host_us(args.cost_profile, command_buffers=False))
        _runtime.profile_for = lambda info: forced  # compile_graph prices the variants with it

    print(machine_line())
    print(f"| model ({args.backend}, {args.precision}{', cost ' + args.cost_profile if args.cost_profile else ''}) | launches | partitions | CPU steps | by kernel |")
    print("|---|---:|---:|---:|---|")
    details = []
    for name, path in mediapipe_models(args.models, default=GPU_SET).items():
        d = litegpu.load_delegate(args.backend, {"precision": args.precision, "cache": {"enabled": False}})
        it = litegpu.Interpreter(model_path=str(path), experimental_delegates=[d])
        it.allocate_tensors()
        steps = it._main.plan.steps
        kernels = [s.kernel for s in steps if s.kind == "delegate"]
        ops = it._main.plan.subgraph.operators
        count: collections.Counter[str] = collections.Counter()
        for k in kernels:
            count.update(op.kernel for op in k.ops)
            details.extend((name, op.describe(), [f"#{n} {ops[n].name}" for n in op.origin]) for op in k.ops)
        by = ", ".join(f"{n} {c}" for c, n in count.most_common())
        print(f"| {name} | {sum(count.values())} | {len(kernels)} | {sum(s.kind != 'delegate' for s in steps)} | "
              f"{by} |", flush=True)
        d.close()
    if args.nodes:
        for name, what, nodes in details:
            print(f"{name}: {what}: {' + '.join(nodes) or '- (partition boundary)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
