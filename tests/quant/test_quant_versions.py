"""The quantized kernels claim exactly the op versions LiteRT 2.3's builtin resolver accepts."""

from __future__ import annotations

import pytest
from litegpu.testing import ModelBuilder


def _litert_versions(op: str) -> list[int]:
    from ai_edge_litert import interpreter as litert

    ok = []
    for v in range(1, 20):
        b = ModelBuilder()
        x = b.input("x", (2,), "float32")
        y = b.tensor("y", (2,), "float32")
        b.op(op, [x], [y], version=v)
        b.output(y)
        try:  # op resolution happens when the interpreter is built, before kernels see tensors
            litert.Interpreter(model_content=b.build(), experimental_op_resolver_type=(
                litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
            ok.append(v)
        except (RuntimeError, ValueError):
            pass
    return ok


def _mine() -> dict[str, set[int]]:
    from litegpu.cpu._registry import CPU_KERNELS

    out: dict[str, set[int]] = {}
    for op, regs in CPU_KERNELS.builtin_entries().items():
        for module, _dtypes, versions in regs:
            if module.startswith("litegpu.cpu.quantized"):
                out.setdefault(op, set()).update(versions)
    return out


MINE = _mine()


@pytest.mark.parametrize("op", sorted(MINE))
def test_versions_match_litert(op):
    assert sorted(MINE[op]) == _litert_versions(op)
