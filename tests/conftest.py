"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mediapipe_models() -> dict[str, Path]:
    """``{name: path}`` of the 14 MediaPipe 0.10.14 models, fetched once into the user cache.

    Set ``LITEGPU_MEDIAPIPE_WHEEL`` to a local mediapipe wheel to skip the download.
    Skips (with the reason) when the models cannot be fetched, e.g. offline.
    """
    from litegpu.models import ModelFetchError, fetch_mediapipe

    try:
        return fetch_mediapipe()
    except ModelFetchError as e:
        pytest.skip(f"MediaPipe models unavailable: {e}")


def missing_kernels(model_path: str | Path, *, include_custom: bool = True) -> list[str]:
    """Ops of the model (all subgraphs) with no CPU kernel registered for their dtype and version."""
    import litegpu  # noqa: F401 - registers the CPU kernels
    from litegpu._reader import read_model
    from litegpu.cpu._registry import CPU_KERNELS

    try:
        model = read_model(str(model_path))
    except Exception:  # noqa: BLE001 - a model the reader refuses needs no kernels
        return []
    missing: list[str] = []
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.is_custom and not include_custom:
                continue
            ins = [sg.tensors[i] for i in op.inputs if i >= 0]
            dtype = ins[0].dtype if ins else (sg.tensors[op.outputs[0]].dtype if op.outputs else "float32")
            if CPU_KERNELS.lookup(op.name, dtype, op.version) is None and op.name not in missing:
                missing.append(op.name)
    return missing


@pytest.fixture
def require_kernels(request):
    """``check(model_path, include_custom=True)``: fail the running test, naming the ops, when the
    CPU registry lacks a kernel the model needs."""

    def check(model_path: str | Path, *, include_custom: bool = True) -> list[str]:
        missing = missing_kernels(model_path, include_custom=include_custom)
        if missing:  # every kernel these models need exists now: a missing one is a regression
            pytest.fail("no CPU kernel for " + ", ".join(missing))
        return missing

    return check


from _litegpu_backends import load_backend_delegate  # noqa: E402,F401 - re-exported for old imports
