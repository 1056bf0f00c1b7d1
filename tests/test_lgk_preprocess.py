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


_FRAGMENTS = """#fragment load(v, at, scale)
// a comment in the body goes, as every comment does
let {{v}}: real4 = src[{{at}}]{{' * ' + scale if scale else ''}};
#if HALF
let {{v}}_h: f16 = f16({{v}}.x);
#endif
#endfragment
#fragment lerp(a, b)
mix({{a}}, {{b}}, {{T}})
#endfragment"""


def test_a_fragment_expands_where_used_with_its_arguments():
    text = _FRAGMENTS + """
#for i in range(2)
{{load(f"x{i}", f"row + {i}", "g" if i else "")}}
#endfor
let y = {{lerp("x0", "x1")}} + 1.0;"""
    out = preprocess(text, {"HALF": False, "T": 0.25}).split("\n")
    assert len(out) == len(text.split("\n"))  # the definitions' lines stay blank: errors keep template lines
    assert out[:10] == [""] * 10
    assert out[11] == "let x0: real4 = src[row + 0]; let x1: real4 = src[row + 1] * g;"
    assert out[13] == "let y = mix(x0, x1, 0.25) + 1.0;"
    # the body's directives are evaluated per use, over the template variables
    out = preprocess(_FRAGMENTS + '\n{{load("v", 0, "")}}', {"HALF": True, "T": 0.5}).split("\n")
    assert out[-1] == "let v: real4 = src[0]; let v_h: f16 = f16(v.x);"


def test_a_fragment_sees_its_arguments_and_the_variables_where_it_is_defined():
    # a variable of the use site (the loop's i) is not the fragment's: what it needs is passed
    text = "#fragment f(a)\n{{a}} {{i}}\n#endfragment\n#for i in range(1)\n{{f(1)}}\n#endfor"
    with pytest.raises(KernelTemplateError, match=r"^t\.lgk:5: cannot evaluate 'f\(1\)': t\.lgk:2: cannot evaluate "
                                                   r"'i': name 'i' is not defined$"):
        preprocess(text, {}, name="t.lgk")
    # a template variable set before the use, where the fragment is defined, is seen
    assert preprocess("#fragment f()\n{{k}}\n#endfragment\n#set k = 7\n{{f()}}", {}).split("\n")[-1] == "7"
    # a fragment defined in a branch not taken is not defined
    with pytest.raises(KernelTemplateError, match="name 'f' is not defined"):
        preprocess("#if False\n#fragment f()\nx\n#endfragment\n#endif\n{{f()}}", {})


@pytest.mark.parametrize(("text", "message"), [
    ("#fragment f(a)\n{{a}}\n#endfragment\n{{f(1, 2)}}",
     r"^t\.lgk:4: cannot evaluate 'f\(1, 2\)': fragment f\(a\) takes 1 argument\(s\), not 2$"),
    ("#fragment f()\n{{f()}}\n#endfragment\n{{f()}}", r"^t\.lgk:4: cannot evaluate 'f\(\)': .*fragment f uses itself$"),
    ("x\n#fragment f(a, 1)\n#endfragment", r"^t\.lgk:2: bad #fragment: 'f\(a, 1\)' \(write '#fragment name\(param"),
    ("#fragment f(a, a)\n#endfragment", r"^t\.lgk:1: bad #fragment: 'f\(a, a\)'"),
    ("#fragment N()\n#endfragment", r"^t\.lgk:1: #fragment N: the name is taken"),
    ("#fragment f()\n#endfragment\n#fragment f()\n#endfragment", r"^t\.lgk:3: #fragment f: the name is taken"),
    ("#fragment f()\nx\n", r"^t\.lgk: missing #endfragment$"),
    ("x\n#endfragment", r"^t\.lgk:2: unexpected #endfragment$"),
])
def test_fragment_errors_name_the_template_line(text, message):
    with pytest.raises(KernelTemplateError, match=message):
        preprocess(text, {"N": 1}, name="t.lgk")
