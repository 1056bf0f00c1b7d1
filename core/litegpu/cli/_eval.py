"""``litegpu eval classification|detection``: task accuracy of a backend next to the CPU reference.

Classification: top-1..top-K accuracy over labelled images.  Detection: COCO-style
mAP@[.5:.95], mAP@.5 and mAP@.75 (own implementation, :mod:`._coco`) over images
with a COCO annotation file.  Each image is preprocessed once (resize, mean/std,
RGB/BGR, quantization: from flags, else from the model's metadata) and run on the
backend under test and on the CPU reference.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import LiteGPUError
from ._coco import Detection, evaluate
from ._common import (
    CliError,
    add_backend_options,
    add_common_args,
    chosen_backend,
    emit_json,
    err,
    fail_invoke,
    get_outputs,
    load_model,
    make_interpreter,
    make_progress,
    out,
    set_inputs,
    table,
)
from ._preprocess import (
    Preprocess,
    add_image_args,
    list_images,
    load_image,
    read_metadata,
    softmax_free_scores,
    topk_indices,
)


def _common_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=".tflite model file")
    p.add_argument("--images", required=True, metavar="DIR", help="directory of images (.npy, or any Pillow format)")
    p.add_argument("--backend", "-b", default="cpu", help="backend under test (default cpu; auto: the auto-selected one)")
    p.add_argument("--no-reference", action="store_true", help="skip the CPU reference run")
    p.add_argument("--limit", type=int, metavar="N", help="evaluate only the first N images")
    add_image_args(p)
    add_backend_options(p)
    add_common_args(p, progress=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="task accuracy (classification top-k, detection mAP) vs the CPU reference",
                       description="Evaluate a model's task accuracy on a backend and on the CPU reference.")
    esub = p.add_subparsers(dest="eval_task", metavar="TASK")
    c = esub.add_parser("classification", help="top-1..top-K accuracy on labelled images",
                        description="Top-1..top-K accuracy of an image classifier on labelled images.  --labels "
                                    "is either 'FILE LABEL' per line (LABEL an index or a class name), one label "
                                    "per line in sorted image order, or a JSON object {file: label}.")
    _common_eval_args(c)
    c.add_argument("--labels", required=True, metavar="FILE", help="ground-truth labels (see above)")
    c.add_argument("--top-k", type=int, default=5, metavar="K", help="largest k reported (default 5)")
    c.add_argument("--class-names", metavar="FILE",
                   help="class names, one per line, in model output order (default: the model's label file)")
    c.add_argument("--label-offset", type=int, default=0, metavar="N",
                   help="added to ground-truth indices to get the output index (1 for a background class)")
    c.add_argument("--output-index", type=int, default=0, metavar="I", help="which model output holds the scores")
    c.set_defaults(func=run_classification)
    d = esub.add_parser("detection", help="COCO-style mAP on images with a COCO annotation file",
                        description="COCO-style mAP@[.5:.95] and mAP@.5 of an object detector.  The model's "
                                    "outputs are read as TFLite detection post-processing outputs: boxes [1,N,4] "
                                    "(normalised ymin,xmin,ymax,xmax), classes [1,N], scores [1,N], count [1].")
    _common_eval_args(d)
    d.add_argument("--annotations", required=True, metavar="COCO.json", help="COCO annotation file")
    d.add_argument("--decoder", choices=("auto", "mediapipe", "none"), default="auto",
                   help="how raw outputs become detections: mediapipe (SSD anchors + weighted NMS, for the "
                        "bundled MediaPipe detectors), none (outputs already decoded, see --outputs); auto: "
                        "mediapipe for a bundled MediaPipe detector, else none")
    d.add_argument("--outputs", default="boxes,classes,scores,count", metavar="ROLES",
                   help="role of each model output in order (default boxes,classes,scores,count)")
    d.add_argument("--box-order", choices=("yxyx", "xyxy"), default="yxyx", help="coordinate order (default yxyx)")
    d.add_argument("--box-coords", choices=("normalized", "pixels"), default="normalized",
                   help="boxes normalised to [0, 1] or in model-input pixels (default normalized)")
    d.add_argument("--class-offset", type=int, default=0, metavar="N",
                   help="category_id = class index + N (default 0; 1 for TFLite COCO SSD models)")
    d.add_argument("--score-threshold", type=float, default=0.0, metavar="S", help="drop detections below S")
    d.add_argument("--max-dets", type=int, default=100, metavar="N", help="detections per image (default 100)")
    d.add_argument("--save-detections", metavar="FILE.json", help="write the backend's detections (COCO results)")
    d.set_defaults(func=run_detection)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


# --------------------------------------------------------------------------- shared


class _Runner:
    """The backend under test and (unless skipped or the same) the CPU reference."""

    def __init__(self, args: argparse.Namespace):
        self.model = load_model(args.model)
        config, args.backend, opts = chosen_backend(self.model, args)
        self.backend = args.backend
        self.test = make_interpreter(self.model, args.backend, opts, config=config)
        self.ref = None
        if not args.no_reference and args.backend != "cpu":
            self.ref = make_interpreter(self.model, "cpu", {}, num_threads=1)
        details = self.test.get_input_details()
        if len(details) != 1:
            raise CliError(f"{self.model.name} has {len(details)} inputs; eval needs an image model with one input")
        self.metadata = read_metadata(self.model.model, self.model.data)
        self.pre = Preprocess.for_input(details[0], args, self.metadata)
        self.out_details = self.test.get_output_details()

    def run(self, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        try:
            set_inputs(self.test, [x])
            self.test.invoke()
            got = get_outputs(self.test)
        except (LiteGPUError, ValueError, RuntimeError) as e:
            raise fail_invoke(self.model, self.backend, e) from e
        ref = None
        if self.ref is not None:
            try:
                set_inputs(self.ref, [x])
                self.ref.invoke()
                ref = get_outputs(self.ref)
            except (LiteGPUError, ValueError, RuntimeError) as e:
                raise fail_invoke(self.model, "cpu", e) from e
        return got, ref


def _read_lines(path: str, what: str) -> list[str]:
    try:
        return [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    except FileNotFoundError:
        raise CliError(f"{what}: file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"{what}: cannot read {path}: {e}") from None


# --------------------------------------------------------------------------- classification


def _parse_labels(path: str, images: Sequence[Path]) -> dict[str, str]:
    """{image file name: label text}."""
    if path.lower().endswith(".json"):
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CliError(f"--labels: file not found: {path}") from None
        except (OSError, ValueError) as e:
            raise CliError(f"--labels: {path} is not valid JSON: {e}") from None
        if isinstance(data, dict):
            return {str(k): str(v) for k, v in data.items()}
        if isinstance(data, list):
            return _ordered(path, [str(v) for v in data], images)
        raise CliError(f"--labels: {path} must hold an object {{file: label}} or a list")
    lines = _read_lines(path, "--labels")
    split = [re.split(r"[\s,;]+", ln) for ln in lines]
    if all(len(s) >= 2 for s in split):
        return {" ".join(s[:-1]) if len(s) > 2 else s[0]: s[-1] for s in split}
    if all(len(s) == 1 for s in split):
        return _ordered(path, lines, images)
    raise CliError(f"--labels: {path} mixes 'FILE LABEL' lines with single-label lines")


def _ordered(path: str, labels: list[str], images: Sequence[Path]) -> dict[str, str]:
    if len(labels) < len(images):
        raise CliError(f"--labels: {path} has {len(labels)} labels for {len(images)} images (sorted order)")
    return {img.name: lab for img, lab in zip(images, labels, strict=False)}


def _label_index(text: str, names: list[str] | None, offset: int, where: str) -> int:
    try:
        return int(text) + offset
    except ValueError:
        pass
    if names is None:
        raise CliError(f"--labels: label {text!r} of {where} is not an index and no class names are known "
                       "(give --class-names FILE)")
    try:
        return names.index(text)
    except ValueError:
        raise CliError(f"--labels: label {text!r} of {where} is not a known class name") from None


def run_classification(args: argparse.Namespace) -> int:
    if args.top_k < 1:
        raise CliError("--top-k must be at least 1")
    images = list_images(args.images)
    if args.limit is not None:
        images = images[: args.limit]
    if not images:
        raise CliError(f"--images: no images in {args.images} (looked for {', '.join(('.npy', '.png', '.jpg'))}, ...)")
    labels = _parse_labels(args.labels, images)
    r = _Runner(args)
    names = _read_lines(args.class_names, "--class-names") if args.class_names else r.metadata.labels
    if not 0 <= args.output_index < len(r.out_details):
        raise CliError(f"--output-index {args.output_index}: the model has {len(r.out_details)} outputs")
    od = r.out_details[args.output_index]
    n_classes = int(np.prod(od["shape"]))
    K = min(args.top_k, n_classes)  # top-5 of 3 classes would report two meaningless columns
    if K < args.top_k:
        err(f"litegpu eval: note: --top-k {args.top_k} > the model's {n_classes} classes: reporting top-1..top-{K}")
    listed = {img.name for img in images} | {img.stem for img in images}
    orphans = sorted(k for k in labels if k not in listed)
    if orphans and args.limit is None:
        # a label naming no image is a typo or a missing file; the accuracy would quietly cover fewer images
        shown = ", ".join(orphans[:5]) + (f" and {len(orphans) - 5} more" if len(orphans) > 5 else "")
        err(f"litegpu eval: warning: {len(orphans)} label(s) name no image in {args.images}: {shown}")
    hits = {"test": np.zeros(K, np.int64), "reference": np.zeros(K, np.int64)}
    agree = 0
    rows = []
    skipped = []
    with make_progress(args, "eval classification", len(images)) as bar:
        for img in images:
            lab = labels.get(img.name, labels.get(img.stem))
            if lab is None:
                skipped.append(img.name)
                bar.update()
                continue
            truth = _label_index(lab, names, args.label_offset, img.name)
            if not 0 <= truth < n_classes:
                raise CliError(f"label {lab!r} of {img.name} -> class {truth}, outside the model's {n_classes} "
                               "classes (check --label-offset)")
            x = r.pre(load_image(img))
            got, ref = r.run(x)
            row = {"image": img.name, "label": truth}
            for which, outs in (("test", got), ("reference", ref)):
                if outs is None:
                    continue
                scores = softmax_free_scores(outs[args.output_index], od).reshape(-1)
                top = topk_indices(scores, K)
                pos = np.nonzero(top == truth)[0]
                rank = int(pos[0]) if pos.size else K
                hits[which][rank:] += 1  # a hit at rank r counts for every k > r
                row[which] = [int(t) for t in top]
            if ref is not None:
                agree += int(row["test"][0] == row["reference"][0])
            rows.append(row)
            bar.update()
    if not rows:
        raise CliError(f"--labels: none of the {len(images)} images has a label in {args.labels}")
    n = len(rows)
    res: dict[str, Any] = {
        "task": "classification", "model": r.model.path, "backend": args.backend, "images": n,
        "skipped_unlabelled": skipped, "labels_without_image": orphans if args.limit is None else [], "top_k": K, "preprocessing": r.pre.describe(),
        "accuracy": {f"top{k + 1}": float(hits["test"][k] / n) for k in range(K)},
        "reference_accuracy": ({f"top{k + 1}": float(hits["reference"][k] / n) for k in range(K)}
                               if r.ref is not None else None),
        "top1_agreement_with_reference": (agree / n) if r.ref is not None else None,
        "predictions": rows,
    }
    if args.json:
        emit_json(res)
        return 0
    out(f"{r.model.name}: classification on {n} images, backend {args.backend}"
        + (f" ({len(skipped)} unlabelled skipped)" if skipped else ""))
    _print_pre(res["preprocessing"])
    head = ["", *[f"TOP-{k + 1}" for k in range(K)]]
    body = [[args.backend, *[f"{v:.4f}" for v in res["accuracy"].values()]]]
    if res["reference_accuracy"] is not None:
        body.append(["cpu reference", *[f"{v:.4f}" for v in res["reference_accuracy"].values()]])
    out(table(head, body, right=range(1, K + 1)))
    if res["top1_agreement_with_reference"] is not None:
        out(f"top-1 agreement with the CPU reference: {res['top1_agreement_with_reference']:.4f}")
    return 0


def _print_pre(p: dict[str, Any]) -> None:
    if p.get("letterbox"):
        out(f"preprocessing: letterbox to {p['size'][0]}x{p['size'][1]}, pixels to {p['range']} "
            f"(from the {p['normalization_from']}); decoding: {p.get('decoder', '-')}")
        return
    norm = ("none (raw 0..255 pixels)" if p["mean"] is None and p["std"] is None else
            f"mean={p['mean']} std={p['std']} (from {p['normalization_from']})")
    out(f"preprocessing: resize to {p['size'][0]}x{p['size'][1]} ({p['resize']}), {p['channel_order']}, "
        f"normalisation {norm}, input {p['dtype']}")


# --------------------------------------------------------------------------- detection


_ROLES = ("boxes", "classes", "scores", "count")


def _roles(spec: str, n_outputs: int) -> dict[str, int]:
    parts = [s.strip() for s in spec.split(",")]
    bad = [s for s in parts if s not in (*_ROLES, "", "-")]
    if bad:
        raise CliError(f"--outputs: unknown role(s) {', '.join(bad)} (roles: {', '.join(_ROLES)}, '-' to skip)")
    roles = {s: i for i, s in enumerate(parts) if s in _ROLES}
    for need in ("boxes", "scores"):
        if need not in roles:
            raise CliError(f"--outputs must name the {need} output")
    if max(roles.values()) >= n_outputs:
        raise CliError(f"--outputs names {len(parts)} outputs; the model has {n_outputs}")
    return roles


def _detections(outs: list[np.ndarray], roles: dict[str, int], args: argparse.Namespace, image_id: Any,
                size: tuple[float, float], in_hw: tuple[int, int]) -> list[Detection]:
    boxes = np.asarray(outs[roles["boxes"]], np.float64).reshape(-1, 4)
    scores = np.asarray(outs[roles["scores"]], np.float64).reshape(-1)
    classes = (np.asarray(outs[roles["classes"]], np.float64).reshape(-1) if "classes" in roles
               else np.zeros_like(scores))
    n = min(len(boxes), len(scores), len(classes))
    if "count" in roles:
        n = min(n, int(np.asarray(outs[roles["count"]]).reshape(-1)[0]))
    boxes, scores, classes = boxes[:n], scores[:n], classes[:n]
    if args.box_order == "yxyx":
        y0, x0, y1, x1 = boxes.T
    else:
        x0, y0, x1, y1 = boxes.T
    w_img, h_img = size
    if args.box_coords == "pixels":
        x0, x1 = x0 / in_hw[1], x1 / in_hw[1]
        y0, y1 = y0 / in_hw[0], y1 / in_hw[0]
    x0, x1 = np.clip(x0, 0, 1) * w_img, np.clip(x1, 0, 1) * w_img
    y0, y1 = np.clip(y0, 0, 1) * h_img, np.clip(y1, 0, 1) * h_img
    keep = scores >= args.score_threshold
    return [Detection(image_id, int(round(c)) + args.class_offset,
                      (float(a), float(b), float(max(0.0, c2 - a)), float(max(0.0, d2 - b))), float(s))
            for a, b, c2, d2, s, c, k in zip(x0, y0, x1, y1, scores, classes, keep, strict=True) if k]


def _load_coco(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"--annotations: file not found: {path}") from None
    except (OSError, ValueError) as e:
        raise CliError(f"--annotations: {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or "images" not in data or "annotations" not in data:
        raise CliError(f"--annotations: {path} is not a COCO annotation file (needs 'images' and 'annotations')")
    for a in data["annotations"]:
        if not {"image_id", "category_id", "bbox"} <= set(a):
            raise CliError(f"--annotations: annotation {a.get('id', '?')} lacks image_id, category_id or bbox")
    return data


def run_detection(args: argparse.Namespace) -> int:
    coco = _load_coco(args.annotations)
    img_dir = Path(args.images)
    if not img_dir.is_dir():
        raise CliError(f"--images: not a directory: {args.images}")
    entries = []
    for im in coco["images"]:
        f = img_dir / str(im.get("file_name", ""))
        if not f.is_file() and f.with_suffix(".npy").is_file():
            f = f.with_suffix(".npy")  # a .npy stand-in for a .jpg listed in the annotations
        if f.is_file():
            entries.append((im, f))
    if args.limit is not None:
        entries = entries[: args.limit]
    if not entries:
        raise CliError(f"--images: none of the {len(coco['images'])} images listed in {args.annotations} "
                       f"is in {args.images}")
    r = _Runner(args)
    from .. import mediapipe

    spec = mediapipe.detector_for(r.model.path) if args.decoder != "none" else None
    if args.decoder == "mediapipe" and spec is None:
        raise CliError(f"--decoder mediapipe: {r.model.name} is not one of the bundled MediaPipe detectors "
                       f"({', '.join(mediapipe.DETECTORS)})")
    roles = _roles(args.outputs, len(r.out_details)) if spec is None else {}
    # the MediaPipe decoder needs the letterboxed input its anchors assume (even with --mean/--std)
    pre = r.pre if spec is None else replace(r.pre, letterbox=spec.input_range)
    pre_desc = pre.describe() if spec is None else {
        **pre.describe(), "decoder": f"mediapipe SSD ({spec.num_anchors} anchors, "
                                     f"weighted NMS at IoU {spec.nms_threshold})"}
    dets: dict[str, list[Detection]] = {"test": [], "reference": []}
    with make_progress(args, "eval detection", len(entries)) as bar:
        for im, f in entries:
            img = load_image(f)
            size = (float(im.get("width") or img.shape[1]), float(im.get("height") or img.shape[0]))
            x, placement = pre.prepare(img)
            got, ref = r.run(x)
            for which, outs in (("test", got), ("reference", ref)):
                if outs is None:
                    continue
                if spec is not None:
                    w_img, h_img = size
                    found = [Detection(im["id"], args.class_offset,
                                       (d.box[0] * w_img, d.box[1] * h_img, (d.box[2] - d.box[0]) * w_img,
                                        (d.box[3] - d.box[1]) * h_img), d.score)
                             for d in mediapipe.detect(spec, outs, placement) if d.score >= args.score_threshold]
                else:
                    found = _detections(outs, roles, args, im["id"], size, (r.pre.height, r.pre.width))
                dets[which].extend(sorted(found, key=lambda d: -d.score)[: args.max_dets])
            bar.update()
    ids = [im["id"] for im, _ in entries]
    metrics = evaluate(ids, coco["annotations"], dets["test"], max_dets=args.max_dets)
    ref_metrics = evaluate(ids, coco["annotations"], dets["reference"], max_dets=args.max_dets) \
        if r.ref is not None else None
    if args.save_detections:
        rows = [{"image_id": d.image_id, "category_id": d.category_id, "bbox": list(d.bbox), "score": d.score}
                for d in dets["test"]]
        try:
            Path(args.save_detections).write_text(json.dumps(rows), encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot write {args.save_detections}: {e.strerror or e}") from e
    res = {"task": "detection", "model": r.model.path, "backend": args.backend, "images": len(entries),
           "preprocessing": pre_desc, "metrics": metrics, "reference_metrics": ref_metrics}
    if args.json:
        emit_json(res)
        return 0
    out(f"{r.model.name}: detection on {len(entries)} images, backend {args.backend} "
        f"({metrics['detections']} detections, {metrics['ground_truth_boxes']} ground-truth boxes)")
    _print_pre(res["preprocessing"])

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.4f}"

    body = [[args.backend, f(metrics["mAP"]), f(metrics["mAP50"]), f(metrics["mAP75"])]]
    if ref_metrics is not None:
        body.append(["cpu reference", f(ref_metrics["mAP"]), f(ref_metrics["mAP50"]), f(ref_metrics["mAP75"])])
    out(table(["", "mAP@[.5:.95]", "mAP@.5", "mAP@.75"], body, right=(1, 2, 3)))
    return 0
