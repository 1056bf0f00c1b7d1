"""The quick-start main job: a real model end to end on every available backend.

``python -m litegpu.demo [MODEL_NAME]`` fetches the MediaPipe 0.10.14 models
(once, into the user cache), runs one of them (face detection by default) on
the CPU interpreter and on each available GPU backend, and prints what ran
where, how long it took and how far each answer is from LiteRT's (when
``ai-edge-litert`` is installed) or from litegpu's CPU reference.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

__all__ = ["main"]


def _run(model_path: str, x: np.ndarray, delegates: list) -> tuple[list[np.ndarray], float, list]:
    import litegpu

    it = litegpu.Interpreter(model_path=model_path, experimental_delegates=delegates)
    it.allocate_tensors()
    inp = it.get_input_details()[0]["index"]
    it.set_tensor(inp, x)
    it.invoke()  # first run: warm-up
    t0 = time.perf_counter()
    runs = 5
    for _ in range(runs):
        it.set_tensor(inp, x)
        it.invoke()
    dt = (time.perf_counter() - t0) / runs
    outs = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    return outs, dt, it.get_execution_plan()


def main(argv: list[str] | None = None) -> int:
    import litegpu
    from litegpu.models import fetch_mediapipe
    from litegpu.testing import rel_error

    ap = argparse.ArgumentParser(prog="python -m litegpu.demo", description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="face_detection_short_range")
    args = ap.parse_args(argv)

    models = fetch_mediapipe()
    if args.model not in models:
        print(f"unknown model {args.model!r}; available: {', '.join(sorted(models))}", file=sys.stderr)
        return 2
    path = str(models[args.model])
    rng = np.random.default_rng(0)
    probe = litegpu.Interpreter(model_path=path)
    shape = tuple(int(s) for s in probe.get_input_details()[0]["shape"])
    x = rng.random(shape, dtype=np.float32)

    reference_name = "litegpu cpu"
    try:
        from litegpu.testing import run_litert

        reference = run_litert(path, [x], reference=False)
        reference_name = "LiteRT (XNNPACK)"
    except ImportError:
        reference = None

    print(f"model {args.model}: input {shape}; answers compared with {reference_name}")
    print(f"{'backend':<10} {'ms/run':>8} {'max rel err':>12}  {'plan':<22}  device")
    rows = []
    for b in litegpu.available_backends():
        if b.name != "cpu" and not b.is_gpu:  # the demo compares GPU backends with the CPU interpreter
            continue
        device = b.devices[0] if b.devices else "-"
        if b.name == "cpu":
            rows.append((b.name, [], device))
        elif b.available:
            rows.append((b.name, [litegpu.load_delegate(b.name)], device))
        else:
            print(f"{b.name:<10} {'-':>8} {'-':>12}  unavailable: {b.reason}")
    status = 0
    software = []
    for name, delegates, device in rows:
        outs, dt, plan = _run(path, x, delegates)
        if reference is None:
            reference = outs
        err = max(rel_error(o, r) for o, r in zip(outs, reference, strict=False))
        segs = ", ".join(f"{s['backend']}:{len(s['node_indices'])}" for s in plan)
        print(f"{name:<10} {dt * 1e3:8.2f} {err:12.2e}  {segs:<22}  {device}")
        if delegates and _is_software(device):
            software.append(name)
        if not err <= 1e-3:
            status = 1
    if software:
        # a newcomer reads the table as GPU speed: say that these rows are a CPU standing in for one
        print(f"note: {', '.join(software)} ran on a CPU implementation of the GPU API (no GPU here): their "
              "answers are checked, their times say nothing about a GPU (docs/performance.md has GPU numbers)")
    return status


#: device names of the CPU implementations of the GPU APIs (Mesa's lavapipe/llvmpipe, PoCL's CPU
#: device, SwiftShader)
_SOFTWARE = ("llvmpipe", "lavapipe", "pthread", "Portable Computing Language", "SwiftShader")


def _is_software(device: str) -> bool:
    return any(s.lower() in device.lower() for s in _SOFTWARE)


if __name__ == "__main__":
    raise SystemExit(main())
