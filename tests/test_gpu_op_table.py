"""The GPU op table agrees with the kernel templates and with what the rest of the GPU path reads.

Every op the table lowers to the ``unary`` / ``binary`` kernel has its ``op_<OP>`` / ``bin_<OP>`` in
``common.lgk``, every unary helper in ``common.lgk`` is used by some op (no ``op_CEIL`` nobody
claims), the fusion sets name only ops the table lowers (no ``RELU_0_TO_1`` without a kernel), and
each entry's kernel is a registered template.
"""

from __future__ import annotations

import re

from litegpu.gpu import _capabilities, _kernel_specs, _reference, kernels, ops
from litegpu.gpu._graph import QDQ_OP
from litegpu.gpu._passes import fuse
from litegpu.gpu.kernels import list_kernels, template_text
from litegpu.gpu.ops import (
    ACT_OPS,
    ACTIVATIONS_FUSABLE,
    CHAIN_OPS,
    ELEMENTWISE_FUSABLE,
    OPS,
    PARAM_INPUTS,
    SUPPORTED_OPS,
)

COMMON = template_text("common.lgk")
UNARY_FNS = set(re.findall(r"^fn op_(\w+)\(", COMMON, re.M))
BINARY_FNS = set(re.findall(r"^fn bin_(\w+)\(", COMMON, re.M))
#: unary template ops that are not table ops: a copy, and GELU's tanh form (GELU with approximate=True)
TEMPLATE_ONLY_UNARY = {"NONE", "GELU_TANH"}


def test_every_table_kernel_is_a_template():
    kernels = set(list_kernels())
    for op, e in OPS.items():
        assert e.kernel is None or e.kernel in kernels, f"{op}: kernel {e.kernel!r} is not a template"
        assert (e.kernel is None) == (e.lower is None), f"{op}: a kernel without a lowering or the reverse"


def test_unary_and_binary_ops_have_their_template_functions():
    for op, e in OPS.items():
        if e.kernel == "unary" and op != QDQ_OP:
            assert op in UNARY_FNS, f"{op} lowers to the unary kernel but common.lgk has no op_{op}"
            assert op in _kernel_specs.UNARY_OPS
        if e.kernel == "binary":
            assert op in BINARY_FNS, f"{op} lowers to the binary kernel but common.lgk has no bin_{op}"


def test_every_unary_template_function_is_used():
    used = {op for op, e in OPS.items() if e.kernel == "unary"} | TEMPLATE_ONLY_UNARY
    assert UNARY_FNS <= used, f"common.lgk defines op_ functions no op uses: {sorted(UNARY_FNS - used)}"
    assert set(_kernel_specs.UNARY_OPS) <= used


def test_fusion_sets_name_only_lowered_ops():
    lowered = {op for op, e in OPS.items() if e.lower is not None}
    assert ACTIVATIONS_FUSABLE <= lowered and ELEMENTWISE_FUSABLE <= lowered
    assert ACT_OPS <= set(_kernel_specs.ACTIVATIONS) and CHAIN_OPS <= set(_kernel_specs.UNARY_OPS)
    # the passes and the epilogue matcher read the table's sets, not copies
    assert fuse.ACTIVATIONS_FUSABLE is ACTIVATIONS_FUSABLE and fuse.ELEMENTWISE_FUSABLE is ELEMENTWISE_FUSABLE
    assert _capabilities.ACTIVATIONS is ACT_OPS and _capabilities.CHAIN_OPS is CHAIN_OPS
    assert "RELU_0_TO_1" not in ACTIVATIONS_FUSABLE  # no op_RELU_0_TO_1 template: the CPU runs it


def test_every_entry_holds_its_numpy_reference():
    """Each entry carries its numpy meaning (``ref``), and the evaluator reads it from the entry: no
    second table keyed by op name to keep in step."""
    for op, e in OPS.items():
        assert e.ref is not None or op == "QUANTIZE", f"{op}: no reference function in its entry"
        assert callable(e.ref) or e.ref is None
    assert not hasattr(_reference, "UNARY") and not hasattr(_reference, "BINARY")


def test_supported_ops_and_params_come_from_the_table():
    assert SUPPORTED_OPS == {op for op, e in OPS.items() if e.claimed}
    assert PARAM_INPUTS["CONV_2D"] == {1: "weights", 2: "bias"} and "ADD" not in PARAM_INPUTS
    for op in ("SQUARE", "SIGN_BIT", QDQ_OP, "LSTM_CELL", "DW_PW_CONV_2D", "SQUEEZE_EXCITE_GATE"):  # made by passes only
        assert op in OPS and op not in SUPPORTED_OPS


def test_each_op_and_kernel_lives_in_one_family_module():
    """The table is the assembly of the family modules: every entry and every kernel spec comes from
    exactly one family, whose lowering and check are functions of that same module, and ``kernels``
    renders from the assembled specs (no second registry)."""
    families = {f.__name__.rsplit(".", 1)[1]: f for f in ops._FAMILIES}
    assert set(families) == {"conv", "matmul", "reduce", "elementwise", "movement", "resize", "lstm", "hybrid",
                             "squeeze_excite", "folded"}
    for op, e in OPS.items():
        (home,) = [name for name, f in families.items() if op in f.OPS]
        for fn in (e.lower, e.check):
            # a family's own function, or one every family shares (``ops/_entry.py``: ``check_4d``)
            assert fn is None or fn.__module__ in (families[home].__name__, "litegpu.gpu.ops._entry"), \
                f"{op}: {fn} not in ops/{home}.py"
        if e.kernel is not None and e.kernel in {s.name for f in families.values() for s in f.KERNELS}:
            owners = [name for name, f in families.items() if e.kernel in {s.name for s in f.KERNELS}]
            assert len(owners) == 1
    assert kernels.SPECS is ops.SPECS
    assert set(ops.SPECS) == {s.name for f in families.values() for s in f.KERNELS} | {
        s.name for s in _kernel_specs.LAYOUT_KERNELS}
