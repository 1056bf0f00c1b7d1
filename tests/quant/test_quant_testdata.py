"""LiteRT's own quantized test models run in litegpu exactly as in LiteRT's reference kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ._harness import compare

DATA = next((p for p in (Path(__file__).resolve().parents[2] / "../shared/models/litert-testdata",
                         Path("/work/shared/models/litert-testdata")) if p.is_dir()), None)

MODELS = [
    "core__add_quantized.bin",
    "core__add_quantized_int8.bin",
    "java__quantized.bin",
    "java__uint8.bin",
    "python__pc_conv.bin",
    "core__test_model_redux_precision.bin",
]


def _inputs(path: Path, seed: int) -> list[np.ndarray]:
    from ai_edge_litert import interpreter as litert

    it = litert.Interpreter(model_path=str(path))
    rng = np.random.default_rng(seed)
    out = []
    for d in it.get_input_details():
        shape, dt = tuple(int(s) for s in d["shape"]), np.dtype(d["dtype"])
        if dt.kind == "f":
            out.append(rng.uniform(0.0, 1.0, shape).astype(dt))  # image-like, inside the quantized range
        else:
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max + 1, shape).astype(dt))
    return out


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("seed", [0, 1])
def test_quantized_testdata(name, seed):
    if DATA is None or not (DATA / name).is_file():
        pytest.skip("LiteRT test data not available")
    from litegpu import UnsupportedOpError

    data = (DATA / name).read_bytes()
    try:
        compare(f"testdata {name}", data, _inputs(DATA / name, seed))
    except UnsupportedOpError as e:
        if "no CPU kernel" in str(e) or "has no CPU kernel" in str(e):
            pytest.xfail(f"float kernels not merged yet: {e}")
        raise
