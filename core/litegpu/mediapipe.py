"""Post-processing of the MediaPipe detectors and segmenters bundled by :mod:`litegpu.models`.

A MediaPipe detector (BlazeFace, BlazePalm, BlazePose detector) outputs raw SSD regressors
``[1, N, C]`` and scores ``[1, N, 1]``, one row per anchor; MediaPipe's graphs turn them into
detections with three calculators, reproduced here from their documented behaviour:

* ``SsdAnchorsCalculator``: anchors on a feature map per stride (``ceil(input / stride)``
  cells), layers of equal stride merged, one anchor per aspect ratio plus an interpolated
  one, centres at ``(cell + 0.5) / feature map size``; with ``fixed_anchor_size`` every
  anchor is 1x1 (the regressors carry the size).
* ``TensorsToDetectionsCalculator``: box ``x = dx / scale * anchor_w + anchor_x`` (same for
  y), ``w = dw / scale * anchor_w``; keypoints like the centre; score
  ``sigmoid(clip(raw, -100, 100))`` kept above a threshold.
* ``NonMaxSuppressionCalculator`` with the WEIGHTED algorithm: take the best remaining
  detection, gather every remaining one overlapping it (IoU above a threshold), replace the
  best by the score-weighted mean of their boxes and keypoints, drop them all, repeat.

The options of each model (:data:`DETECTORS`) are those of its MediaPipe 0.10.14 graph.
Images are letterboxed (aspect kept, padded) to the input size as MediaPipe's
``ImageToTensorCalculator`` does with ``FIT``; :meth:`Letterbox.to_image` maps results back.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

__all__ = ["SsdSpec", "Detection", "Letterbox", "DETECTORS", "SEGMENTERS", "detector_for", "segmenter_for",
           "ssd_anchors", "decode", "weighted_nms", "letterbox", "detect", "draw_detections", "draw_mask"]


@dataclass(frozen=True)
class SsdSpec:
    """Anchor, decoding and suppression options of one MediaPipe SSD detector."""

    name: str
    input_size: tuple[int, int]  # (height, width)
    input_range: tuple[float, float]  # pixel 0 -> lo, 255 -> hi
    strides: tuple[int, ...]
    num_coords: int
    num_keypoints: int
    min_scale: float = 0.1484375
    max_scale: float = 0.75
    aspect_ratios: tuple[float, ...] = (1.0,)
    interpolated_scale_aspect_ratio: float = 1.0
    anchor_offset: float = 0.5
    score_clip: float = 100.0
    min_score: float = 0.5
    nms_threshold: float = 0.3
    keypoint_names: tuple[str, ...] = ()

    @property
    def num_anchors(self) -> int:
        return len(ssd_anchors(self))


_FACE_KP = ("right eye", "left eye", "nose tip", "mouth", "right ear tragion", "left ear tragion")
_PALM_KP = ("wrist", "index mcp", "middle mcp", "ring mcp", "pinky mcp", "thumb cmc", "thumb mcp")
_POSE_KP = ("hips centre", "full-body circle", "shoulders centre", "upper-body circle")

#: The detectors among the bundled MediaPipe 0.10.14 models, by model name.
DETECTORS: dict[str, SsdSpec] = {
    s.name: s for s in (
        SsdSpec("face_detection_short_range", (128, 128), (-1.0, 1.0), (8, 16, 16, 16), 16, 6,
                keypoint_names=_FACE_KP),
        SsdSpec("face_detection_full_range_sparse", (192, 192), (-1.0, 1.0), (4,), 16, 6,
                interpolated_scale_aspect_ratio=0.0, min_score=0.6, keypoint_names=_FACE_KP),
        SsdSpec("palm_detection_full", (192, 192), (0.0, 1.0), (8, 16, 16, 16), 18, 7, keypoint_names=_PALM_KP),
        SsdSpec("palm_detection_lite", (192, 192), (0.0, 1.0), (8, 16, 16, 16), 18, 7, keypoint_names=_PALM_KP),
        SsdSpec("pose_detection", (224, 224), (-1.0, 1.0), (8, 16, 32, 32, 32), 12, 4, keypoint_names=_POSE_KP),
    )
}

#: Segmenters: model name -> input pixel range (the output is a [0, 1] foreground mask).
SEGMENTERS: dict[str, tuple[float, float]] = {
    "selfie_segmentation": (0.0, 1.0),
    "selfie_segmentation_landscape": (0.0, 1.0),
}


def _stem(model: str | os.PathLike[str]) -> str:
    return Path(os.fspath(model)).name.removesuffix(".tflite")


def detector_for(model: str | os.PathLike[str]) -> SsdSpec | None:
    """The spec of a bundled detector, by model name or path (its file name); None otherwise."""
    return DETECTORS.get(_stem(model))


def segmenter_for(model: str | os.PathLike[str]) -> tuple[float, float] | None:
    """The input range of a bundled segmenter, by model name or path; None otherwise."""
    return SEGMENTERS.get(_stem(model))


# --------------------------------------------------------------------------- anchors


def _scale(spec: SsdSpec, i: int) -> float:
    n = len(spec.strides)
    return (spec.min_scale + spec.max_scale) / 2 if n == 1 else \
        spec.min_scale + (spec.max_scale - spec.min_scale) * i / (n - 1.0)


_ANCHORS: dict[SsdSpec, np.ndarray] = {}


def ssd_anchors(spec: SsdSpec) -> np.ndarray:
    """Anchor centres ``[N, 2]`` as ``(x, y)`` in [0, 1], in the order of the model's rows.

    Every bundled detector uses fixed-size (1x1) anchors, so only the centres and the number
    of anchors per cell matter: one per aspect ratio, plus one when
    ``interpolated_scale_aspect_ratio > 0``, summed over the layers sharing a stride.
    """
    if spec in _ANCHORS:
        return _ANCHORS[spec]
    h, w = spec.input_size
    out = []
    i = 0
    while i < len(spec.strides):
        j = i
        per_cell = 0
        while j < len(spec.strides) and spec.strides[j] == spec.strides[i]:
            per_cell += len(spec.aspect_ratios) + (1 if spec.interpolated_scale_aspect_ratio > 0 else 0)
            j += 1
        fh, fw = math.ceil(h / spec.strides[i]), math.ceil(w / spec.strides[i])
        ys, xs = np.meshgrid((np.arange(fh) + spec.anchor_offset) / fh, (np.arange(fw) + spec.anchor_offset) / fw,
                             indexing="ij")
        centres = np.stack([xs.ravel(), ys.ravel()], axis=1)
        out.append(np.repeat(centres, per_cell, axis=0))
        i = j
    anchors = np.concatenate(out).astype(np.float64)
    _ANCHORS[spec] = anchors
    return anchors


# --------------------------------------------------------------------------- decoding


@dataclass
class Detection:
    """One detection: ``box`` (xmin, ymin, xmax, ymax) and ``keypoints`` [K, 2] (x, y), normalised
    to the image they are expressed in; ``score`` in [0, 1]."""

    box: tuple[float, float, float, float]
    score: float
    keypoints: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    label: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"box_xyxy": [round(float(v), 6) for v in self.box], "score": round(float(self.score), 6),
                "keypoints": np.round(self.keypoints, 6).tolist(), "label": self.label}


def decode(spec: SsdSpec, regressors: np.ndarray, scores: np.ndarray) -> list[Detection]:
    """Raw outputs -> detections above ``spec.min_score``, before suppression, in input coordinates."""
    anchors = ssd_anchors(spec)
    raw = np.asarray(regressors, np.float64).reshape(-1, spec.num_coords)
    logits = np.asarray(scores, np.float64).reshape(-1)
    if len(raw) != len(anchors) or len(logits) != len(anchors):
        raise ValueError(f"{spec.name}: expected {len(anchors)} anchors x {spec.num_coords} values and "
                         f"{len(anchors)} scores, got regressors {np.shape(regressors)} and scores {np.shape(scores)}")
    prob = 1.0 / (1.0 + np.exp(-np.clip(logits, -spec.score_clip, spec.score_clip)))
    keep = np.nonzero(prob >= spec.min_score)[0]
    h, w = spec.input_size
    dets = []
    for k in keep:
        ax, ay = anchors[k]
        cx, cy = raw[k, 0] / w + ax, raw[k, 1] / h + ay
        bw, bh = raw[k, 2] / w, raw[k, 3] / h
        kp = raw[k, 4:4 + 2 * spec.num_keypoints].reshape(-1, 2) / (w, h) + (ax, ay)
        dets.append(Detection((cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), float(prob[k]), kp))
    return dets


def _iou(a: tuple[float, ...], b: np.ndarray) -> np.ndarray:
    ix = np.clip(np.minimum(a[2], b[:, 2]) - np.maximum(a[0], b[:, 0]), 0, None)
    iy = np.clip(np.minimum(a[3], b[:, 3]) - np.maximum(a[1], b[:, 1]), 0, None)
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def weighted_nms(dets: list[Detection], threshold: float) -> list[Detection]:
    """MediaPipe's WEIGHTED non-max suppression (IoU overlap), best first."""
    remaining = sorted(dets, key=lambda d: -d.score)
    out = []
    while remaining:
        boxes = np.array([d.box for d in remaining])
        overlap = _iou(remaining[0].box, boxes) > threshold
        overlap[0] = True
        group = [d for d, o in zip(remaining, overlap, strict=True) if o]
        if len(group) == 1:  # nothing to merge: kept exactly as decoded
            out.append(remaining[0])
            remaining = remaining[1:]
            continue
        weights = np.array([d.score for d in group])
        box = tuple(float(v) for v in (np.array([d.box for d in group]) * weights[:, None]).sum(0) / weights.sum())
        kp = (np.stack([d.keypoints for d in group]) * weights[:, None, None]).sum(0) / weights.sum()
        out.append(replace(remaining[0], box=box, keypoints=kp))  # type: ignore[arg-type]
        remaining = [d for d, o in zip(remaining, overlap, strict=True) if not o]
    return out


# --------------------------------------------------------------------------- images


@dataclass(frozen=True)
class Letterbox:
    """Where the image sits inside the model input after :func:`letterbox` (fractions of the input)."""

    left: float
    top: float
    width: float
    height: float

    def to_image(self, det: Detection) -> Detection:
        """``det`` from model-input coordinates to coordinates of the original image."""
        x0, y0, x1, y1 = det.box
        sx, sy = 1.0 / self.width, 1.0 / self.height
        box = ((x0 - self.left) * sx, (y0 - self.top) * sy, (x1 - self.left) * sx, (y1 - self.top) * sy)
        kp = (det.keypoints - (self.left, self.top)) * (sx, sy)
        return replace(det, box=box, keypoints=kp)


def letterbox(img: np.ndarray, size: tuple[int, int], value_range: tuple[float, float]) -> tuple[np.ndarray, Letterbox]:
    """HxWx3 uint8 image -> ``[1, h, w, 3]`` float32 in ``value_range``, aspect kept, padded with
    the range's low end (black), and the placement for mapping results back."""
    from ._image import resize

    h, w = size
    ih, iw = img.shape[:2]
    s = min(h / ih, w / iw)
    nh, nw = max(1, round(ih * s)), max(1, round(iw * s))
    top, left = (h - nh) // 2, (w - nw) // 2
    lo, hi = value_range
    canvas = np.full((h, w, 3), lo, np.float32)
    canvas[top:top + nh, left:left + nw] = resize(img[:, :, :3], nh, nw).astype(np.float32) / 255.0 * (hi - lo) + lo
    return canvas[None], Letterbox(left / w, top / h, nw / w, nh / h)


def detect(spec: SsdSpec, outputs: list[np.ndarray], placement: Letterbox | None = None) -> list[Detection]:
    """Decode + weighted NMS on a detector's two outputs (regressors, scores in either order);
    with ``placement``, the detections are mapped back to the original image."""
    regs = [o for o in outputs if o.shape[-1] == spec.num_coords]
    scores = [o for o in outputs if o.shape[-1] == 1]
    if len(regs) != 1 or len(scores) != 1:
        raise ValueError(f"{spec.name}: expected one [1, N, {spec.num_coords}] and one [1, N, 1] output, got "
                         + ", ".join(str(tuple(o.shape)) for o in outputs))
    dets = weighted_nms(decode(spec, regs[0], scores[0]), spec.nms_threshold)
    return [placement.to_image(d) for d in dets] if placement is not None else dets


def _pil() -> object:
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise ImportError("drawing pictures needs Pillow: pip install 'litegpu[images]'") from None
    return Image, ImageDraw


def draw_detections(img: np.ndarray, dets: list[Detection], path: str | os.PathLike[str],
                    keypoint_names: tuple[str, ...] = ()) -> None:
    """Save ``img`` with each detection's box, score and keypoints drawn (coordinates normalised to it)."""
    Image, ImageDraw = _pil()  # type: ignore[misc]
    im = Image.fromarray(np.ascontiguousarray(img[:, :, :3]).astype(np.uint8))
    d = ImageDraw.Draw(im)
    W, H = im.size
    lw = max(2, round(min(W, H) / 150))
    for det in dets:
        x0, y0, x1, y1 = det.box
        d.rectangle([x0 * W, y0 * H, x1 * W, y1 * H], outline=(0, 255, 0), width=lw)
        d.text((x0 * W + lw, max(0, y0 * H - 12)), f"{det.score:.2f}", fill=(0, 255, 0))
        r = lw + 1
        for x, y in det.keypoints:
            d.ellipse([x * W - r, y * H - r, x * W + r, y * H + r], fill=(255, 0, 0))
    im.save(path)


def draw_mask(img: np.ndarray, mask: np.ndarray, path: str | os.PathLike[str]) -> None:
    """Save ``img`` with a segmentation mask (values in [0, 1], any size) tinted over it."""
    from ._image import resize

    Image, _ = _pil()  # type: ignore[misc]
    m = np.clip(np.asarray(mask, np.float32).reshape(mask.shape[-3], mask.shape[-2], 1), 0, 1)
    m = resize(m, img.shape[0], img.shape[1])
    tint = np.array([255, 0, 255], np.float32)
    out = img[:, :, :3].astype(np.float32) * (1 - 0.5 * m) + tint * 0.5 * m
    Image.fromarray(np.clip(out, 0, 255).astype(np.uint8)).save(path)
