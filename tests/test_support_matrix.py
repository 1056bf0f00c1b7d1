"""docs/support-matrix.md is what the registries say now."""

from pathlib import Path

from litegpu.tools.support_matrix import render_support_matrix


def test_support_matrix_is_up_to_date():
    doc = Path(__file__).resolve().parents[1] / "docs" / "support-matrix.md"
    assert doc.read_text() == render_support_matrix(), \
        "regenerate: python -m litegpu.tools.support_matrix > docs/support-matrix.md"


def test_matrix_lists_the_ops_the_models_need():
    text = render_support_matrix()
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "Convolution2DTransposeBias", "WHILE", "UNIDIRECTIONAL_SEQUENCE_LSTM"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {op} |"))
        assert "float32" in row or "*" in row
