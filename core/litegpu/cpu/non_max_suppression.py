"""NON_MAX_SUPPRESSION_V4 (hard) and NON_MAX_SUPPRESSION_V5 (soft, Gaussian) with LiteRT's exact
selection order.

LiteRT keeps the candidates above the score threshold in a ``std::priority_queue`` ordered by
score and pops the best one; a popped candidate is compared (IoU, float32) only with the boxes
selected since it was last looked at, and under soft NMS its score decays by
``exp(-0.5 / sigma * iou^2)`` and it goes back into the queue.  Which of two equal scores comes
out first is decided by libstdc++'s binary-heap algorithms, so the queue here is that same heap
(``_push``/``_pop`` follow ``std::push_heap``/``std::pop_heap``): ties select the same boxes.
Outputs are padded with zeros to ``max_output_size``.
"""

from __future__ import annotations

import math

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel

__all__: list[str] = []

F32 = np.float32


def _sift_up(heap: list, hole: int, item) -> None:
    """libstdc++'s __push_heap: move ``item`` up from ``hole`` past parents of lower score."""
    parent = (hole - 1) // 2
    while hole > 0 and heap[parent][0] < item[0]:
        heap[hole] = heap[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap[hole] = item


def _push(heap: list, item) -> None:
    """std::push_heap on a max-heap by score (item: [score, index, suppress_begin])."""
    heap.append(item)
    _sift_up(heap, len(heap) - 1, item)


def _pop(heap: list):
    """std::pop_heap + pop_back: the top item (libstdc++'s __adjust_heap, then __push_heap)."""
    top = heap[0]
    last = heap.pop()
    n = len(heap)
    if n == 0:
        return top
    hole, child = 0, 0
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if heap[child][0] < heap[child - 1][0]:
            child -= 1
        heap[hole] = heap[child]
        hole = child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        heap[hole] = heap[child - 1]
        hole = child - 1
    _sift_up(heap, hole, last)
    return top


def _iou(b: np.ndarray, i: int, j: int) -> np.float32:
    yi0, yi1 = min(b[i, 0], b[i, 2]), max(b[i, 0], b[i, 2])
    xi0, xi1 = min(b[i, 1], b[i, 3]), max(b[i, 1], b[i, 3])
    yj0, yj1 = min(b[j, 0], b[j, 2]), max(b[j, 0], b[j, 2])
    xj0, xj1 = min(b[j, 1], b[j, 3]), max(b[j, 1], b[j, 3])
    area_i = F32((yi1 - yi0) * (xi1 - xi0))
    area_j = F32((yj1 - yj0) * (xj1 - xj0))
    if area_i <= 0 or area_j <= 0:
        return F32(0)
    inter = F32(max(F32(min(yi1, yj1) - max(yi0, yj0)), F32(0)) * max(F32(min(xi1, xj1) - max(xi0, xj0)), F32(0)))
    return F32(inter / F32(F32(area_i + area_j) - inter))


def _nms(boxes: np.ndarray, scores: np.ndarray, max_out: int, iou_t: np.float32, score_t: np.float32,
         sigma: np.float32) -> tuple[list[int], list[np.float32]]:
    heap: list = []
    for i in range(boxes.shape[0]):
        if scores[i] > score_t:
            _push(heap, [scores[i], i, 0])
    n_out = min(len(heap), max_out)
    sel: list[int] = []
    sel_scores: list[np.float32] = []
    scale = F32(-0.5 / float(sigma)) if sigma > 0 else F32(0)
    while len(sel) < n_out and heap:
        cand = _pop(heap)
        original = cand[0]
        hard = False
        for j in range(len(sel) - 1, cand[2] - 1, -1):
            iou = _iou(boxes, cand[1], sel[j])
            if iou >= iou_t:
                hard = True
                break
            if sigma > 0:
                cand[0] = F32(cand[0] * F32(math.exp(float(F32(F32(scale * iou) * iou)))))
            if cand[0] <= score_t:
                break
        cand[2] = len(sel)
        if not hard:
            if cand[0] == original:
                sel.append(cand[1])
                sel_scores.append(cand[0])
            if cand[0] > score_t:
                _push(heap, cand)
    return sel, sel_scores


def _prepare(ctx: NodeContext, soft: bool) -> Prepared:
    n_in = 6 if soft else 5
    if len(ctx.inputs) != n_in or any(t is None for t in ctx.inputs) or len(ctx.outputs) != (3 if soft else 2):
        raise ctx.fail(f"expects {n_in} inputs and {3 if soft else 2} outputs")
    boxes_t, scores_t, max_t = ctx.inputs[:3]
    if boxes_t.dtype != "float32" or scores_t.dtype != "float32" or max_t.dtype != "int32":
        raise ctx.fail("boxes and scores must be float32, max_output_size int32")
    static = None
    if max_t.data is not None:
        static = int(np.asarray(max_t.data).reshape(-1)[0])
        if static < 0:
            raise ctx.fail(f"max_output_size {static} is negative")

    def run(inputs):
        boxes, scores = inputs[0].astype(F32), inputs[1].astype(F32).reshape(-1)
        if boxes.ndim != 2 or boxes.shape[1] != 4 or scores.shape[0] != boxes.shape[0]:
            raise ctx.fail(f"boxes {boxes.shape} must be (N, 4) and scores (N,), got scores {inputs[1].shape}")
        max_out = int(np.asarray(inputs[2]).reshape(-1)[0])
        if max_out < 0:
            raise ctx.fail(f"max_output_size {max_out} is negative")
        iou_t = F32(np.asarray(inputs[3]).reshape(-1)[0])
        score_t = F32(np.asarray(inputs[4]).reshape(-1)[0])
        sigma = F32(np.asarray(inputs[5]).reshape(-1)[0]) if soft else F32(0)
        if sigma < 0:
            raise ctx.fail(f"soft NMS sigma {sigma} is negative")
        sel, sel_scores = _nms(boxes, scores, max_out, iou_t, score_t, sigma)
        idx = np.zeros(max_out, np.int32)
        idx[: len(sel)] = sel
        count = np.array(len(sel), np.int32)
        if not soft:
            return [idx, count]
        sc = np.zeros(max_out, F32)
        sc[: len(sel)] = sel_scores
        return [idx, sc, count]

    shapes = [(static,) if static is not None else None] * (2 if soft else 1) + [()]
    return Prepared(shapes, run)


@register_kernel("NON_MAX_SUPPRESSION_V4", dtypes=("float32",), versions=range(1, 2))
def non_max_suppression_v4(ctx: NodeContext) -> Prepared:
    return _prepare(ctx, soft=False)


@register_kernel("NON_MAX_SUPPRESSION_V5", dtypes=("float32",), versions=range(1, 2))
def non_max_suppression_v5(ctx: NodeContext) -> Prepared:
    return _prepare(ctx, soft=True)
