"""Shared pytest fixtures, and litegpu's pytest plugin (the ``litegpu_backend`` fixture), which is opt-in."""

from __future__ import annotations

import os
from importlib.metadata import distributions
from pathlib import Path

import pytest

# litegpu's pytest plugin is opt-in (installing litegpu registers nothing with pytest).  An install
# made before it became opt-in still registers it through a pytest11 entry point: loading it a
# second time under its module name would make pytest refuse to start.
_PLUGIN = "litegpu.testing.pytest_plugin"
# Every distribution on the path, as pytest scans them (entry_points() would keep only the first
# litegpu found, e.g. a source tree's egg-info shadowing the installed one).
_REGISTERED = any(ep.group == "pytest11" and ep.value == _PLUGIN for d in distributions() for ep in d.entry_points)
pytest_plugins = [] if _REGISTERED else [_PLUGIN]

# A delegate failing at prepare or invoke falls back to the CPU by default (issue 19); in the test
# suite it must fail loudly, or a GPU kernel bug would pass as the CPU's correct answer.  Tests of the
# fallback itself ask for it explicitly.
os.environ.setdefault("LITEGPU_ON_DEVICE_ERROR", "raise")
# Compiled delegates go to a fresh folder per run (inherited by subprocesses and Ray workers): what a
# developer's ~/.cache holds, or a test that patched the compiler stored, must not change what
# another test sees.  An explicit LITEGPU_CACHE_DIR is kept (e.g. to reuse compiles between runs).
if not os.environ.get("LITEGPU_CACHE_DIR"):
    import atexit
    import shutil
    import tempfile

    os.environ["LITEGPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="litegpu-test-cache-")
    atexit.register(shutil.rmtree, os.environ["LITEGPU_CACHE_DIR"], ignore_errors=True)


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


from _litegpu_backends import load_backend_delegate, missing_kernels  # noqa: E402,F401

# --------------------------------------------------------------------------- sampled sweeps
# A sweep is a test parametrized over many cases whose every case costs a driver compile (PoCL, lavapipe,
# glslc): all of them take most of an hour on a 2-core machine with cold driver caches.  The default run
# (`make test`, `-m "not slow"`) keeps a deterministic sample of each sweep: every case whose position in
# its test function is a multiple of `every`, plus the first case of each group named by `by` (so every
# kernel, op or API keeps at least one case).  The rest are marked `slow`; `make test-all` runs them too.
# The sample depends only on the collection order, so every machine runs the same cases.


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sweep(every, by=None): sample this parametrized test in the default run (see conftest.py)")


def pytest_collection_modifyitems(config, items):
    seen_pos: dict[tuple, int] = {}
    seen_groups: set[tuple] = set()
    for item in items:
        mark = item.get_closest_marker("sweep")
        callspec = getattr(item, "callspec", None)
        if mark is None or callspec is None:
            continue
        every = int(mark.kwargs.get("every", mark.args[0] if mark.args else 1))
        by = mark.kwargs.get("by")
        func = (item.module.__name__, item.originalname)
        pos = seen_pos.get(func, 0)
        seen_pos[func] = pos + 1
        group = (*func, by(callspec.params) if by is not None else None)
        first_of_group = group not in seen_groups
        seen_groups.add(group)
        if pos % every and not first_of_group:
            item.add_marker(pytest.mark.slow)
