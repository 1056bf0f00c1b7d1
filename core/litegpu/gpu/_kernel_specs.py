"""The kernel registry: which template file holds each kernel, its options and representative variants.

Only names and option domains live here; every op's arithmetic is in the templates (shaders/).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .lgk import KernelTemplateError

__all__ = ["Opt", "KernelSpec", "SPECS", "LSTM_INT8_GROUPS", "LSTM_INT8_CAPS", "UNARY_OPS", "BINARY_OPS", "ACTIVATIONS", "FUSED_ACTIVATIONS"]



def _common_functions(prefix: str) -> tuple[str, ...]:
    """The ``<NAME>`` of every ``fn <prefix><NAME>(`` in ``common.lgk``, in file order: the template
    defines which elementwise ops the ``unary``/``binary`` kernels take, so adding one is one
    function there (and an op table entry), not a list here too."""
    text = resources.files("litegpu.shaders").joinpath("common.lgk").read_text(encoding="utf-8")
    return tuple(re.findall(rf"^fn {prefix}(\w+)\(", text, re.M))


# Unary elementwise ops (op_<NAME> in shaders/common.lgk). NONE is a copy.
UNARY_OPS = _common_functions("op_")
# Binary elementwise ops (bin_<NAME> in shaders/common.lgk).
BINARY_OPS = _common_functions("bin_")
# Activations a kernel can fuse without extra inputs.
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC", "HARD_SWISH", "SIGN_BIT")
# ... plus PRELU, which binds a per-channel alpha buffer.
FUSED_ACTIVATIONS = ACTIVATIONS + ("PRELU",)


@dataclass(frozen=True)
class Opt:
    """A template option: its default and allowed values (``many``: a tuple of such values)."""

    default: Any
    choices: tuple[Any, ...] | None = None
    many: bool = False
    check: Callable[[Any], bool] | None = None

    def validate(self, kernel: str, name: str, value: Any) -> Any:
        if self.many:
            if isinstance(value, str) or not hasattr(value, "__iter__"):
                raise KernelTemplateError(f"{kernel}: option {name} takes a sequence")
            value = tuple(value)
            items = value
        else:
            items = (value,)
        for v in items:
            if self.choices is not None and v not in self.choices:
                raise KernelTemplateError(
                    f"{kernel}: option {name}={v!r} not one of {', '.join(map(repr, self.choices))}")
            if self.check is not None and not self.check(v):
                raise KernelTemplateError(f"{kernel}: option {name}={v!r} is out of range")
        return value


@dataclass(frozen=True)
class KernelSpec:
    name: str
    file: str
    entry: str
    doc: str
    options: Mapping[str, Opt] = field(default_factory=dict)
    variants: tuple[Mapping[str, Any], ...] = ({},)
    default_wg: tuple[int, int, int] = (8, 8, 1)
    shared_wg: Callable[[Mapping[str, Any]], tuple[int, int, int] | None] | None = None

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            raise KernelTemplateError(
                f"{self.name}: unknown option(s) {', '.join(unknown)} (has {', '.join(self.options) or 'none'})")
        out = {}
        for k, o in self.options.items():
            out[k] = o.validate(self.name, k, given[k]) if k in given else o.default
        return out

    def fixed_workgroup(self, opts: Mapping[str, Any]) -> tuple[int, int, int] | None:
        """The work-group size baked into the kernel (it uses shared memory), or None."""
        return self.shared_wg(opts) if self.shared_wg else None


def _bool() -> Opt:
    return Opt(False, (False, True))


def _spec(name: str, file: str, doc: str, options: Mapping[str, Opt] | None = None,
          variants: list[Mapping[str, Any]] | None = None, entry: str | None = None, **kw: Any) -> KernelSpec:
    return KernelSpec(name, file, entry or name, doc, dict(options or {}), tuple(variants or ({},)), **kw)


#: lstm_int8: threads per group, and the length of its four shared integer arrays (4 x 1024 x 4 bytes =
#: 16 KiB, WebGPU's default workgroup storage limit)
LSTM_INT8_GROUPS = (4, 8, 16, 32, 64, 128)
LSTM_INT8_CAPS = (16, 32, 64, 128, 256, 512, 1024)


# split > 1: a work group of `split` threads cooperates on one output (shared-memory tree reduction)
_SPLITS = (1, 4, 8, 16, 32, 64, 128)
_split = Opt(1, _SPLITS)


def _split_wg(opts: Mapping[str, Any]) -> tuple[int, int, int] | None:
    return (opts["split"], 1, 1) if opts.get("split", 1) > 1 else None


# reduce: its shared memory is one vec4 per thread, so its groups may reach the 1024 threads most GPUs take
_REDUCE_SPLITS = _SPLITS + (256, 512, 1024)
#: input_range's group sizes (what _quant._split_for picks)
_INPUT_RANGE_SPLITS = (4, 8, 16, 32, 64, 128, 256)


def _tiled_wg(opts: Mapping[str, Any]) -> tuple[int, int, int]:
    """conv2d_tiled's group: tile_p / 2 x tile_s / 2 threads (one 2 x 2 block each; tile_s = 1: 1 slice)."""
    return (opts["tile_p"] // 2 * max(1, opts["tile_s"] // 2), 1, 1)


_act = Opt("NONE", FUSED_ACTIVATIONS)
# qdq: snap the result to a quantized tensor's grid before storing (params Q_SCALE, Q_ZP, Q_MIN, Q_MAX;
# the float view of quantized models, docs/gpu-compiler.md)
_qdq = Opt(False, (False, True))
_act_no_prelu = Opt("NONE", ACTIVATIONS)
# residual_channels (conv2d) / rhs_channels (binary): "fewer" = that operand has fewer channels than the
# output and reads as zero past them (a zero channel PAD merged into the read, _passes/channel_pad.py)
_channels = Opt("same", ("same", "fewer"))

# dw_pw_conv2d: every dw_act and act value (paired), then residuals, splits and blocks mixed
_DW_PW_VARIANTS = (
    [{"dw_act": a, "act": FUSED_ACTIVATIONS[(i + 3) % len(FUSED_ACTIVATIONS)]}
     for i, a in enumerate(FUSED_ACTIVATIONS)]
    + [{"residual": "ADD", "residual_act": "RELU", "split": 4},
       {"residual": "ADD", "residual_act": "RELU6", "split": 8, "block_s": 2},
       {"residual": "MUL", "residual_act": "RELU_N1_TO_1", "split": 16, "block_w": 1},
       {"residual": "ADD", "residual_act": "TANH", "split": 32, "qdq": True},
       {"residual": "ADD", "residual_act": "LOGISTIC", "split": 64, "block_s": 2, "block_w": 1},
       {"residual": "ADD", "residual_act": "HARD_SWISH", "split": 128, "dw_act": "PRELU", "act": "PRELU"},
       {"residual": "ADD", "residual_act": "SIGN_BIT", "block_s": 2},
       {"dw_act": "PRELU", "act": "PRELU", "residual": "ADD", "residual_act": "PRELU", "block_s": 2},
       {"dw_act": "RELU6", "residual": "ADD", "residual_act": "PRELU", "split": 16, "block_s": 2, "qdq": True},
       {"residual": "ADD", "residual_channels": "fewer", "residual_act": "RELU", "block_s": 2},
       {"residual": "ADD", "residual_channels": "fewer", "residual_act": "PRELU", "split": 32, "block_w": 1},
       {"residual": "ADD", "residual_pool": True, "residual_act": "PRELU", "block_s": 2},
       {"residual": "ADD", "residual_channels": "fewer", "residual_pool": True, "residual_act": "RELU6",
        "split": 16, "block_w": 1}]
    + [{"ksize": 3}, {"ksize": 5, "split": 16, "block_s": 2, "dw_act": "RELU6"},
       {"ksize": 3, "block_w": 1, "residual": "ADD", "residual_act": "PRELU", "split": 8}]
)

SPECS: dict[str, KernelSpec] = {s.name: s for s in [
    _spec("bhwc_to_phwc4", "layout.lgk", "BHWC (dense, host order) -> PHWC4",
          {"host": Opt("f32", ("f32", "real"))}, [{"host": "f32"}, {"host": "real"}]),
    _spec("phwc4_to_bhwc", "layout.lgk", "PHWC4 -> BHWC (dense, host order)",
          {"host": Opt("f32", ("f32", "real"))}, [{"host": "f32"}, {"host": "real"}]),
    _spec("unary", "elementwise.lgk", "y = chain(op(x)); LEAKY_RELU uses param alpha",
          {"op": Opt("NONE", UNARY_OPS), "chain": Opt((), UNARY_OPS, many=True), "qdq": _qdq},
          [{"op": op} for op in UNARY_OPS] + [{"op": "EXP", "chain": ("RELU", "TANH")}, {"op": "NONE", "qdq": True},
                                              {"op": "LOGISTIC", "qdq": True}]),
    _spec("binary", "elementwise.lgk", "y = act(op(a, b)) with BHWC broadcasting; b may be a scalar param",
          {"op": Opt("ADD", BINARY_OPS), "act": _act_no_prelu, "rhs": Opt("tensor", ("tensor", "scalar")),
           "chain": Opt((), UNARY_OPS, many=True), "qdq": _qdq, "rhs_channels": _channels,
           "residual": Opt("NONE", ("NONE", "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM")),
           "residual_reverse": _bool()},
          [{"op": op} for op in BINARY_OPS]
          + [{"op": "ADD", "act": a} for a in ACTIVATIONS[1:]]
          + [{"op": "MUL", "rhs": "scalar"}, {"op": "SUB", "rhs": "scalar", "chain": ("ABS",)},
             {"op": "ADD", "act": "RELU", "qdq": True}, {"op": "MUL", "rhs": "scalar", "qdq": True},
             {"op": "ADD", "rhs_channels": "fewer"}, {"op": "ADD", "act": "RELU6", "rhs_channels": "fewer"},
             {"op": "MUL", "residual": "ADD"},
             {"op": "MUL", "rhs": "scalar", "act": "RELU", "residual": "SUB", "residual_reverse": True,
              "chain": ("TANH",)},
             {"op": "ADD", "rhs_channels": "fewer", "residual": "MAXIMUM", "qdq": True}]
          + [{"op": "SUB", "residual": r, "residual_reverse": True} for r in ("ADD", "DIV", "MINIMUM", "MUL")]),
    _spec("conv2d", "conv.lgk", "2-D convolution, groups, dilation, fused bias/activation/residual",
          {"act": _act, "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": _act,
           "block_w": Opt(2, (1, 2, 4)), "block_s": Opt(1, (1, 2)), "grouped": _bool(), "split": _split,
           "qdq": _qdq, "residual_channels": _channels, "residual_pool": _bool()},
          [{"act": a} for a in FUSED_ACTIVATIONS]
          + [{"residual": "ADD", "residual_act": "RELU"}, {"residual": "MUL", "act": "RELU6"},
             {"block_w": 1}, {"block_w": 4, "block_s": 2}, {"grouped": True}, {"grouped": True, "block_w": 4}]
          + [{"residual": "ADD", "residual_act": a} for a in ACTIVATIONS[2:]]
          + [{"act": "RELU6", "qdq": True}, {"residual": "ADD", "block_w": 4, "block_s": 2, "qdq": True}]
          + [{"split": 16}, {"split": 4, "act": "PRELU", "block_w": 4, "block_s": 2},
             {"split": 64, "residual": "ADD", "residual_act": "RELU", "block_w": 1},
             {"split": 32, "grouped": True, "qdq": True}, {"split": 8, "act": "RELU6", "block_s": 2},
             {"residual": "ADD", "residual_act": "PRELU"},
             {"act": "PRELU", "residual": "ADD", "residual_act": "PRELU", "split": 16, "block_s": 2}]
          + [{"residual": "ADD", "residual_channels": "fewer", "residual_act": "RELU"},
             {"residual": "ADD", "residual_channels": "fewer", "residual_act": "PRELU", "block_w": 4, "block_s": 2},
             {"residual": "ADD", "residual_channels": "fewer", "split": 128, "block_w": 1, "qdq": True},
             {"residual": "ADD", "residual_pool": True, "residual_act": "PRELU"},
             {"residual": "MUL", "residual_channels": "fewer", "residual_pool": True, "block_w": 4, "block_s": 2},
             {"residual": "ADD", "residual_channels": "fewer", "residual_pool": True, "split": 32, "qdq": True}],
          default_wg=(8, 4, 2), shared_wg=_split_wg),
    _spec("conv2d_tiled", "conv.lgk", "ungrouped 2-D convolution as a tiled matrix product (shared-memory staging)",
          {"act": _act, "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": _act,
           "tile_p": Opt(32, (16, 32, 64)), "tile_s": Opt(4, (1, 2, 4, 8)), "kc": Opt(4, (2, 4, 8)),
           "qdq": _qdq, "residual_channels": _channels},
          [{"act": a} for a in FUSED_ACTIVATIONS]
          + [{"tile_p": p, "tile_s": ts, "kc": kc} for p, ts, kc in
             ((16, 1, 2), (16, 2, 4), (64, 8, 8), (32, 8, 4), (64, 4, 2), (16, 8, 8))]
          + [{"residual": "ADD", "residual_act": "RELU"}, {"residual": "MUL", "act": "RELU6", "tile_s": 8},
             {"residual": "ADD", "residual_act": "PRELU", "act": "PRELU", "tile_p": 64},
             {"residual": "ADD", "residual_channels": "fewer", "residual_act": "RELU6", "tile_s": 2},
             {"act": "RELU", "qdq": True}, {"residual": "ADD", "qdq": True, "tile_p": 16, "tile_s": 1}]
          + [{"residual": "ADD", "residual_act": a} for a in FUSED_ACTIVATIONS[1:]],
          default_wg=(64, 1, 1), shared_wg=_tiled_wg),
    _spec("depthwise_conv2d", "conv.lgk", "depthwise convolution (any channel multiplier)",
          {"act": _act, "multiplier": Opt("one", ("one", "any")), "ksize": Opt(0, (0, 3, 5)), "qdq": _qdq,
           "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": _act, "residual_channels": _channels,
           "residual_pool": _bool()},
          [{"act": a} for a in FUSED_ACTIVATIONS] + [{"multiplier": "any"}, {"multiplier": "any", "act": "PRELU"},
                                                     {"act": "RELU", "qdq": True}, {"ksize": 3},
                                                     {"ksize": 5, "act": "RELU6"}, {"ksize": 3, "act": "PRELU", "qdq": True},
                                                     {"ksize": 3, "residual": "ADD", "residual_act": "RELU"},
                                                     {"act": "RELU", "residual": "ADD"},
                                                     {"residual": "MUL", "residual_act": "HARD_SWISH", "qdq": True},
                                                     {"act": "PRELU", "residual": "ADD", "residual_act": "PRELU",
                                                      "multiplier": "any"},
                                                     {"residual": "ADD", "residual_channels": "fewer",
                                                      "residual_act": "RELU6"},
                                                     {"residual": "ADD", "residual_pool": True,
                                                      "residual_channels": "fewer", "multiplier": "any"}]
          + [{"residual": "ADD", "residual_act": a} for a in ACTIVATIONS[1:]]),
    _spec("dw_pw_conv2d", "conv.lgk",
          "depthwise conv (multiplier 1, own activation) feeding a 1x1 conv, one launch; conv2d's epilogue",
          {"dw_act": _act, "act": _act, "residual": Opt("NONE", ("NONE", "ADD", "MUL")), "residual_act": _act,
           "block_w": Opt(2, (1, 2)), "block_s": Opt(1, (1, 2)), "split": _split, "qdq": _qdq,
           "residual_channels": _channels, "residual_pool": _bool(), "ksize": Opt(0, (0, 3, 5))},
          _DW_PW_VARIANTS, default_wg=(8, 4, 2), shared_wg=_split_wg),
    _spec("transpose_conv2d", "conv.lgk", "transposed convolution (+ MediaPipe Convolution2DTransposeBias)",
          {"act": _act, "qdq": _qdq}, [{"act": a} for a in FUSED_ACTIVATIONS] + [{"qdq": True}]),
    _spec("fully_connected", "matmul.lgk", "y[b, o] = act(sum_k x[b, k] w[o, k] + bias[o])",
          {"act": _act, "split": _split, "qdq": _qdq}, [{"act": a} for a in FUSED_ACTIVATIONS]
          + [{"split": n, "act": a} for n, a in zip(_SPLITS[1:], ("NONE", "RELU", "PRELU", "TANH", "RELU6", "NONE"), strict=True)]
          + [{"qdq": True}, {"split": 32, "qdq": True}],
          default_wg=(32, 2, 1), shared_wg=_split_wg),
    _spec("batch_matmul", "matmul.lgk", "batched matmul with broadcasting and adj_x/adj_y",
          {"adj_x": _bool(), "adj_y": _bool()},
          [{"adj_x": x, "adj_y": y} for x in (False, True) for y in (False, True)]),
    _spec("pool2d", "pool.lgk", "AVERAGE_POOL_2D / MAX_POOL_2D",
          {"op": Opt("AVG", ("AVG", "MAX")), "act": _act_no_prelu, "qdq": _qdq},
          [{"op": "AVG"}, {"op": "MAX"}] + [{"op": op, "act": a} for op, a in zip("AVG MAX".split() * 4, ACTIVATIONS[1:], strict=False)]
          + [{"op": "AVG", "qdq": True}]),
    _spec("reduce", "reduce.lgk", "SUM/MEAN/REDUCE_MAX/REDUCE_MIN/REDUCE_PROD over any BHWC axes",
          {"op": Opt("SUM", ("SUM", "MEAN", "MAX", "MIN", "PROD")), "split": Opt(1, _REDUCE_SPLITS),
           "unroll": Opt(1, (1, 2, 4)), "qdq": _qdq},
          [{"op": op} for op in ("SUM", "MEAN", "MAX", "MIN", "PROD")]
          + [{"split": n, "op": op} for n, op in zip(_SPLITS[1:], ("MEAN", "MAX", "SUM", "MIN", "MEAN", "PROD"), strict=True)]
          + [{"split": n, "op": op, "unroll": u} for n, op, u in
             ((256, "MEAN", 4), (512, "MAX", 2), (1024, "SUM", 4), (1, "MIN", 4), (64, "PROD", 2))]
          + [{"op": "MEAN", "qdq": True}, {"op": "MEAN", "split": 64, "qdq": True}],
          shared_wg=_split_wg),
    _spec("softmax", "reduce.lgk", "SOFTMAX / LOG_SOFTMAX over channels", {"log": _bool(), "qdq": _qdq},
          [{"log": False}, {"log": True}, {"qdq": True}]),
    _spec("concat", "copy.lgk", "CONCATENATION of n inputs along a BHWC axis",
          {"axis": Opt(3, (0, 1, 2, 3)), "n": Opt(2, tuple(range(1, 9)))},
          [{"axis": a, "n": 2} for a in range(3)] + [{"axis": 3, "n": k} for k in range(1, 9)] + [{"axis": 1, "n": 8}]),
    _spec("gather", "copy.lgk", "TRANSPOSE (up to 6-D) / RESHAPE as a gather-by-index copy"),
    _spec("slice", "copy.lgk", "SLICE / STRIDED_SLICE / SPLIT / SPLIT_V (a strided window)"),
    _spec("pad", "copy.lgk", "PAD / PADV2 / MIRROR_PAD",
          {"mode": Opt("CONSTANT", ("CONSTANT", "REFLECT", "SYMMETRIC"))},
          [{"mode": m} for m in ("CONSTANT", "REFLECT", "SYMMETRIC")]),
    _spec("depth_to_space", "copy.lgk", "DEPTH_TO_SPACE (DCR order)"),
    _spec("space_to_depth", "copy.lgk", "SPACE_TO_DEPTH"),
    _spec("resize", "resize.lgk", "RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR",
          {"mode": Opt("BILINEAR", ("BILINEAR", "NEAREST")), "qdq": _qdq},
          [{"mode": "BILINEAR"}, {"mode": "NEAREST"}, {"mode": "BILINEAR", "qdq": True}]),
    # dynamic-range ("hybrid") input quantization, simulated (_quant.py, _passes/float_view.py)
    _spec("input_range", "quant.lgk", "partial (min, max) of each batch, G groups of split threads a batch",
          {"split": Opt(256, _INPUT_RANGE_SPLITS)}, [{"split": n} for n in _INPUT_RANGE_SPLITS],
          shared_wg=_split_wg),
    _spec("dynamic_qdq", "quant.lgk", "a hybrid op's input as LiteRT's per-row int8 integers, and the row scales",
          {"per": Opt("batch", ("batch", "pixel")), "mode": Opt("asymmetric", ("asymmetric", "symmetric"))},
          [{"per": p, "mode": m} for p in ("batch", "pixel") for m in ("asymmetric", "symmetric")]),
    _spec("hybrid_rescale", "quant.lgk", "a hybrid op's integer sums times weight and row scales, LiteRT's order",
          {"per": Opt("batch", ("batch", "pixel")), "order": Opt("joint", ("joint", "split"))},
          [{"per": p, "order": o} for p in ("batch", "pixel") for o in ("joint", "split")]),
    _spec("lstm_cell", "lstm.lgk", "LSTM cell: gates (i, g, f, o) + previous state -> state, output; peephole",
          {"peephole": Opt(False, (False, True))}, [{}, {"peephole": True}], default_wg=(32, 2, 1)),
    # one group per batch row runs the whole sequence: the group is fixed by the template
    _spec("lstm_int8", "lstm.lgk", "full-integer (8x8_16) sequence LSTM, bit-exact: every step, one group per row",
          {"group": Opt(32, LSTM_INT8_GROUPS), "cap": Opt(64, LSTM_INT8_CAPS), "cifg": _bool(), "peephole": _bool(),
           "projection": _bool()},
          [{}, {"group": 4, "cap": 16}, {"group": 8, "cap": 32, "cifg": True}, {"group": 16, "cap": 128, "peephole": True},
           {"group": 64, "cap": 256, "cifg": True, "peephole": True}, {"group": 128, "cap": 512, "projection": True},
           {"group": 128, "cap": 1024, "cifg": True, "peephole": True, "projection": True}],
          shared_wg=lambda opts: (opts["group"], 1, 1)),
]}
