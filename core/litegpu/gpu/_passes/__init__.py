"""The GPU compiler's graph passes: each a small function ``(GpuGraph) -> Report`` (lines for ``inspect``).

:data:`DEFAULT_PIPELINE` is the order :func:`run_passes` applies them in; each
keeps the graph's meaning (checked by ``tests/test_gpu_transforms.py`` with
the reference evaluator against LiteRT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .._graph import GpuGraph, Report
from .._lstm_integer import integer_sequence_lstm
from .channel_pad import fuse_channel_pad
from .expand_lstm import expand_lstm, expand_sequence_lstm
from .fc_as_conv import fc_as_conv
from .float_view import float_view
from .fold_affine import fold_affine
from .fold_constants import fold_constants
from .fuse import fuse_activations, fuse_elementwise, fuse_shared_residual
from .fuse_dw_pw import fuse_dw_pw
from .fuse_pw_dw import fuse_pw_dw
from .fuse_small_expand import fuse_small_expand
from .legalise import legalise_epilogues
from .merge_pad import merge_pad
from .mixed_precision import mixed_precision
from .normalise_bhwc import normalise_bhwc
from .pool_residual import fuse_pool_residual
from .remove_identities import remove_identities
from .reshape_concat import fuse_reshape_concat
from .resize_read import fuse_resize_input, fuse_resize_residual
from .sibling_heads import fuse_sibling_heads
from .squeeze_excite import fuse_squeeze_excite

__all__ = [
    "Pass",
    "DEFAULT_PIPELINE",
    "run_passes",
    "float_view",
    "fold_constants",
    "remove_identities",
    "normalise_bhwc",
    "expand_lstm",
    "expand_sequence_lstm",
    "integer_sequence_lstm",
    "merge_pad",
    "fc_as_conv",
    "fold_affine",
    "fuse_elementwise",
    "fuse_activations",
    "fuse_channel_pad",
    "fuse_dw_pw",
    "fuse_pw_dw",
    "fuse_small_expand",
    "fuse_squeeze_excite",
    "fuse_pool_residual",
    "fuse_resize_residual",
    "fuse_resize_input",
    "fuse_shared_residual",
    "fuse_reshape_concat",
    "fuse_sibling_heads",
    "legalise_epilogues",
    "prune",
    "mixed_precision",
]

Pass = Callable[[GpuGraph], Report]


def prune(g: GpuGraph) -> Report:
    """Drop nodes whose results nobody reads and tensors nobody references."""
    n_tensors = len(g.tensors)
    removed = g.prune()
    return [f"removed {removed} dead nodes and {n_tensors - len(g.tensors)} unreferenced tensors"]


DEFAULT_PIPELINE: tuple[Pass, ...] = (
    # before the float view: it reads the integer constants and the intermediates' quantization
    integer_sequence_lstm,
    float_view,
    fold_constants,
    remove_identities,
    normalise_bhwc,
    expand_lstm,
    expand_sequence_lstm,
    remove_identities,
    merge_pad,
    fc_as_conv,
    fold_affine,
    fuse_elementwise,
    fuse_activations,
    # again: an activation fused above can expose a residual ADD to its conv (conv -> PRELU -> ADD),
    # and the ADD fused then can take the activation after it (-> PRELU)
    fuse_elementwise,
    fuse_activations,
    # a zero channel PAD feeding a residual ADD (fused above or not) becomes part of the ADD's read
    fuse_channel_pad,
    # after the epilogue fusions: the depthwise carries its activation, the 1x1 conv its whole epilogue
    fuse_dw_pw,
    # a RESIZE_BILINEAR read only as a CONV_2D's input (decoder upsample -> 1x1 projection) is sampled in the
    # conv's input read; before fuse_squeeze_excite, so a gate MUL the resize read folds into that conv too
    fuse_resize_input,
    # after the epilogue fusions (the gate layers carry their activations; a MUL that took a residual ADD
    # keeps its launch) and after fuse_dw_pw (a 1x1 conv given an input scale no longer reads the MUL)
    fuse_squeeze_excite,
    # a MAX_POOL_2D read only as a residual (after the channel PAD merge: zext(max_pool(x))) is read
    # through the pool's window instead; after fuse_dw_pw so the fused kernel's residual takes it too
    fuse_pool_residual,
    # a RESIZE_BILINEAR read only as a conv residual (FPN top-down paths) is sampled in the residual read
    fuse_resize_residual,
    # a residual ADD/MUL of a conv result that another op reads too: the conv applies it and stores both
    fuse_shared_residual,
    # a 1x1 conv read only by a depthwise (or the fused depthwise -> 1x1) joins it where the cost model says it
    # pays; after every pass that changes a conv's reads or its residual's (in_scale, in_resize, pool, store_pre)
    fuse_pw_dw,
    # a RESHAPE read only by a CONCATENATION (detection heads) is read through inside the concat
    fuse_reshape_concat,
    # last of the fusions: the heads' activations are fused (each head keeps its own), and no later pass
    # looks for a FULLY_CONNECTED / CONV_2D the merged node replaced
    fuse_sibling_heads,
    # a 1x1 conv (the next block's expansion) reading a dw_pw_small result joins that launch where the cost model
    # says it pays; after fuse_pw_dw, which may have taken that conv into its own block's launch, and after
    # fuse_sibling_heads, whose merged head convs (one launch for several) are not this pass's
    fuse_small_expand,
    legalise_epilogues,
    prune,
    mixed_precision,
)


def run_passes(g: GpuGraph, passes: Sequence[Pass] = DEFAULT_PIPELINE, *, validate: bool = True
               ) -> dict[str, Report]:
    """Apply ``passes`` in order; returns ``{pass name: report}`` (repeated passes get ``#2``...).

    With ``validate`` the graph invariants are checked after every pass, so a
    broken pass is named at once.
    """
    reports: dict[str, Report] = {}
    for p in passes:
        name = p.__name__
        k = 2
        while name in reports:
            name = f"{p.__name__}#{k}"
            k += 1
        reports[name] = p(g)
        if validate:
            g.validate()
    return reports
