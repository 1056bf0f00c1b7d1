"""The kernel language's preprocessor: what it expands, and that a template error names its line
(the location is built only when an error is raised; expressions are compiled once per process)."""

from __future__ import annotations

import pytest
from litegpu.gpu.lgk.preprocess import preprocess
from litegpu.gpu.lgk.types import KernelTemplateError


def test_expands_conditions_loops_sets_and_substitutions():
    text = "#set n = N * 2\n#if n > 4\nbig {{n}}\n#else\nsmall\n#endif\n#for i in range(2)\nx{{i}};\n#endfor"
    out = preprocess(text, {"N": 3}).split("\n")
    assert out[2] == "big 6" and out[4] == "" and out[7] == "x0; x1;"
    assert len(out) == len(text.split("\n"))  # removed lines stay blank: errors keep template lines
    # the same expression text over other values: each evaluation sees its own environment
    assert preprocess("{{N + 1}}", {"N": 1}) == "2" and preprocess("{{N + 1}}", {"N": 41}) == "42"


@pytest.mark.parametrize(("text", "line", "what"), [
    ("a\nb {{missing + 1}}\n", 2, "missing + 1"),
    ("a\n\n#if nope(\nx\n#endif\n", 3, "nope("),  # a syntax error, reported as a template error
    ("#for i in range(2)\n{{i}}\n#endfor\n#set y = 1 / 0\n", 4, "1 / 0"),
    ("#if True\n#elif oops\n#endif\n", None, None),  # a branch not taken is not evaluated
])
def test_errors_name_the_template_line(text, line, what):
    if line is None:
        preprocess(text, {}, name="t.lgk")
        return
    with pytest.raises(KernelTemplateError) as e:
        preprocess(text, {}, name="t.lgk")
    assert str(e.value).startswith(f"t.lgk:{line}: cannot evaluate {what!r}")


def test_a_callable_name_maps_lines_to_files():
    with pytest.raises(KernelTemplateError, match=r"^conv\.lgk:12: cannot evaluate"):
        preprocess("x\n{{nothing}}", {}, name=lambda n: f"conv.lgk:{n + 10}")
    with pytest.raises(KernelTemplateError, match=r"^t\.lgk:1: bad #for"):
        preprocess("#for 1 in x\n#endfor", {}, name="t.lgk")
    # an #error names its line too (the renderer passes a callable: its text, not the function's repr)
    with pytest.raises(KernelTemplateError, match=r"^conv\.lgk:12: k = 3 is refused$"):
        preprocess("x\n#error k = {{k}} is refused", {"k": 3}, name=lambda n: f"conv.lgk:{n + 10}")
