"""Draw a model's main subgraph as an SVG file: a simple layered layout, nodes coloured by backend.

Layout: each operator sits one layer below the deepest of its producers (graph inputs
are layer 0, graph outputs one layer below the last operator); an edge that spans
several layers gets a narrow virtual node in each layer it crosses; within a layer
the nodes are ordered by a few barycentre sweeps (the mean position of their
neighbours in the layer above, then below) to cut edge crossings.  Edges are cubic
curves between layers, straight lines through virtual nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

__all__ = ["graph_svg", "BACKEND_COLOURS"]

BACKEND_COLOURS = {"cpu": "#c9ced6", "folded": "#f1f1f1", "opencl": "#7fb3e8", "vulkan": "#e89c7f", "webgpu": "#9ad08a",
                   "example": "#e6d36c"}
_EXTRA = ("#c59be0", "#f0a8c8", "#8fd6d0", "#d8b48a", "#b0b86a")
_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _MARGIN, _VIRTUAL_W = 150, 34, 24, 46, 20, 8


@dataclass
class _Node:
    key: str
    label: str
    sub: str
    kind: str  # op | input | output | virtual (a long edge crossing a layer)
    backend: str = "cpu"
    title: str = ""
    flagged: bool = False
    layer: int = 0
    pos: float = 0.0
    preds: list[str] = field(default_factory=list)
    succs: list[str] = field(default_factory=list)


def colour(backend: str, extra: dict[str, str]) -> str:
    if backend in BACKEND_COLOURS:
        return BACKEND_COLOURS[backend]
    if backend not in extra:
        extra[backend] = _EXTRA[len(extra) % len(_EXTRA)]
    return extra[backend]


def _short(text: str, n: int = 21) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def graph_svg(model: Any, backend_of: Mapping[int, str],
              reasons: Mapping[int, tuple[str, bool]] | None = None, title: str = "") -> str:
    """SVG text of ``model``'s main subgraph; ``backend_of[node] -> backend name``;
    ``reasons[node] = (why it is on the CPU, declined by the delegate?)``: the reason is the
    node's tooltip, and declined nodes get a red outline."""
    reasons = reasons or {}
    sg = model.subgraphs[0]
    nodes: dict[str, _Node] = {}
    producer: dict[int, str] = {}
    for i in sg.inputs:
        t = sg.tensors[i]
        k = f"in{i}"
        nodes[k] = _Node(k, _short(t.name or f"input {i}"), "x".join(map(str, t.shape)) + f" {t.dtype}", "input",
                         backend="io", title=f"input tensor {i} {t.name} {list(t.shape)} {t.dtype}")
        producer[i] = k
    for op in sg.operators:
        k = f"op{op.index}"
        b = backend_of.get(op.index, "cpu")
        why, declined = reasons.get(op.index, ("", False))
        tip = f"{op.label} on {b}" + (f"\n{why}" if why else "")
        nodes[k] = _Node(k, _short(op.name), f"#{op.index}", "op", backend=b, title=tip, flagged=declined)
        for i in op.inputs:
            if i >= 0 and i in producer and producer[i] != k:
                nodes[k].preds.append(producer[i])
        for o in op.outputs:
            producer[o] = k
    for i in sg.outputs:
        t = sg.tensors[i]
        k = f"out{i}"
        nodes[k] = _Node(k, _short(t.name or f"output {i}"), "x".join(map(str, t.shape)) + f" {t.dtype}", "output",
                         backend="io", title=f"output tensor {i} {t.name} {list(t.shape)} {t.dtype}")
        if i in producer:
            nodes[k].preds.append(producer[i])
    for n in nodes.values():
        n.preds = list(dict.fromkeys(n.preds))
        for p in n.preds:
            nodes[p].succs.append(n.key)

    # ---- layers (operators are stored in execution order: producers come first)
    last = 0
    for n in nodes.values():
        if n.kind == "op":
            n.layer = 1 + max((nodes[p].layer for p in n.preds), default=0)
            last = max(last, n.layer)
    for n in nodes.values():
        if n.kind == "output":
            n.layer = last + 1
    # Then pull every operator down to just above its first consumer (in reverse order, so a
    # chain moves together): constant-only nodes (DEQUANTIZE of weights...) then sit next to
    # the node they feed instead of all crowding into the first layer.
    for n in reversed([n for n in nodes.values() if n.kind == "op"]):
        if n.succs:
            n.layer = max(n.layer, min(nodes[s].layer for s in n.succs) - 1)
    # ---- long edges get a chain of narrow virtual nodes, one per layer crossed, so they are
    # ordered (and drawn) like everything else instead of cutting through the nodes between.
    chains: list[list[str]] = []  # each edge as the keys it passes: source, virtual..., target
    order_preds: dict[str, list[str]] = {k: [] for k in nodes}
    order_succs: dict[str, list[str]] = {k: [] for k in nodes}
    for n in list(nodes.values()):
        for p in n.preds:
            src = nodes[p]
            keys = [p]
            for lay in range(src.layer + 1, n.layer):
                vk = f"v{len(nodes)}"
                nodes[vk] = _Node(vk, "", "", "virtual", layer=lay)
                order_preds[vk], order_succs[vk] = [], []
                keys.append(vk)
            keys.append(n.key)
            for a, b in zip(keys, keys[1:], strict=False):
                order_succs[a].append(b)
                order_preds[b].append(a)
            chains.append(keys)
    layers: dict[int, list[_Node]] = {}
    for n in nodes.values():
        layers.setdefault(n.layer, []).append(n)
    order = sorted(layers)
    for lay in order:
        for k, n in enumerate(layers[lay]):
            n.pos = k
    bary: dict[str, float] = {}
    for _ in range(4):  # barycentre sweeps, down then up
        for seq, nbrs in ((order[1:], order_preds), (order[-2::-1], order_succs)):
            for lay in seq:
                row = layers[lay]
                for n in row:
                    nb = nbrs[n.key]
                    bary[n.key] = sum(nodes[p].pos for p in nb) / len(nb) if nb else n.pos
                row.sort(key=lambda n: bary[n.key])
                for k, n in enumerate(row):
                    n.pos = k

    def w_of(n: _Node) -> float:
        return _VIRTUAL_W if n.kind == "virtual" else _NODE_W

    def row_width(row: list[_Node]) -> float:
        return sum(w_of(n) for n in row) + (len(row) - 1) * _GAP_X

    legend_h = 30
    top = _MARGIN + (24 if title else 0) + legend_h
    width = 2 * _MARGIN + max((row_width(r) for r in layers.values()), default=_NODE_W)
    width = max(width, 2 * _MARGIN + 320)  # room for the title and legend
    height = top + len(order) * (_NODE_H + _GAP_Y) + _MARGIN
    xy: dict[str, tuple[float, float]] = {}
    for li, lay in enumerate(order):
        row = layers[lay]
        x = (width - row_width(row)) / 2
        for n in row:
            xy[n.key] = (x, top + li * (_NODE_H + _GAP_Y))
            x += w_of(n) + _GAP_X

    extra: dict[str, str] = {}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif">',
             '<rect width="100%" height="100%" fill="white"/>']
    if title:
        parts.append(f'<text x="{_MARGIN}" y="{_MARGIN + 12}" font-size="14" font-weight="bold">'
                     f'{escape(title)}</text>')
    # legend
    used = sorted({n.backend for n in nodes.values() if n.kind == "op"},
                  key=lambda b: (b != "cpu", b == "folded", b))
    lx, ly = _MARGIN, top - legend_h + 4
    parts.append('<g class="legend">')
    for b in used:
        parts.append(f'<rect x="{lx}" y="{ly}" width="14" height="14" rx="3" fill="{colour(b, extra)}" '
                     'stroke="#444"/>')
        parts.append(f'<text x="{lx + 19}" y="{ly + 12}" font-size="12">{escape(b)}</text>')
        lx += 30 + 8 * len(b)
    if any(n.flagged for n in nodes.values()):
        parts.append(f'<rect x="{lx}" y="{ly}" width="14" height="14" rx="3" fill="white" stroke="#d62728" '
                     'stroke-width="2"/>')
        parts.append(f'<text x="{lx + 19}" y="{ly + 12}" font-size="12">declined by the delegate</text>')
    parts.append("</g>")
    # edges first, under the nodes: curves between layers, straight through virtual nodes
    parts.append('<g class="edges" fill="none" stroke="#777" stroke-width="1.2">')
    for keys in chains:
        pts = []
        for k in keys:
            n = nodes[k]
            x, y = xy[k]
            cx = x + w_of(n) / 2
            pts.append((cx, y, y + _NODE_H))  # centre x, top y, bottom y
        d = f"M{pts[0][0]:.1f},{pts[0][2]:.1f}"
        for j in range(1, len(pts)):
            ax, ay = pts[j - 1][0], pts[j - 1][2]
            bx, by = pts[j][0], pts[j][1]
            dy = (by - ay) / 2
            d += f" C{ax:.1f},{ay + dy:.1f} {bx:.1f},{by - dy:.1f} {bx:.1f},{by:.1f}"
            if j < len(pts) - 1:  # through the virtual node
                d += f" L{bx:.1f},{pts[j][2]:.1f}"
        parts.append(f'<path d="{d}"/>')
    parts.append("</g>")
    parts.append('<g class="nodes">')
    for n in nodes.values():
        if n.kind == "virtual":
            continue
        x, y = xy[n.key]
        cls = f'node {n.kind} backend-{n.backend}'
        parts.append(f'<g class="{escape(cls)}" data-backend="{escape(n.backend)}" data-key="{n.key}">')
        parts.append(f"<title>{escape(n.title)}</title>")
        if n.kind == "op":
            stroke = 'stroke="#d62728" stroke-width="2"' if n.flagged else 'stroke="#333"'
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{_NODE_W}" height="{_NODE_H}" rx="5" '
                         f'fill="{colour(n.backend, extra)}" {stroke}/>')
        else:
            parts.append(f'<ellipse cx="{x + _NODE_W / 2:.1f}" cy="{y + _NODE_H / 2:.1f}" rx="{_NODE_W / 2}" '
                         f'ry="{_NODE_H / 2}" fill="#f7f7f7" stroke="#333"/>')
        parts.append(f'<text x="{x + _NODE_W / 2:.1f}" y="{y + 14:.1f}" font-size="12" text-anchor="middle">'
                     f"{escape(n.label)}</text>")
        parts.append(f'<text x="{x + _NODE_W / 2:.1f}" y="{y + 27:.1f}" font-size="10" fill="#333" '
                     f'text-anchor="middle">{escape(_short(n.sub, 26))}</text>')
        parts.append("</g>")
    parts.append("</g></svg>")
    return "\n".join(parts) + "\n"


def backend_map(plan: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    return {n: seg["backend"] for seg in plan for n in seg["node_indices"]}
