"""docs/support-matrix.md is what the registries say now, and litegpu's CPU covers every (op, version,
input dtype) LiteRT's CPU build registers, except those in tests/coverage/exceptions.yaml (each with
its reason).  Rendered in a fresh process, since other tests register kernels of their own in this one."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COVERAGE = ROOT / "tests" / "coverage"


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout


def _render() -> str:
    return _run("import sys; from litegpu.tools.support_matrix import main; "
                f"sys.exit(main([{str(COVERAGE / 'litert_cpu_ops.json')!r}]))")


def _gaps() -> dict[tuple[str, str], list[int]]:
    out = _run("import json; from litegpu.tools.support_matrix import cpu_gaps, load_litert; "
               f"g = cpu_gaps(load_litert({str(COVERAGE / 'litert_cpu_ops.json')!r})); "
               "print(json.dumps([[o, d, v] for (o, d), v in g.items()]))")
    return {(o, d): v for o, d, v in json.loads(out)}


def _exceptions() -> dict[tuple[str, str], str]:
    raw = yaml.safe_load((COVERAGE / "exceptions.yaml").read_text()) or {}
    out = {}
    for op, per_dtype in raw.items():
        for dtype, reason in per_dtype.items():
            assert isinstance(reason, str) and len(reason) > 10, f"{op} {dtype}: the exception needs its reason"
            out[(op, str(dtype))] = reason
    return out


def test_support_matrix_is_up_to_date():
    doc = ROOT / "docs" / "support-matrix.md"
    assert doc.read_text() == _render(), "regenerate: python -m litegpu.tools.support_matrix > docs/support-matrix.md"


def test_cpu_covers_what_litert_cpu_registers():
    gaps = _gaps()
    exceptions = _exceptions()
    unexplained = {k: v for k, v in gaps.items() if k not in exceptions and (k[0], "*") not in exceptions}
    assert not unexplained, (
        "litegpu's CPU lacks (op, dtype): versions that LiteRT's CPU registers; add kernels or a reasoned "
        f"entry to tests/coverage/exceptions.yaml: {unexplained}")
    stale = [k for k in exceptions if k not in gaps and not any(g[0] == k[0] for g in gaps)]
    assert not stale, f"exceptions.yaml lists (op, dtype) that are covered now; remove them: {stale}"


def test_matrix_lists_the_ops_the_models_need():
    text = _render()
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "Convolution2DTransposeBias", "WHILE", "UNIDIRECTIONAL_SEQUENCE_LSTM"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {op} |"))
        assert "float32" in row or "*" in row
