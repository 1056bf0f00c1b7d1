"""COCO-style detection mAP, written from the protocol's definition.

* IoU thresholds 0.50, 0.55, ..., 0.95; 101 recall points 0, 0.01, ..., 1; at most
  ``max_dets`` detections per image and category (highest scores); area range "all".
* Per image and category, detections are taken by decreasing score and each is
  matched to the not-yet-matched ground truth box with the highest IoU at or above
  the threshold.  Crowd boxes (``iscrowd``) are "ignore" regions: IoU with them is
  intersection over the *detection's* area, they may absorb several detections, and
  detections matched to them count neither as true nor as false positives.
* Per category, detections of all images are merged by score; precision is made
  monotone (the best precision at any higher recall) and read at the 101 recall
  points (0 past the highest recall reached); AP is their mean.  Categories without
  ground truth are left out; mAP is the mean over categories (and thresholds).

Boxes are ``[x, y, width, height]`` in pixels, as in COCO annotation files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["IOU_THRESHOLDS", "RECALL_POINTS", "Detection", "box_iou", "evaluate"]

IOU_THRESHOLDS = np.round(np.arange(0.5, 0.951, 0.05), 2)
RECALL_POINTS = np.round(np.linspace(0.0, 1.0, 101), 2)


@dataclass(frozen=True)
class Detection:
    image_id: Any
    category_id: Any
    bbox: tuple[float, float, float, float]  # x, y, w, h
    score: float


def box_iou(dets: np.ndarray, gts: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU matrix (len(dets) x len(gts)) of xywh boxes; crowd columns use the detection's area
    as the union."""
    if not len(dets) or not len(gts):
        return np.zeros((len(dets), len(gts)))
    d = np.asarray(dets, np.float64)[:, None, :]
    g = np.asarray(gts, np.float64)[None, :, :]
    iw = np.clip(np.minimum(d[..., 0] + d[..., 2], g[..., 0] + g[..., 2]) - np.maximum(d[..., 0], g[..., 0]), 0, None)
    ih = np.clip(np.minimum(d[..., 1] + d[..., 3], g[..., 1] + g[..., 3]) - np.maximum(d[..., 1], g[..., 1]), 0, None)
    inter = iw * ih
    da = d[..., 2] * d[..., 3]
    ga = g[..., 2] * g[..., 3]
    union = np.where(np.asarray(crowd, bool)[None, :], da, da + ga - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _match(ious: np.ndarray, crowd: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """Greedy matching at threshold ``t``: (matched, ignored) flags per detection, detections
    in decreasing score order, ground truths with non-crowd first."""
    nd, ng = ious.shape
    matched = np.zeros(nd, bool)
    ignored = np.zeros(nd, bool)
    taken = np.zeros(ng, bool)
    thr = min(t, 1 - 1e-10)
    for di in range(nd):
        best, m = thr, -1
        for gi in range(ng):
            if taken[gi] and not crowd[gi]:
                continue
            if m > -1 and not crowd[m] and crowd[gi]:
                break  # a real match beats any crowd region (crowd boxes are sorted last)
            if ious[di, gi] < best:
                continue
            best, m = ious[di, gi], gi
        if m >= 0:
            taken[m] = True
            matched[di] = True
            ignored[di] = bool(crowd[m])
    return matched, ignored


def _ap(scores: np.ndarray, tp: np.ndarray, ignored: np.ndarray, n_gt: int) -> float:
    order = np.argsort(-scores, kind="mergesort")
    hit = tp[order][~ignored[order]]  # detections on crowd regions count for nothing
    tps = np.cumsum(hit)
    fps = np.cumsum(~hit)
    if not len(tps):
        return 0.0
    recall = tps / n_gt
    precision = tps / np.maximum(tps + fps, np.finfo(np.float64).eps)
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # best precision at >= this recall
    idx = np.searchsorted(recall, RECALL_POINTS, side="left")
    q = np.where(idx < len(precision), precision[np.minimum(idx, len(precision) - 1)], 0.0)
    return float(q.mean())


def evaluate(images: Sequence[Any], annotations: Sequence[Mapping[str, Any]], detections: Sequence[Detection],
             *, max_dets: int = 100) -> dict[str, Any]:
    """mAP@[.5:.95], mAP@.5, mAP@.75 and per-category AP for ``detections`` against COCO
    ``annotations`` (dicts with image_id, category_id, bbox, iscrowd) on ``images`` (ids)."""
    image_set = set(images)
    gts: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for a in annotations:
        if a["image_id"] in image_set:
            gts.setdefault((a["image_id"], a["category_id"]), []).append(a)
    dts: dict[tuple[Any, Any], list[Detection]] = {}
    for d in detections:
        if d.image_id in image_set:
            dts.setdefault((d.image_id, d.category_id), []).append(d)
    categories = sorted({c for _, c in gts}, key=str)
    nt = len(IOU_THRESHOLDS)
    ap = np.full((nt, len(categories)), np.nan)
    for ci, cat in enumerate(categories):
        n_gt = 0
        per_t_scores: list[list[np.ndarray]] = [[] for _ in range(nt)]
        per_t_tp: list[list[np.ndarray]] = [[] for _ in range(nt)]
        per_t_ig: list[list[np.ndarray]] = [[] for _ in range(nt)]
        for img in images:
            g = gts.get((img, cat), [])
            crowd_all = np.array([bool(a.get("iscrowd", 0)) for a in g], bool)
            gorder = np.argsort(crowd_all, kind="stable")  # non-crowd first
            g = [g[i] for i in gorder]
            crowd = crowd_all[gorder]
            n_gt += int((~crowd).sum())
            d = sorted(dts.get((img, cat), []), key=lambda x: -x.score)[:max_dets]
            if not d:
                continue
            ious = box_iou(np.array([x.bbox for x in d]).reshape(-1, 4),
                           np.array([a["bbox"] for a in g], np.float64).reshape(-1, 4), crowd)
            scores = np.array([x.score for x in d], np.float64)
            for ti, t in enumerate(IOU_THRESHOLDS):
                m, ig = _match(ious, crowd, float(t))
                per_t_scores[ti].append(scores)
                per_t_tp[ti].append(m & ~ig)
                per_t_ig[ti].append(ig)
        if n_gt == 0:
            continue
        for ti in range(nt):
            if per_t_scores[ti]:
                ap[ti, ci] = _ap(np.concatenate(per_t_scores[ti]), np.concatenate(per_t_tp[ti]),
                                 np.concatenate(per_t_ig[ti]), n_gt)
            else:
                ap[ti, ci] = 0.0
    valid = ~np.isnan(ap[0]) if len(categories) else np.zeros(0, bool)

    def mean(a: np.ndarray) -> float | None:
        return float(a.mean()) if a.size else None

    i50 = int(np.argmin(np.abs(IOU_THRESHOLDS - 0.5)))
    i75 = int(np.argmin(np.abs(IOU_THRESHOLDS - 0.75)))
    return {
        "mAP": mean(ap[:, valid]),
        "mAP50": mean(ap[i50, valid]),
        "mAP75": mean(ap[i75, valid]),
        "per_category": {str(c): {"AP": float(ap[:, ci].mean()), "AP50": float(ap[i50, ci])}
                         for ci, c in enumerate(categories) if valid[ci]},
        "per_threshold": {f"{t:.2f}": mean(ap[ti, valid]) for ti, t in enumerate(IOU_THRESHOLDS)},
        "images": len(image_set),
        "ground_truth_boxes": sum(1 for a in annotations if a["image_id"] in image_set and not a.get("iscrowd")),
        "detections": sum(1 for d in detections if d.image_id in image_set),
    }
