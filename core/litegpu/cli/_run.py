"""``litegpu run``: one inference on arrays or images; outputs saved as .npy and summarised with the
execution plan; for the bundled detectors and segmenters, the detections (or mask) drawn on the picture."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import LiteGPUError
from ._common import (
    CliError,
    add_backend_options,
    add_common_args,
    chosen_backend,
    emit_json,
    fail_invoke,
    get_outputs,
    load_model,
    make_interpreter,
    out,
    parse_input_specs,
    random_inputs,
    set_inputs,
    table,
)
from ._preprocess import ImageInputs, add_image_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run one inference (arrays or images) and save the outputs",
                       description="Run the model once on the given inputs (random, seeded, for those not "
                                   "given), print the execution plan and a summary, save every output as "
                                   "NAME.npy with --output.  For the bundled MediaPipe detectors and segmenters "
                                   "given a picture, print the detections and draw them (or the mask) on it.")
    p.add_argument("model", help=".tflite model file, or the name of a fetched model")
    p.add_argument("--backend", "-b", default="cpu", help="backend to run on (default: cpu; auto: the auto-selected one; see `litegpu backends`)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="[NAME=]FILE",
                   help="value of an input: a .npy array or an image (.jpg, .png...), by input name or position; "
                        "a bare FILE for a single-input model; repeatable")
    p.add_argument("--output", "-o", metavar="DIR", help="directory for the output .npy files (created if needed)")
    p.add_argument("--picture", metavar="FILE.png",
                   help="draw the detections or mask on the input picture (default with --output: "
                        "DIR/MODEL_result.png)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--uniform", action="store_true", help="random float inputs uniform in [0, 1) instead of N(0, 1)")
    p.add_argument("--save-inputs", action="store_true", help="also save the inputs used, as input_NAME.npy")
    add_image_args(p)
    add_backend_options(p)
    add_common_args(p)
    p.set_defaults(func=run)


def safe_name(name: str, taken: set[str]) -> str:
    """A file name made from a tensor name (``StatefulPartitionedCall:0`` -> ``StatefulPartitionedCall_0``)."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "output"
    cand, k = base, 1
    while cand in taken:
        cand, k = f"{base}_{k}", k + 1
    taken.add(cand)
    return cand


def stats(a: np.ndarray) -> dict[str, Any]:
    row: dict[str, Any] = {"shape": list(a.shape), "dtype": str(a.dtype)}
    if a.size and a.dtype.kind in "biuf":
        v = a.astype(np.float64) if a.dtype.kind != "f" else a
        finite = np.isfinite(v)
        row.update(min=float(np.min(v)), max=float(np.max(v)), mean=float(np.mean(v)),
                   nonfinite=int(v.size - np.count_nonzero(finite)))
    return row


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    config, args.backend, opts = chosen_backend(model, args)
    t0 = time.perf_counter()
    interp = make_interpreter(model, args.backend, opts, config=config)
    init_s = time.perf_counter() - t0
    details = interp.get_input_details()
    images = ImageInputs(model.path, model.model, model.data, args)
    given = parse_input_specs(args.input, details, image_loader=images)
    rng = np.random.default_rng(args.seed)
    rand = random_inputs(details, rng, gaussian=not args.uniform)
    inputs = [given.get(k, rand[k]) for k in range(len(details))]
    try:
        set_inputs(interp, inputs)
        t = time.perf_counter()
        interp.invoke()
        invoke_s = time.perf_counter() - t
        outputs = get_outputs(interp)
    except (LiteGPUError, ValueError, RuntimeError) as e:
        raise fail_invoke(model, args.backend, e) from e

    out_dir = Path(args.output) if args.output else None
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"cannot create output directory {out_dir}: {e.strerror or e}") from e
    taken: set[str] = set()
    rows = []
    for d, a in zip(interp.get_output_details(), outputs, strict=True):
        row = {"name": d["name"], "index": int(d["index"]), **stats(a)}
        if out_dir is not None:
            f = out_dir / (safe_name(d["name"], taken) + ".npy")
            np.save(f, a)
            row["file"] = str(f)
        rows.append(row)
    in_rows = []
    in_taken: set[str] = set()
    for k, (d, a) in enumerate(zip(details, inputs, strict=True)):
        row = {"name": d["name"], "index": int(d["index"]), "source": "file" if k in given else "random",
               **stats(a)}
        if out_dir is not None and args.save_inputs:
            f = out_dir / ("input_" + safe_name(d["name"], in_taken) + ".npy")
            np.save(f, a)
            row["file"] = str(f)
        in_rows.append(row)
    plan = interp.get_execution_plan()
    result = {"model": model.path, "backend": args.backend, "seed": args.seed,
              "execution_plan": plan, "init_us": init_s * 1e6,
              "invoke_us": invoke_s * 1e6, "inputs": in_rows, "outputs": rows,
              "preprocessing": images.described}
    result.update(_pictures(model, images, outputs, args, out_dir))
    if args.json:
        emit_json(result)
        return 0
    # the device by name: on a machine without a GPU, "vulkan" is lavapipe, a CPU, and its times say so
    device = _device_of({s["backend"] for s in plan} - {"cpu", "folded"} or {args.backend})
    where = f"{args.backend} ({device})" if device else args.backend
    out(f"{model.name} on {where}: init {init_s * 1e3:.2f} ms, first inference {invoke_s * 1e3:.2f} ms")
    out("plan: " + plan_text(plan))
    out("inputs:")
    out(_rows_table(in_rows, source=True))
    out("outputs:")
    out(_rows_table(rows))
    if out_dir is None:
        out("(outputs not saved: give --output DIR)")
    if "detections" in result:
        dets = result["detections"]
        out(f"detections ({len(dets)}, boxes as fractions of the picture: xmin, ymin, xmax, ymax):")
        out(table(["#", "SCORE", "BOX"], [[k, f"{d['score']:.3f}", ", ".join(f"{v:.3f}" for v in d["box_xyxy"])]
                                          for k, d in enumerate(dets)], right=(0, 1)))
    if result.get("picture"):
        out(f"picture: {result['picture']}")
    return 0


def plan_text(plan: Any) -> str:
    """``cpu[3] -> opencl[90] -> cpu[1]``: where the nodes run, in order (folded nodes apart)."""
    parts = []
    for seg in plan or []:
        if isinstance(seg, dict):
            name, n = seg.get("backend", "?"), len(seg.get("node_indices") or seg.get("nodes") or [])
        else:
            name, n = str(seg), 0
        parts.append(f"{name}[{n}]")
    return " -> ".join(parts) if parts else "empty"


def _pictures(model: Any, images: ImageInputs, outputs: list[np.ndarray], args: argparse.Namespace,
              out_dir: Path | None) -> dict[str, Any]:
    """Detections (and the drawn picture) for a bundled detector or segmenter given a picture."""
    from .. import mediapipe

    if not images.images or not (images.detector or images.segmenter):
        if args.picture:
            raise CliError("--picture needs a picture input (--input FILE.jpg) and a bundled MediaPipe detector "
                           "or segmenter (litegpu models list)")
        return {}
    pixels, placement = next(iter(images.images.values()))
    res: dict[str, Any] = {}
    target = Path(args.picture) if args.picture else (out_dir / f"{Path(model.name).stem}_result.png"
                                                     if out_dir is not None else None)
    try:
        if images.detector is not None:
            dets = mediapipe.detect(images.detector, outputs, placement)
            res["detections"] = [d.as_dict() for d in dets]
            if target is not None:
                mediapipe.draw_detections(pixels, dets, target)
        elif target is not None:
            mask = outputs[0]
            if placement is not None:  # crop the letterbox padding off the mask
                h, w = mask.shape[1:3]
                y0, x0 = round(placement.top * h), round(placement.left * w)
                mask = mask[:, y0:y0 + round(placement.height * h), x0:x0 + round(placement.width * w)]
            mediapipe.draw_mask(pixels, mask, target)
    except ImportError as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"cannot write {target}: {e.strerror or e}") from e
    if target is not None:
        res["picture"] = str(target)
    return res


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.6g}"


def _rows_table(rows: list[dict[str, Any]], source: bool = False) -> str:
    headers = ["NAME", "SHAPE", "DTYPE", "MIN", "MAX", "MEAN"] + (["SOURCE"] if source else []) + ["FILE"]
    body = []
    for r in rows:
        body.append([r["name"], "x".join(map(str, r["shape"])) or "scalar", r["dtype"], _num(r.get("min")),
                     _num(r.get("max")), _num(r.get("mean"))] + ([r["source"]] if source else [])
                    + [r.get("file", "-")])
    return table(headers, body, right=(3, 4, 5))


def _device_of(backends: set[str]) -> str | None:
    """The device of the one GPU backend in ``backends`` (the first of its devices: the default
    ``device`` option), or None (several backends, the CPU, or a backend without a device list)."""
    if len(backends) != 1:
        return None
    from litegpu import available_backends

    (name,) = backends
    info = next((b for b in available_backends() if b.name == name), None)
    return info.devices[0] if info is not None and info.is_gpu and info.devices else None
