"""Throughput: frames per second with 1, 2 and 4 runs in flight, litegpu's CompiledModel against LiteRT's.

Usage: ``python bench/throughput.py [--backends vulkan,opencl,webgpu] [--precisions fp32,fp16]
[--inflight 1,2,4] [--seconds 1] [--models a,b] [--no-chain] [--no-litert] [--json FILE]``

Every engine runs the same model on the same random input in this one process, through the
CompiledModel API (``hardware_accel=GPU``; litegpu's backend picked with ``backend=``, each of
``--precisions``, the serialization cache on as users run it; LiteRT's GPU accelerator with
``enforce_f32`` for our fp32 and its default (fp16) for our fp16 modes).  Per engine, precision and
model, for ``--seconds`` each:

* ``h2h@k`` (litegpu): host to host with ``k`` runs in flight -- each frame writes its input buffer,
  ``run_async``, and reads every output of the run ``k`` frames back (a ring of ``k`` buffer sets);
* ``dev`` (device-bound): runs back to back with the outputs left on the device
  (``keep_outputs_on_device``, a ring of buffer sets, up to max(inflight) runs queued), the reads at
  the end; / count.  LiteRT: ``run_by_index`` back to back,
  one read at the end (its GPU accelerator is asynchronous inside);
* LiteRT ``h2h``: write, ``run_by_index``, read every output, per frame (its API has one run in flight).

The chain (``palm_detection_full`` then ``hand_landmark_full``): per frame the camera image
(1x192x192x3) is written once, the detector runs on it (its outputs read, as an application decodes
them), a crop stage (a one-op RESIZE_BILINEAR 192 -> 224 model, standing in for MediaPipe's
rotated-rectangle crop, which runs on the CPU in MediaPipe) makes the landmark model's input on the
device, and the landmark model reads it there.  The profile line counts host transfers per frame:
litegpu writes the image into the input staging of each model that reads it (2 uploads per frame:
the detector and the crop stage; on Vulkan each a memcpy into mapped memory that the run's command
buffer copies) and copies nothing to the host between the models; LiteRT reads the crop back and
writes it into the landmark model's buffer.

Prints a Markdown table with machine and date: per model, backend and precision the rates and
litegpu's host-to-host rate at each in-flight count over LiteRT's device-bound rate of the same
precision, then the issue's bar (2 in flight).  Default run time about 6 minutes on an H100 with three
backends and two precisions (kernels compiled or loaded from the cache once per model, backend and
precision); ``--seconds 0.5`` halves the measuring.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GPU_SET, machine_line, mediapipe_models  # noqa: E402

CHAIN = ("palm_detection_full", "hand_landmark_full")


def _sizes(model) -> list[tuple[int, np.dtype, tuple[int, ...]]]:
    key = model.get_signature_by_index(0)["key"]
    return [(int(np.prod(d["shape"])), np.dtype(d["dtype"]), tuple(d["shape"]))
            for d in model.get_output_tensor_details(key).values()]


def _input(model) -> np.ndarray:
    key = model.get_signature_by_index(0)["key"]
    (d,) = model.get_input_tensor_details(key).values()
    return np.random.default_rng(0).uniform(-1, 1, d["shape"]).astype(d["dtype"])


def _read_all(bufs, sizes) -> list[np.ndarray]:
    return [b.read(n, dt).reshape(s) for b, (n, dt, s) in zip(bufs, sizes, strict=True)]


def _for(seconds: float, step, min_frames: int = 5) -> float:
    """Frames per second of ``step()`` called for ``seconds`` (at least ``min_frames``); ``step`` returns
    a finishing callable or None."""
    n, t0 = 0, time.perf_counter()
    while n < min_frames or time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n / (time.perf_counter() - t0)


# --------------------------------------------------------------------------- litegpu


def litegpu_rates(model, x: np.ndarray, inflight: list[int], seconds: float) -> dict[str, float]:
    sizes = _sizes(model)
    out: dict[str, float] = {}
    sets = [(model.create_input_buffers(0), model.create_output_buffers(0)) for _ in range(max(inflight))]
    for k in inflight:
        ring: collections.deque = collections.deque()
        state = {"i": 0}

        def step(k=k, ring=ring, state=state):
            ins, outs = sets[state["i"] % k]
            state["i"] += 1
            if len(ring) == k:
                h, o = ring.popleft()
                _read_all(o, sizes)  # waits for that run only
            ins[0].write(x)
            ring.append((model.run_async(0, ins, outs), outs))

        step()  # warm-up: the first runs of each copy of the compiled model compile nothing more
        for _ in range(2 * k):
            step()
        out[f"h2h@{k}"] = _for(seconds, step)
        while ring:
            _read_all(ring.popleft()[1], sizes)
    # device-bound: a ring of buffer sets, so up to max(inflight) runs are queued; outputs stay on the device
    for ins, _outs in sets:
        ins[0].write(x)
    state = {"i": 0}

    def dev_step():
        ins, outs = sets[state["i"] % len(sets)]
        state["i"] += 1
        model.run_async(0, ins, outs, keep_outputs_on_device=True)

    for _ in range(len(sets)):
        dev_step()
    _read_all(sets[0][1], sizes)
    n, t0 = 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t0 < seconds:
        dev_step()
        n += 1
    for _ins, outs in sets:
        _read_all(outs, sizes)  # the reads at the end
    out["dev"] = n / (time.perf_counter() - t0)
    return out


def litert_rates(model, x: np.ndarray, seconds: float) -> dict[str, float]:
    sizes = _sizes(model)
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)

    def h2h():
        ins[0].write(x)
        model.run_by_index(0, ins, outs)
        _read_all(outs, sizes)

    for _ in range(5):
        h2h()
    r = {"h2h": _for(seconds, h2h)}
    ins[0].write(x)
    n, t0 = 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t0 < seconds:
        model.run_by_index(0, ins, outs)
        n += 1
    _read_all(outs, sizes)
    r["dev"] = n / (time.perf_counter() - t0)
    return r


# --------------------------------------------------------------------------- the chain


def crop_model(src: tuple[int, ...], dst_hw: tuple[int, int]) -> bytes:
    """A one-op model resizing the camera image to the landmark model's input (the crop stand-in)."""
    from litegpu.testing import ModelBuilder

    b = ModelBuilder(description="crop stand-in")
    x = b.input("image", src)
    size = b.const("size", np.array(dst_hw, np.int32))
    y = b.tensor("crop", (src[0], *dst_hw, src[3]))
    b.op("RESIZE_BILINEAR", [x, size], [y], align_corners=False, half_pixel_centers=True)
    b.output(y)
    return b.build()


def chain_rates(CompiledModel, accel, paths: dict[str, Path], inflight: list[int], seconds: float,
                litegpu_engine: bool, **kw) -> dict[str, float]:
    palm = CompiledModel.from_file(str(paths[CHAIN[0]]), hardware_accel=accel, **kw)
    hand = CompiledModel.from_file(str(paths[CHAIN[1]]), hardware_accel=accel, **kw)
    image = _input(palm)
    hand_in = _input(hand)
    crop = CompiledModel.from_buffer(crop_model(image.shape, hand_in.shape[1:3]), hardware_accel=accel, **kw)
    psz, hsz = _sizes(palm), _sizes(hand)
    out: dict[str, float] = {}
    if not litegpu_engine:  # LiteRT: one run in flight; the crop goes through the host
        pi, po = palm.create_input_buffers(0), palm.create_output_buffers(0)
        co, hi, ho = crop.create_output_buffers(0), hand.create_input_buffers(0), hand.create_output_buffers(0)
        n_crop = int(np.prod(hand_in.shape))

        def step():
            pi[0].write(image)
            palm.run_by_index(0, pi, po)
            crop.run_by_index(0, pi, co)
            hi[0].write(co[0].read(n_crop, np.float32))
            hand.run_by_index(0, hi, ho)
            _read_all(po, psz)
            _read_all(ho, hsz)

        for _ in range(3):
            step()
        out["h2h"] = _for(seconds, step)
        out["host_copies_between_models"] = 2.0  # crop read + landmark input write, per frame
        return out
    from litegpu.gpu._runtime import DeviceTensor

    k_max = max(inflight)
    sets = [(palm.create_input_buffers(0), palm.create_output_buffers(0), crop.create_output_buffers(0),
             hand.create_output_buffers(0)) for _ in range(k_max)]
    for k in inflight:
        ring: collections.deque = collections.deque()
        state = {"i": 0}

        def step(k=k, ring=ring, state=state):
            pi, po, co, ho = sets[state["i"] % k]
            state["i"] += 1
            if len(ring) == k:
                hp, hh, po_, ho_ = ring.popleft()
                _read_all(po_, psz)
                _read_all(ho_, hsz)
            pi[0].write(image)
            hp = palm.run_async(0, pi, po)
            crop.run_async(0, pi, co, keep_outputs_on_device=True)
            hh = hand.run_async(0, co, ho)
            ring.append((hp, hh, po, ho))

        for _ in range(2 * k + 1):
            step()
        out[f"h2h@{k}"] = _for(seconds, step)
        while ring:
            _, _, po_, ho_ = ring.popleft()
            _read_all(po_, psz)
            _read_all(ho_, hsz)
    # the profile: host transfers per frame, counted over a few frames at 2 in flight
    dev = palm._slots[0].interpreter._delegates[0].device
    counts = {"upload": 0, "to_host": 0}
    real_upload, real_to_host = dev.upload, DeviceTensor.to_host

    def upload(ref, data):
        counts["upload"] += 1
        return real_upload(ref, data)

    def to_host(self):
        counts["to_host"] += 1
        return real_to_host(self)

    dev.upload, DeviceTensor.to_host = upload, to_host
    try:
        frames = 10
        for i in range(frames):
            pi, po, co, ho = sets[i % 2]
            pi[0].write(image)
            palm.run_async(0, pi, po)
            crop.run_async(0, pi, co, keep_outputs_on_device=True)
            hand.run_async(0, co, ho)
            _read_all(po, psz)
            _read_all(ho, hsz)
    finally:
        dev.upload, DeviceTensor.to_host = real_upload, real_to_host
    out["uploads_per_frame"] = counts["upload"] / frames
    out["host_copies_between_models"] = counts["to_host"] / frames
    return out


# --------------------------------------------------------------------------- main


def _litert_model(LiteRTModel, path: Path, precision: str):
    """LiteRT's CompiledModel on its GPU accelerator: fp32 with enforce_f32 (paired with our fp32), its
    default (fp16) for our fp16."""
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator as LiteRTAccel
    from ai_edge_litert.options import GpuOptions, Options

    opts = Options(hardware_accelerators=LiteRTAccel.GPU, gpu_options=GpuOptions(enforce_f32=precision == "fp32"))
    return LiteRTModel.from_file(str(path), options=opts)


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if v is None or math.isnan(v) else fmt.format(v)


def _litert_precision(p: str) -> str:
    return "fp32" if p == "fp32" else "fp16"


def _backend_spec(spec: str) -> tuple[str, dict]:
    """``NAME@KEY=VALUE@...`` -> (NAME, options); values parsed as YAML scalars (ints, floats, bools)."""
    import yaml

    name, *pairs = spec.split("@")
    return name, {k: yaml.safe_load(v) for k, _, v in (pair.partition("=") for pair in pairs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vulkan,opencl,webgpu",
                    help="comma-separated; NAME@KEY=VALUE[@KEY=VALUE] measures a backend with options "
                         "(an A/B of an option in one run, e.g. vulkan,vulkan@memory=host_visible)")
    ap.add_argument("--precisions", default="fp32,fp16", help="litegpu precisions (LiteRT: fp32 = enforce_f32, "
                                                              "fp16 modes = its default)")
    ap.add_argument("--inflight", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--models", default="")
    ap.add_argument("--no-chain", action="store_true")
    ap.add_argument("--no-litert", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    import litegpu
    from litegpu.compiled_model import CompiledModel
    from litegpu.hardware_accelerator import HardwareAccelerator

    inflight = [int(k) for k in args.inflight.split(",") if k]
    precisions = [p for p in args.precisions.split(",") if p]
    models = mediapipe_models(args.models, default=GPU_SET)
    all_models = mediapipe_models(",".join(CHAIN)) if not args.no_chain else {}
    backends = []
    for b in [b for b in args.backends.split(",") if b]:
        try:
            name, opts = _backend_spec(b)
            litegpu.load_delegate(name, opts).close()
            backends.append(b)
        except litegpu.LiteGPUError as e:
            print(f"skip {b}: {e}", file=sys.stderr)
    accel = HardwareAccelerator.GPU | HardwareAccelerator.CPU
    litert = None
    if not args.no_litert:
        try:
            from ai_edge_litert.compiled_model import CompiledModel as LiteRTModel
            from ai_edge_litert.hardware_accelerator import HardwareAccelerator as LiteRTAccel

            litert = (LiteRTModel, LiteRTAccel.GPU)
        except ImportError as e:
            print(f"skip LiteRT: {e}", file=sys.stderr)

    rows = []
    for name, path in models.items():
        row: dict = {"model": name}
        if litert is not None:
            for lp in sorted({_litert_precision(p) for p in precisions}, reverse=True):
                try:
                    m = _litert_model(litert[0], path, lp)
                    row[f"litert_{lp}_full"] = bool(m.is_fully_accelerated())
                    for k, v in litert_rates(m, _input(m), args.seconds).items():
                        row[f"litert_{lp}_{k}"] = v
                except Exception as e:  # noqa: BLE001 - LiteRT's GPU accelerator may be missing or refuse the model
                    row[f"litert_{lp}_note"] = str(e).splitlines()[0][:80]
        for b in backends:
            for p in precisions:
                t0 = time.perf_counter()
                name, opts = _backend_spec(b)
                m = CompiledModel.from_file(str(path), hardware_accel=accel, backend=name, max_in_flight=max(inflight),
                                            config={"backends": {"all": {"precision": p}, name: opts}})
                row[f"{b}_{p}_init_s"] = time.perf_counter() - t0
                row[f"{b}_{p}_full"] = m.is_fully_accelerated()
                for k, v in litegpu_rates(m, _input(m), inflight, args.seconds).items():
                    row[f"{b}_{p}_{k}"] = v
                m.close()
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    chain: dict = {}
    if all_models:
        if litert is not None:
            try:
                chain["litert"] = chain_rates(litert[0], litert[1], all_models, [1], args.seconds, False)
            except Exception as e:  # noqa: BLE001
                chain["litert_note"] = str(e).splitlines()[0][:80]
        for b in [b for b in backends if "@" not in b]:
            chain[b] = chain_rates(CompiledModel, accel, all_models, inflight, args.seconds, True, backend=b,
                                   max_in_flight=max(inflight))
        print(json.dumps(chain), file=sys.stderr, flush=True)

    print(f"\n{machine_line()}; {args.seconds:g} s per measurement; frames per second (higher is better)")
    print("LiteRT dev: LiteRT CompiledModel GPU device-bound (run_by_index back to back, one read at the end), "
          "fp32 = enforce_f32, fp16 = its default; x: litegpu's host-to-host rate / that rate\n")
    ks = [f"h2h@{k}" for k in inflight]
    head = ("| model | backend | precision | LiteRT h2h | LiteRT dev | " + " | ".join(ks) + " | dev | "
            + " | ".join(f"x@{k}" for k in inflight) + " |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        for b in backends:
            for p in precisions:
                lp = _litert_precision(p)
                ref = r.get(f"litert_{lp}_dev", math.nan)
                cells = [_f(r.get(f"litert_{lp}_h2h")), _f(ref)]
                cells += [_f(r.get(f"{b}_{p}_{k}")) for k in ks]
                cells.append(_f(r.get(f"{b}_{p}_dev")))
                cells += [_f(r.get(f"{b}_{p}_{k}", math.nan) / ref, "{:.2f}x") for k in ks]
                print(f"| {r['model']} | {b} | {p} | " + " | ".join(cells) + " |")
    if chain:
        print("\nchain palm_detection_full -> crop -> hand_landmark_full (frames per second; host copies "
              "between the models per frame)")
        for eng, r in chain.items():
            if isinstance(r, dict):
                print(f"- {eng}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()))
            else:
                print(f"- {eng}: {r}")
    # the bar: litegpu's fastest backend at 2 in flight vs LiteRT GPU device-bound, same precision
    if 2 in inflight:
        print("\nissue 14's bar (2 in flight, fastest backend, >= 1.00x of LiteRT GPU device-bound):")
        for p in precisions:
            lp = _litert_precision(p)
            for r in rows:
                ref = r.get(f"litert_{lp}_dev", math.nan)
                best = max(backends, key=lambda b: r.get(f"{b}_{p}_h2h@2", -1.0), default=None)
                if best is None or math.isnan(ref):
                    continue
                ratio = r.get(f"{best}_{p}_h2h@2", math.nan) / ref
                print(f"- {r['model']} {p}: {best} {ratio:.2f}x ({'met' if ratio >= 1 else 'NOT met'})")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_line(), "rows": rows, "chain": chain}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
